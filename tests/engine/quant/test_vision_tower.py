"""The converter keeps GLM-5.3-Flash's vision tower, and the loader hands it to vLLM intact.

GLM-5.3-Flash ships its vision tower (``model.visual.*``) in BF16 inside the FP8 checkpoint;
vLLM's ``Glm5NextForConditionalGeneration`` builds it with ``quant_config=None`` and maps
``model.visual.`` to its ``visual.`` module. So the converter must store every vision tensor
losslessly (P12 for BF16: 12 bits per value on disk, bit-exact back) and never route one to
W2, and the load path (``decode_stream``, what the ``w2_quant`` loader wraps) must give each
back as BF16 under its original name, conv kernels in their full rank included.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
import torch

from engine.codecs import p12
from engine.codecs.p12_stream import LoadStats, decode_stream
from engine.quant.manifest import Manifest
from engine.quant.pipeline import ConvertOptions, convert
from tests.engine.quant.conftest import one_thread
from tests.support.glm_fixture import TinyGLM, build_tiny_glm, read_checkpoint, vision_shapes

VISUAL = "model.visual."


@pytest.fixture(scope="module")
def with_vision(tmp_path_factory: pytest.TempPathFactory) -> tuple[TinyGLM, Path]:
    root = tmp_path_factory.mktemp("glm-vision")
    with one_thread():
        model = build_tiny_glm(root / "src", vision=True)
        dst = root / "out"
        convert(model.path, dst, ConvertOptions(method="rtn", pool_gb=0.0))
    return model, dst


def test_every_vision_tensor_is_stored_losslessly(with_vision: tuple[TinyGLM, Path]) -> None:
    model, dst = with_vision
    visual = {n: t for n, t in model.raw.items() if n.startswith(VISUAL)}
    assert set(visual) == set(vision_shapes(model.dims)) and len(visual) > 30
    stored = read_checkpoint(dst)
    stats = Manifest.load(dst).all_stats()
    for name, raw in visual.items():
        assert raw.dtype == torch.bfloat16
        assert stats[name]["kind"] == "p12", name  # never "w2", never dropped
        back = p12.unpack(p12.PackedBF16.from_state_dict(stored, name))
        assert back.shape == raw.shape and torch.equal(
            back.view(torch.int16), raw.view(torch.int16)
        ), name
    assert not any(
        n.startswith(VISUAL) and n.endswith(("_packed", "_scale", "_fp4")) for n in stored
    )
    config = json.loads((dst / "config.json").read_text())
    assert config["vision_config"] == model.config["vision_config"]
    assert config["architectures"] == ["Glm5NextForConditionalGeneration"]


def test_the_loader_hands_the_vision_tower_over_bit_exact(
    with_vision: tuple[TinyGLM, Path],
) -> None:
    model, dst = with_vision
    stats = LoadStats()
    loaded = dict(decode_stream(read_checkpoint(dst).items(), stats=stats))
    visual = {n: t for n, t in model.raw.items() if n.startswith(VISUAL)}
    for name, raw in visual.items():
        got = loaded[name]
        assert got.dtype == torch.bfloat16 and got.shape == raw.shape, name
        assert torch.equal(got.view(torch.int16), raw.view(torch.int16)), name
    assert not any("_p12" in n for n in loaded)
    assert stats.p12_decoded >= len(visual)


def _class_node(path: Path, name: str) -> ast.ClassDef:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    raise AssertionError(f"{name} not found in {path}")


def test_vllm_maps_model_visual_to_its_unquantized_tower() -> None:
    """Read from the installed vLLM's source: importing ``glm4_1v`` needs torchvision, which
    cannot be installed next to the CPU torch build (``shared/notes/cpu-engine.md``)."""
    import importlib.util

    spec = importlib.util.find_spec("vllm")  # located, not imported: an import costs ~20 s
    assert spec is not None and spec.origin is not None
    root = Path(spec.origin).parent
    glm5 = _class_node(root / "models/glm5next/common/model.py", "Glm5NextForConditionalGeneration")
    bases = {ast.unparse(b) for b in glm5.bases}
    assert "Glm4vForConditionalGeneration" in bases
    own = {
        t.id
        for n in glm5.body
        if isinstance(n, ast.Assign)
        for t in n.targets
        if isinstance(t, ast.Name)
    }
    assert "hf_to_vllm_mapper" not in own  # inherits GLM-4V's prefixes
    tower = [
        c
        for c in ast.walk(glm5)
        if isinstance(c, ast.Call) and ast.unparse(c.func) == "Glm5NextVisionTransformer"
    ]
    assert tower and all(
        ast.unparse(k.value) == "None" for c in tower for k in c.keywords if k.arg == "quant_config"
    )
    glm4v = _class_node(root / "model_executor/models/glm4_1v.py", "Glm4vForConditionalGeneration")
    mappers = [
        n.value
        for n in glm4v.body
        if isinstance(n, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "hf_to_vllm_mapper" for t in n.targets)
    ]
    assert len(mappers) == 1 and isinstance(mappers[0], ast.Call)
    prefixes = next(
        ast.literal_eval(k.value) for k in mappers[0].keywords if k.arg == "orig_to_new_prefix"
    )
    assert prefixes["model.visual."] == "visual."


def test_the_memory_table_counts_the_real_vision_tower() -> None:
    """``bench/targets/p12_memory.py`` (the docs' memory table and the Spark profile's budget)
    lists exactly the tensors of transformers' ``Glm5NextVisionModel`` at GLM-5.3-Flash's sizes."""
    from transformers.models.glm5_next.configuration_glm5_next import Glm5NextVisionConfig
    from transformers.models.glm5_next.modeling_glm5_next import Glm5NextVisionModel

    from bench.targets import p12_memory as bench

    listed = {name.removeprefix(VISUAL): shape for name, shape, _, _ in bench.vision_tensors()}
    v = bench.VISION
    config = Glm5NextVisionConfig(
        depth=v["depth"],
        hidden_size=v["hidden"],
        num_heads=v["heads"],
        intermediate_size=v["inter"],
        out_hidden_size=v["out"],
        projection_intermediate_size=v["proj_inter"],
        patch_size=v["patch"],
        temporal_patch_size=v["temporal"],
        spatial_merge_size=v["merge"],
    )
    with torch.device("meta"):
        real = Glm5NextVisionModel(config)
    assert listed == {n: tuple(t.shape) for n, t in real.state_dict().items()}
    values = sum(t.numel() for t in real.state_dict().values())
    assert values == 563_627_008  # 1.05 GiB as BF16: the figure in docs/quant-format.md
    assert {d for _, _, d, _ in bench.vision_tensors()} == {"bf16"}
