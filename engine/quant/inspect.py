"""``sparkcode quantize inspect``: per-layer error and sizes of a converted model.

The conversion records, for every tensor, its source and output size and, for
routed experts, the relative Frobenius error ``||W - Q|| / ||W||`` and (when a
calibration file was used) the output error ``||(W - Q) X|| / ||W X||`` on the
calibration inputs. This module aggregates those records from the output's
``manifest.json`` per layer; it never needs the source checkpoint.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.errors import UserError
from engine.quant.manifest import Manifest
from engine.units import human_bytes


class InspectError(UserError):
    """The directory is not a finished sparkcode conversion."""


@dataclass
class LayerSummary:
    """Aggregates over one layer (``layer`` None: embeddings, head, final norm)."""

    layer: int | None
    w2_tensors: int = 0
    rel_fro: list[float] = field(default_factory=list)
    out_err: list[float] = field(default_factory=list)
    gptq: int = 0
    fallbacks: int = 0
    pooled_experts: set[int] = field(default_factory=set)
    src_bytes: int = 0
    out_bytes: int = 0
    fp4_bytes: int = 0

    @staticmethod
    def _mean(values: list[float]) -> float | None:
        return sum(values) / len(values) if values else None

    @property
    def mean_rel_fro(self) -> float | None:
        return self._mean(self.rel_fro)

    @property
    def mean_out_err(self) -> float | None:
        return self._mean(self.out_err)

    @property
    def max_out_err(self) -> float | None:
        return max(self.out_err) if self.out_err else None


@dataclass
class InspectReport:
    """Everything ``inspect`` prints."""

    path: Path
    format_version: int | None
    method: str
    layers: list[LayerSummary]
    bytes_by_kind: dict[str, tuple[int, int]]  # kind -> (source bytes, output bytes)
    pool: dict[str, Any]
    file_bytes: int

    def to_json(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "format_version": self.format_version,
            "method": self.method,
            "file_bytes": self.file_bytes,
            "bytes_by_kind": {k: {"src": s, "out": o} for k, (s, o) in self.bytes_by_kind.items()},
            "pool": {k: v for k, v in self.pool.items() if k != "experts"}
            | {"experts": len(self.pool.get("experts", []))},
            "layers": [
                {
                    "layer": r.layer,
                    "w2_tensors": r.w2_tensors,
                    "rel_fro": r.mean_rel_fro,
                    "out_err": r.mean_out_err,
                    "max_out_err": r.max_out_err,
                    "gptq": r.gptq,
                    "fallbacks": r.fallbacks,
                    "pooled_experts": len(r.pooled_experts),
                    "src_bytes": r.src_bytes,
                    "out_bytes": r.out_bytes,
                    "fp4_bytes": r.fp4_bytes,
                }
                for r in self.layers
            ],
        }


def inspect_model(path: Path) -> InspectReport:
    """Read a converted model directory and aggregate its manifest per layer."""
    if not path.is_dir():
        raise InspectError(f"{path} is not a directory")
    config_path = path / "config.json"
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
        qc = config.get("quantization_config") or {}
    except (OSError, ValueError) as exc:
        raise InspectError(f"{config_path} is missing or not JSON: {exc}") from exc
    manifest = Manifest.load(path)
    if not manifest.complete:
        raise InspectError(f"{path} is an unfinished conversion (resume it first)")
    layers: dict[int | None, LayerSummary] = {}
    kinds: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for stats in manifest.all_stats().values():
        layer = stats.get("layer")
        row = layers.setdefault(layer, LayerSummary(layer))
        kind = str(stats.get("kind", "copy"))
        if kind == "copy":
            kind = f"copy {stats.get('dtype', '?')}"
        src, out = int(stats.get("src_bytes", 0)), int(stats.get("out_bytes", 0))
        kinds[kind][0] += src
        kinds[kind][1] += out
        row.src_bytes += src
        row.out_bytes += out
        if stats.get("kind") == "w2":
            row.w2_tensors += 1
            row.rel_fro.append(float(stats["rel_fro"]))
            if "out_err" in stats:
                row.out_err.append(float(stats["out_err"]))
            row.gptq += stats.get("method") == "gptq"
            row.fallbacks += stats.get("hessian") in ("pooled", "rtn")
            if "fp4_bytes" in stats:
                row.pooled_experts.add(int(stats["expert"]))
                row.fp4_bytes += int(stats["fp4_bytes"])
                kinds["fp4 pool"][1] += int(stats["fp4_bytes"])
                row.out_bytes += int(stats["fp4_bytes"])
    file_bytes = sum(p.stat().st_size for p in path.glob("*.safetensors"))
    ordered = sorted(layers.values(), key=lambda r: (r.layer is not None, r.layer or 0))
    return InspectReport(
        path,
        qc.get("format_version"),
        str((qc.get("routed_experts") or {}).get("method", "?")),
        ordered,
        {k: (v[0], v[1]) for k, v in sorted(kinds.items())},
        manifest.pool,
        file_bytes,
    )


def _fmt(value: float | None, spec: str = ".4f") -> str:
    return "-" if value is None or math.isnan(value) else format(value, spec)


def _size(n: float) -> str:
    return human_bytes(n, digits=2)


def render_text(report: InspectReport) -> str:
    """A plain-text table (the CLI prints it)."""
    lines = [
        f"{report.path}: format version {report.format_version}, experts by {report.method}, "
        f"{_size(report.file_bytes)} on disk",
        "",
        f"{'layer':>6} {'W2':>5} {'rel_fro':>8} {'out_err':>8} {'max_out':>8} {'fallbk':>6} "
        f"{'pool':>5} {'source':>11} {'output':>11}",
    ]
    for r in report.layers:
        name = "top" if r.layer is None else str(r.layer)  # embeddings, head, final norm
        lines.append(
            f"{name:>6} {r.w2_tensors:>5} {_fmt(r.mean_rel_fro):>8} {_fmt(r.mean_out_err):>8} "
            f"{_fmt(r.max_out_err):>8} {r.fallbacks:>6} {len(r.pooled_experts):>5} "
            f"{_size(r.src_bytes):>11} {_size(r.out_bytes):>11}"
        )
    lines += ["", "sizes by kind (source -> output):"]
    for kind, (src, out) in report.bytes_by_kind.items():
        ratio = f"  ({out / src:.3f}x)" if src else ""
        lines.append(f"  {kind:<12} {_size(src):>11} -> {_size(out):>11}{ratio}")
    pool = report.pool
    if pool:
        lines.append(
            f"fp4 pool: {len(pool.get('experts', []))} experts, {_size(int(pool.get('bytes', 0)))}"
            f" of {_size(int(pool.get('budget_bytes', 0)))}, coverage "
            f"{100 * float(pool.get('coverage', 0.0)):.1f}% of routed tokens "
            f"(counts: {pool.get('counts_from', '?')})"
        )
    return "\n".join(lines)
