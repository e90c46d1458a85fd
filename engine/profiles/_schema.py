"""Engine profiles: parsed and validated from TOML.

A profile is data only; :mod:`engine.profiles._render` turns it into the exact
argument list and environment of one launch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from msgspec import Meta

from engine.errors import ProfileError

from ._cpu import cpu_computes_bf16, cpu_has_vnni, ram_gib
from ._knobs import AgentKnobs
from ._nodes import NodesSpec, NodesTable, parse_nodes
from ._toml import TomlTable, decode_toml

ProfileKind = Literal["vllm", "endpoint"]
BUILTIN_MODELS: tuple[str, ...] = (
    "smollm2-135m-instruct",
    "qwen2.5-coder-0.5b-instruct",
    "qwen2.5-coder-1.5b-instruct",
    "qwen2.5-coder-1.5b-instruct-w8a8",
)
PLUGIN_FEATURES: tuple[str, ...] = (
    "scheduler_fix",
    "w2_quant",
    "fp4_pool",
    "calib_capture",
    "p12_packed",
    "turn_states",
    "cpu_seeded_chunks",
    "cpu_int8_float32",
)

USAGE_STATS_OFF: dict[str, str] = {"VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
"""What every engine launch sets unless its profile says ``[server] usage_stats = true``:
vLLM 0.32 (``vllm/usage/usage_lib.py``) otherwise posts the machine's hardware, the model's
architecture and the engine's settings to https://stats.vllm.ai at start and every ten
minutes after. ``VLLM_DO_NOT_TRACK`` is vLLM's third switch; a profile's ``[env]`` names
none of them (``[server] usage_stats`` is the one place that says it)."""
_USAGE_SWITCHES = (*USAGE_STATS_OFF, "VLLM_DO_NOT_TRACK")

TURN_STATE_UNIT = 16
"""``--prefix-match-unit`` of profiles with the ``turn_states`` feature: the finest
position a hybrid prefix hit can land on (and a prompt-end KDA state be kept at).
16 divides every KV-cache group's block vLLM builds (attention blocks are multiples
of 16 on CUDA and the CPU, Mamba blocks multiples of 128 on GLM-5.3-Flash) and is
FlashKDA's prefill checkpoint alignment, so on the Spark the prompt-end state is
exported from inside the last chunk with no extra forward pass. Finer would hash
more often (one hash per 16 tokens: 12,800 for a 204,800-token context) for at most
15 tokens less re-prefill per turn."""

DEFAULT_KEPT_TURN_STATES = 8
"""``[plugin] kept_turn_states`` when a profile selects ``turn_states`` and says no
number. One kept state costs one Mamba page in every KDA layer: ~152 MiB for
GLM-5.3-Flash (34 x 4.48 MiB, :mod:`engine.pagemath`), so 8 hold ~1.2 GiB of the
~13 GiB a Spark leaves for KV and state: the main conversation, a few explore
subagents and a second session each keep their latest turn."""


@dataclass(frozen=True)
class SpeculativeSpec:
    """``--speculative-config`` for a drafter."""

    method: str
    model: str | None
    num_speculative_tokens: int
    draft_block_size: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Profile:
    """One engine configuration, as written in its TOML file."""

    name: str
    kind: ProfileKind
    description: str
    source: Path
    # vllm profiles
    model_path: str | None = None
    model_builtin: str | None = None
    served_name: str | None = None
    quantization: str | None = None
    vision: bool = False
    """The model takes images (``[model] vision``, or ``[endpoint] vision``): the
    agent sends image attachments only then, and refuses them by name otherwise."""
    port: int = 8400
    host: str = "127.0.0.1"
    max_model_len: int | None = None
    dtype: str | None = None
    enforce_eager: bool = False
    enable_prefix_caching: bool | None = None
    reasoning_parser: str | None = None
    tool_call_parser: str | None = None
    enable_auto_tool_choice: bool = False
    reasoning_config: dict[str, Any] | None = None
    model_runner_v2: bool = False
    gpu_memory_utilization: float | None = None
    usage_stats: bool = False
    """``[server] usage_stats``: let vLLM report usage statistics to its authors' server
    (off unless true: every launch sets :data:`USAGE_STATS_OFF`, docs/connections.md)."""
    extra_args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    speculative: SpeculativeSpec | None = None
    plugin_enabled: bool = False
    plugin_features: tuple[str, ...] = ()
    kept_turn_states: int | None = None
    """``[plugin] kept_turn_states``: how many prompt-end KDA/Mamba states the
    ``turn_states`` feature keeps per Mamba group (None: the default)."""
    cpu_kvcache_space_gib: int | None = None
    cpu_bind_all_cores: bool = False
    memory_need_gib: float | None = None
    cpu_without_bf16: bool = False
    """This machine's CPU has no bf16 arithmetic and ``[cpu.without_bf16]`` replaced
    ``dtype`` and ``memory_need_gib`` above (:mod:`engine.profiles._cpu`)."""
    cpu_with_vnni: str | None = None
    """The ``[model] builtin`` that ``[cpu.with_vnni]`` replaced in ``model_builtin``
    (and ``memory_need_gib`` where it gives one) above, this machine's CPU having int8
    dot products; None where that did not happen."""
    # endpoint profiles
    base_url: str | None = None
    endpoint_model: str | None = None
    api_key_env: str | None = None
    agent: AgentKnobs = field(default_factory=AgentKnobs)
    """The ``[agent]`` table: the agent's knobs this profile sets (unset: ``None``)."""
    nodes: NodesSpec | None = None
    """Multi-node profiles: the ``[nodes]`` table (``engine/profiles/_nodes.py``)."""


class _Table(TomlTable, frozen=True):
    """One table of a profile file; ``None``: not given (the defaults are ``Profile``'s)."""


_Positive = Annotated[int, Meta(ge=1, description="positive")]


class _ProfileTable(_Table, frozen=True):
    name: str = ""
    kind: ProfileKind = "vllm"
    description: str = ""


class _ModelTable(_Table, frozen=True):
    path: str | None = None
    builtin: str | None = None
    served_name: str | None = None
    quantization: str | None = None
    vision: bool | None = None


class _ServerTable(_Table, frozen=True):
    port: Annotated[int, Meta(ge=1, le=65535, description="positive and at most 65535")] | None = (
        None
    )
    host: str | None = None
    max_model_len: _Positive | None = None
    dtype: str | None = None
    enforce_eager: bool | None = None
    enable_prefix_caching: bool | None = None
    reasoning_parser: str | None = None
    tool_call_parser: str | None = None
    enable_auto_tool_choice: bool | None = None
    reasoning_config: dict[str, Any] | None = None
    model_runner_v2: bool | None = None
    gpu_memory_utilization: Annotated[float, Meta(gt=0, le=1, description="in (0, 1]")] | None = (
        None
    )
    usage_stats: bool | None = None
    extra_args: tuple[str, ...] | None = None


class _SpeculativeTable(_Table, frozen=True):
    method: str = ""
    model: str | None = None
    num_speculative_tokens: _Positive | None = None
    draft_block_size: _Positive | None = None


class _PluginTable(_Table, frozen=True):
    enabled: bool | None = None
    features: tuple[str, ...] = ()
    kept_turn_states: Annotated[int, Meta(ge=1, le=1024, description="1 to 1024")] | None = None


class _WithoutBf16Table(_Table, frozen=True):
    """``[cpu.without_bf16]``: what changes on a CPU without bf16 arithmetic."""

    dtype: str | None = None
    need_gib: Annotated[float, Meta(gt=0, description="positive")] | None = None
    min_ram_gib: Annotated[float, Meta(ge=0, description="zero or positive")] = 0.0
    """Only on a machine with at least this much memory (else the profile stays as
    written)."""


class _WithVnniTable(_Table, frozen=True):
    """``[cpu.with_vnni]``: what changes on a CPU with int8 dot products."""

    builtin: str | None = None
    """The builtin model served instead of ``[model] builtin`` (its W8A8 copy)."""
    need_gib: Annotated[float, Meta(gt=0, description="positive")] | None = None


class _CpuTable(_Table, frozen=True):
    kvcache_space_gib: _Positive | None = None
    bind_all_cores: bool | None = None
    without_bf16: _WithoutBf16Table | None = None
    with_vnni: _WithVnniTable | None = None


class _MemoryTable(_Table, frozen=True):
    need_gib: Annotated[float, Meta(gt=0, description="positive")] | None = None


class _EndpointTable(_Table, frozen=True):
    base_url: str = ""
    model: str | None = None
    api_key_env: str | None = None
    vision: bool | None = None


class _ProfileFile(_Table, frozen=True):
    """A profile file: its tables (docs/profiles.md)."""

    profile: _ProfileTable = _ProfileTable()
    model: _ModelTable = _ModelTable()
    server: _ServerTable = _ServerTable()
    env: Annotated[
        dict[str, str | int | float], Meta(description="a table of strings or numbers")
    ] = {}
    speculative: _SpeculativeTable | None = None
    plugin: _PluginTable = _PluginTable()
    cpu: _CpuTable = _CpuTable()
    memory: _MemoryTable = _MemoryTable()
    endpoint: _EndpointTable = _EndpointTable()
    agent: AgentKnobs = AgentKnobs()
    nodes: NodesTable | None = None


def _given(table: _Table, **renamed: str) -> dict[str, Any]:
    """The keys a table gives, under ``Profile``'s names (``renamed``: key -> field)."""
    return {
        renamed.get(name, name): getattr(table, name)
        for name in table.__struct_fields__
        if getattr(table, name) is not None
    }


def parse_profile(text: str, source: Path) -> Profile:
    """Parse and validate one profile's TOML text."""
    doc = decode_toml(text, _ProfileFile, source, ProfileError, colon=False)
    meta = doc.profile
    if not meta.name:
        raise ProfileError(f"{source}: [profile] name is required")
    common: dict[str, Any] = {
        "name": meta.name,
        "description": meta.description,
        "source": source,
        "agent": doc.agent,
    }
    if meta.kind == "endpoint":
        if doc.nodes is not None:
            raise ProfileError(
                f"{source}: [nodes] is for vllm profiles; an endpoint runs no engine"
            )
        ep = doc.endpoint
        if not ep.base_url.startswith(("http://", "https://")):
            raise ProfileError(f"{source}: [endpoint] base_url must be an http(s) URL")
        key_env = ep.api_key_env
        if key_env is not None and not key_env.replace("_", "").isalnum():
            raise ProfileError(
                f"{source}: [endpoint] api_key_env must name an environment variable, "
                "not hold a key"
            )
        return Profile(
            kind="endpoint",
            base_url=ep.base_url.rstrip("/"),
            endpoint_model=ep.model or None,
            api_key_env=key_env,
            vision=bool(ep.vision),
            **common,
        )

    model = doc.model
    if (model.path is None) == (model.builtin is None):
        raise ProfileError(f"{source}: [model] needs exactly one of 'path' or 'builtin'")
    _check_builtin(source, "[model] builtin", model.builtin)
    vnni = doc.cpu.with_vnni
    if vnni is not None:
        if vnni.builtin is not None and model.builtin is None:
            raise ProfileError(
                f"{source}: [cpu.with_vnni] builtin replaces [model] builtin; "
                "a profile with [model] path has none"
            )
        _check_builtin(source, "[cpu.with_vnni] builtin", vnni.builtin)
    server = doc.server
    if server.enable_auto_tool_choice and not server.tool_call_parser:
        raise ProfileError(
            f"{source}: [server] enable_auto_tool_choice needs tool_call_parser (vLLM requires it)"
        )
    for feat in doc.plugin.features:
        if feat not in PLUGIN_FEATURES:
            raise ProfileError(
                f"{source}: [plugin] unknown feature {feat!r} (known: {', '.join(PLUGIN_FEATURES)})"
            )
    if doc.plugin.kept_turn_states is not None and "turn_states" not in doc.plugin.features:
        raise ProfileError(
            f"{source}: [plugin] kept_turn_states needs the turn_states feature "
            "in [plugin] features"
        )
    if "turn_states" in doc.plugin.features and server.enable_prefix_caching is False:
        raise ProfileError(
            f"{source}: [plugin] feature turn_states keeps states in the prefix "
            "cache, but [server] enable_prefix_caching is false"
        )
    for name in _USAGE_SWITCHES:
        if name in doc.env:
            raise ProfileError(
                f"{source}: [env] {name}: vLLM's usage reporting is said by "
                "[server] usage_stats (off unless it is true)"
            )
    nodes = parse_nodes(source, doc.nodes, server.extra_args or ())
    fields: dict[str, Any] = {
        **_given(model, path="model_path", builtin="model_builtin"),
        **_given(server),
        **_given(doc.plugin, enabled="plugin_enabled", features="plugin_features"),
        **_given(
            doc.cpu, kvcache_space_gib="cpu_kvcache_space_gib", bind_all_cores="cpu_bind_all_cores"
        ),
        **_given(doc.memory, need_gib="memory_need_gib"),
    }
    without = fields.pop("without_bf16", None)
    if without is not None and not cpu_computes_bf16() and ram_gib() >= without.min_ram_gib:
        fields.update(_given(without, need_gib="memory_need_gib"), cpu_without_bf16=True)
        del fields["min_ram_gib"]  # the condition, not a Profile field
    fields.pop("with_vnni", None)
    if vnni is not None and cpu_has_vnni():
        fields.update(
            _given(vnni, builtin="model_builtin", need_gib="memory_need_gib"),
            cpu_with_vnni=model.builtin,
        )

    return Profile(
        kind="vllm",
        **common,
        **fields,
        env={key: str(value) for key, value in doc.env.items()},
        speculative=_speculative(source, doc.speculative),
        nodes=nodes,
    )


def _check_builtin(source: Path, key: str, name: str | None) -> None:
    if name is not None and name not in BUILTIN_MODELS:
        raise ProfileError(
            f"{source}: {key} {name!r} is unknown (known: {', '.join(BUILTIN_MODELS)})"
        )


def _speculative(source: Path, spec: _SpeculativeTable | None) -> SpeculativeSpec | None:
    if spec is None:
        return None
    if not spec.method:
        raise ProfileError(f"{source}: [speculative] method is required")
    k = spec.num_speculative_tokens
    if k is None:
        raise ProfileError(f"{source}: [speculative] num_speculative_tokens is required")
    block = spec.draft_block_size
    if spec.method == "dflash":
        block = block or 8
        # A DFlash drafter predicts one block per step; the first slot is the
        # verified token, so at most block - 1 tokens can be speculated.
        if k > block - 1:
            raise ProfileError(
                f"{source}: [speculative] num_speculative_tokens={k} exceeds the DFlash "
                f"drafter's block of {block} (at most {block - 1})"
            )
        if not spec.model:
            raise ProfileError(f"{source}: [speculative] dflash needs the drafter 'model' path")
    return SpeculativeSpec(
        method=spec.method, model=spec.model, num_speculative_tokens=k, draft_block_size=block
    )


def load_profile_file(path: Path) -> Profile:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ProfileError(f"cannot read profile {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ProfileError(f"{path}: not UTF-8 text") from None
    return parse_profile(text, path)
