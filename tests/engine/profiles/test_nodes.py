"""The [nodes] table: parsing, refusals and the per-node launches it renders."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.errors import ProfileError
from engine.paths import Paths
from engine.profiles import Profile, load_profile, parse_profile, render, render_nodes

BASE = """
[profile]
name = "two"

[model]
path = "{model}"
served_name = "tiny"

[server]
port = 8411
max_model_len = 2048
extra_args = {extra}

[nodes]
parallel = "{parallel}"
tensor_parallel = {tp}
master_port = 29555
{more}

[nodes.head]
address = "10.0.0.1"
nic = "eth9"

[nodes.worker]
address = "10.0.0.2"
ssh = "spark2"
nic = "eth8"

[nodes.nccl]
NCCL_IB_DISABLE = "0"
NCCL_IB_GID_INDEX = 3
"""


def _profile(
    model: Path, *, parallel: str = "tp", tp: int = 2, more: str = "", extra: str = "[]"
) -> Profile:
    text = BASE.format(model=model, parallel=parallel, tp=tp, more=more, extra=extra)
    return parse_profile(text, Path("two.toml"))


def _model(tmp_path: Path, **config: object) -> Path:
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    fields = {
        "architectures": ["Qwen3MoeForCausalLM"],
        "model_type": "qwen3_moe",
        "num_attention_heads": 4,
        "num_experts": 4,
        **config,
    }
    (model / "config.json").write_text(json.dumps(fields))
    return model


def _strip(argv: list[str], *flags: str) -> list[str]:
    """argv without the given flags and their values (and a bare --headless)."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg in flags:
            skip = arg != "--headless"
            continue
        out.append(arg)
    return out


def test_two_launches_differ_only_in_rank_headless_host_and_node_address(
    tmp_path: Path, paths: Paths
) -> None:
    prof = _profile(_model(tmp_path), more="decode_context_parallel = 2")
    head, worker = render_nodes(prof, paths, python="/py")
    assert head.argv[:3] == ["/py", "-m", "engine.serve"] == worker.argv[:3]
    for flag, value in (
        ("--tensor-parallel-size", "2"),
        ("--nnodes", "2"),
        ("--master-addr", "10.0.0.1"),
        ("--master-port", "29555"),
        ("--decode-context-parallel-size", "2"),
    ):
        assert head.argv[head.argv.index(flag) + 1] == value
        assert worker.argv[worker.argv.index(flag) + 1] == value
    assert head.argv[head.argv.index("--node-rank") + 1] == "0"
    assert worker.argv[worker.argv.index("--node-rank") + 1] == "1"
    assert "--headless" in worker.argv and "--headless" not in head.argv
    assert head.argv[head.argv.index("--host") + 1] == "127.0.0.1"
    assert worker.argv[worker.argv.index("--host") + 1] == "10.0.0.2"
    assert _strip(head.argv, "--node-rank", "--host") == _strip(
        worker.argv, "--node-rank", "--host", "--headless"
    )
    node_keys = {"VLLM_HOST_IP", "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"}
    assert (head.env["VLLM_HOST_IP"], worker.env["VLLM_HOST_IP"]) == ("10.0.0.1", "10.0.0.2")
    assert (head.env["NCCL_SOCKET_IFNAME"], worker.env["GLOO_SOCKET_IFNAME"]) == ("eth9", "eth8")
    assert {k: v for k, v in head.env.items() if k not in node_keys} == {
        k: v for k, v in worker.env.items() if k not in node_keys
    }
    assert head.env["NCCL_IB_GID_INDEX"] == "3"
    assert (worker.node, worker.node_rank, worker.ssh) == ("worker", 1, "spark2")
    assert head.workers == (worker,) and render(prof, paths).workers[0].ssh == "spark2"
    assert "--enable-expert-parallel" not in head.argv


def test_tp_plus_ep_adds_expert_parallel_on_both(tmp_path: Path, paths: Paths) -> None:
    head, worker = render_nodes(_profile(_model(tmp_path), parallel="tp+ep"), paths)
    assert "--enable-expert-parallel" in head.argv and "--enable-expert-parallel" in worker.argv


@pytest.mark.parametrize("parallel", ["pp", "tp+pp"])
def test_pipeline_parallel_is_refused_with_the_reason(tmp_path: Path, parallel: str) -> None:
    with pytest.raises(ProfileError, match="pipeline parallelism is not offered: GLM-5.3-Flash"):
        _profile(_model(tmp_path), parallel=parallel)


def test_pp_in_extra_args_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match=r"extra_args: -pp: pipeline parallelism"):
        _profile(_model(tmp_path), extra='["-pp", "2"]')
    with pytest.raises(ProfileError, match=r"extra_args: --nnodes: the \[nodes\] table sets"):
        _profile(_model(tmp_path), extra='["--nnodes", "3"]')


def test_pp_for_glm53_flash_is_refused_even_on_one_node(tmp_path: Path, paths: Paths) -> None:
    model = _model(tmp_path, architectures=["Glm5NextForCausalLM"], model_type="glm5_next")
    text = f"""[profile]\nname = "one"\n[model]\npath = "{model}"\n
[server]\nextra_args = ["--pipeline-parallel-size=2"]\n"""
    with pytest.raises(ProfileError, match="--pipeline-parallel-size 2: pipeline parallelism"):
        render(parse_profile(text, Path("one.toml")), paths)


def test_tp_that_does_not_divide_the_heads_is_refused(tmp_path: Path, paths: Paths) -> None:
    prof = _profile(_model(tmp_path, num_attention_heads=6), tp=4)
    with pytest.raises(
        ProfileError, match="tensor_parallel = 4 does not divide the model's 6 attention heads"
    ):
        render(prof, paths)
    nested = _profile(_model(tmp_path, text_config={"num_attention_heads": 6}), tp=4)
    with pytest.raises(ProfileError, match="does not divide the model's 6"):
        render(nested, paths)


def test_expert_parallel_needs_experts_where_the_config_names_them(
    tmp_path: Path, paths: Paths
) -> None:
    dense = tmp_path / "dense"
    dense.mkdir()
    (dense / "config.json").write_text(
        json.dumps({"architectures": ["LlamaForCausalLM"], "num_attention_heads": 4})
    )
    with pytest.raises(
        ProfileError,
        match='parallel = "tp\\+ep" needs a mixture-of-experts '
        f"model; {dense / 'config.json'} names no experts",
    ):
        render(_profile(dense, parallel="tp+ep"), paths)
    # A multimodal config nests the language model's experts (GLM-5.3-Flash's 288).
    nested = _model(
        tmp_path, num_experts=None, text_config={"num_attention_heads": 4, "n_routed_experts": 288}
    )
    assert "--enable-expert-parallel" in render(_profile(nested, parallel="tp+ep"), paths).argv


@pytest.mark.parametrize(
    ("more", "message"),
    [
        ("tensor_parallel = 3", "tensor_parallel must be a positive multiple of the 2 nodes"),
        ("decode_context_parallel = 3", "decode_context_parallel must divide tensor_parallel"),
        ("master_port = 70000", "master_port must be in 1..65535"),
        ("colour = 1", "unknown key 'colour'"),
    ],
)
def test_bad_nodes_values_are_named(tmp_path: Path, more: str, message: str) -> None:
    text = BASE.format(model=_model(tmp_path), parallel="tp", tp=2, more=more, extra="[]")
    for key in ("tensor_parallel", "master_port"):
        if more.startswith(key):
            text = text.replace(f"\n{key} = ", f"\n# {key} = ", 1)
    with pytest.raises(ProfileError, match=message):
        parse_profile(text, Path("two.toml"))


def test_node_tables_need_an_address_and_the_head_no_ssh(tmp_path: Path) -> None:
    text = BASE.format(model=_model(tmp_path), parallel="tp", tp=2, more="", extra="[]")
    with pytest.raises(ProfileError, match=r"\[nodes.worker\] address is required"):
        parse_profile(text.replace('address = "10.0.0.2"\n', ""), Path("t.toml"))
    with pytest.raises(ProfileError, match=r"\[nodes.head\] ssh: the head is the machine"):
        parse_profile(text.replace('nic = "eth9"', 'nic = "eth9"\nssh = "x"'), Path("t.toml"))


def test_shipped_two_spark_and_mtp_profiles(paths: Paths) -> None:
    two = load_profile("glm53-flash-2spark", paths)
    one = load_profile("glm53-flash-spark", paths)
    assert two.nodes is not None and two.nodes.worker.ssh and two.nodes.parallel == "tp"
    assert two.nodes.nccl["NCCL_IB_DISABLE"] == "0"
    # The same model, drafter and plugin settings as the one-box recipe.
    assert (two.model_path, two.quantization, two.speculative, two.plugin_features) == (
        one.model_path,
        one.quantization,
        one.speculative,
        one.plugin_features,
    )
    head, worker = render_nodes(two, paths)
    assert "--speculative-config" in worker.argv and worker.env["VLLM_PLUGINS"] == "sparkcode"
    mtp = load_profile("glm53-flash-spark-mtp", paths)
    assert mtp.speculative is not None and mtp.speculative.method == "mtp"
    argv = render(mtp, paths).argv
    config = json.loads(argv[argv.index("--speculative-config") + 1])
    # No drafter path: vLLM drafts from the target checkpoint's own MTP layer.
    assert config == {"method": "mtp", "num_speculative_tokens": 3}


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            'ssh = "spark2"',
            'ssh = "spark2"\ncolour = 1',
            r"^two.toml: \[nodes.worker\] unknown key 'colour' \(known: address, cpus, nic, "
            r"sparkcode, ssh\)$",
        ),
        (
            'nic = "eth8"',
            "nic = 8",
            r"^two.toml: \[nodes.worker\] nic: expected a string, got int$",
        ),
        (
            'nic = "eth8"',
            'nic = " "',
            r"^two.toml: \[nodes.worker\] nic must be a non-empty string",
        ),
        (
            "master_port = 29555",
            'master_port = "x"',
            r"^two.toml: \[nodes\] master_port: expected an integer, got str$",
        ),
        (
            "NCCL_IB_GID_INDEX = 3",
            "NCCL_IB_GID_INDEX = true",
            r"^two.toml: \[nodes\] nccl must be a table of strings or integers, "
            r"got NCCL_IB_GID_INDEX = true$",
        ),
        (
            '[nodes.head]\naddress = "10.0.0.1"\nnic = "eth9"\n',
            "",
            r"^two.toml: \[nodes\] head is required$",
        ),
    ],
)
def test_nodes_keys_and_types_are_named_with_the_file(
    tmp_path: Path, old: str, new: str, message: str
) -> None:
    text = BASE.format(model=_model(tmp_path), parallel="tp", tp=2, more="", extra="[]")
    assert old in text
    with pytest.raises(ProfileError, match=message):
        parse_profile(text.replace(old, new, 1), Path("two.toml"))
