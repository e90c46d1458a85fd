"""Streaming conversion of the FP8 GLM-5.3-Flash checkpoint into the sparkcode format.

One source shard in, one output shard out (same file name), in index order:

* routed experts -> W2 (2-bit codes, ue5m3 scales per 32), by RTN or GPTQ;
  experts in the FP4 hot pool also get an NVFP4 copy next to their W2 tensors;
* BF16 tensors -> lossless 12-bit P12 packing;
* everything else (FP8 weights with their scales, F32) -> copied unchanged.

Memory: one output shard, one source tensor, and for GPTQ one layer's
calibration inputs and Hessians. Output goes to ``.<DST>.partial`` next to DST;
each finished shard is renamed into place and recorded in the manifest with a
sha256 per tensor, so a stopped run resumes (``resume=True``) at the first
unfinished shard. The directory is renamed to DST only when every shard is
done, so DST is either absent or complete.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

import torch

from engine.errors import UserError
from engine.quant import bf16pack, hotpool, nvfp4, w2
from engine.quant.calib import (
    DEFAULT_MIN_TOKENS,
    CalibrationError,
    CalibrationFile,
    DownFallback,
    LayerCalibration,
    expert_counts,
    file_digest,
    route,
)
from engine.quant.checkpoint import (
    INDEX_NAME,
    SCALE_SUFFIX,
    CheckpointError,
    CheckpointReader,
    ShardInfo,
    classify,
)
from engine.quant.format import FORMAT_VERSION, QUANT_METHOD, W2_SCALE_DTYPE
from engine.quant.gptq import gptq_quantize, output_error, relative_frobenius
from engine.quant.manifest import Manifest, ShardRecord, tensor_digest, verify_shard

Method = Literal["gptq", "rtn"]
GiB = 1 << 30


class ConversionError(UserError):
    """The conversion stopped; finished shards are kept for ``--resume``."""


@dataclass(frozen=True)
class ConvertOptions:
    """Everything that decides the output bytes (a resume must use the same)."""

    method: Method = "gptq"
    calib: Path | None = None
    pool_gb: float = 2.0
    damp: float = 0.01
    act_order: bool = True
    blocksize: int = 128
    min_tokens: int = DEFAULT_MIN_TOKENS
    down_fallback: DownFallback = "rtn"
    device: str = "cpu"

    def fingerprint(self, calib_digest: str | None) -> dict[str, Any]:
        d = asdict(self)
        d["calib"] = calib_digest
        d.pop("device")  # where it runs does not change the algorithm
        return d


class Progress(Protocol):
    """What the pipeline reports; the CLI draws progress bars from it."""

    def begin(self, shards: list[ShardInfo], done: set[str]) -> None: ...
    def shard_begin(self, shard: ShardInfo) -> None: ...
    def tensor_done(self, shard: ShardInfo, name: str, nbytes: int) -> None: ...
    def shard_done(self, shard: ShardInfo) -> None: ...
    def note(self, message: str) -> None: ...


class _Silent:
    def begin(self, shards: list[ShardInfo], done: set[str]) -> None: ...
    def shard_begin(self, shard: ShardInfo) -> None: ...
    def tensor_done(self, shard: ShardInfo, name: str, nbytes: int) -> None: ...
    def shard_done(self, shard: ShardInfo) -> None: ...
    def note(self, message: str) -> None: ...


def staging_dir(dst: Path) -> Path:
    return dst.parent / f".{dst.name}.partial"


def _source_fingerprint(reader: CheckpointReader) -> dict[str, Any]:
    h = hashlib.sha256()
    for shard in reader.shards:
        h.update(f"{shard.name}:{shard.size}\n".encode())
        for th in shard.tensors:
            h.update(f"{th.name}:{th.dtype}:{th.shape}\n".encode())
    return {"path": str(reader.root.resolve()), "layout_sha256": h.hexdigest(),
            "shards": len(reader.shards)}


def _text_config(config: dict[str, Any]) -> dict[str, Any]:
    text = config.get("text_config")
    return text if isinstance(text, dict) else config


class _Converter:
    """State of one run: reader, options, calibration cache and pool plan."""

    def __init__(self, reader: CheckpointReader, options: ConvertOptions,
                 calib: CalibrationFile | None, progress: Progress) -> None:
        self.reader = reader
        self.options = options
        self.calib = calib
        self.progress = progress
        text = _text_config(reader.config())
        self.top_k = int(text.get("num_experts_per_tok", 8))
        limit = text.get("swiglu_limit")
        self.swiglu_limit = float(limit) if limit else None
        self.experts = self._expert_table()
        self._layer_cache: LayerCalibration | None = None

    def _expert_table(self) -> dict[int, list[int]]:
        table: dict[int, set[int]] = {}
        for name in self.reader.headers:
            cls = classify(name)
            if cls.kind == "routed_expert" and cls.layer is not None and cls.expert is not None:
                table.setdefault(cls.layer, set()).add(cls.expert)
        return {layer: sorted(ids) for layer, ids in sorted(table.items())}

    def mlp_prefix(self, layer: int) -> str:
        return f"model.language_model.layers.{layer}.mlp."

    def _router(self, layer: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        name = self.mlp_prefix(layer) + "gate.weight"
        if name not in self.reader.headers:
            raise CheckpointError(f"MoE layer {layer} has routed experts but no router {name!r}")
        bias_name = self.mlp_prefix(layer) + "gate.e_score_correction_bias"
        bias = self.reader.dequantized(bias_name) if bias_name in self.reader.headers else None
        return self.reader.dequantized(name), bias

    def layer_calibration(self, layer: int) -> LayerCalibration | None:
        if self.calib is None:
            return None
        if self._layer_cache is not None and self._layer_cache.layer == layer:
            return self._layer_cache
        self._layer_cache = None  # drop the previous layer before loading the next
        inputs = self.calib.inputs(layer)
        if inputs is None:
            return None
        router, bias = self._router(layer)
        self._layer_cache = LayerCalibration.build(
            layer, inputs.to(self.options.device), router.to(self.options.device),
            None if bias is None else bias.to(self.options.device), self.top_k,
            min_tokens=self.options.min_tokens, fallback=self.options.down_fallback,
            swiglu_limit=self.swiglu_limit)
        return self._layer_cache

    # -- hot pool ----------------------------------------------------------------------
    def plan_pool(self) -> dict[str, Any]:
        layers = list(self.experts)
        if not layers:
            return {"budget_bytes": 0, "experts": [], "coverage": 0.0, "counts_from": "none"}
        width = 1 + max(max(ids) for ids in self.experts.values())
        counts = torch.zeros(len(layers), width, dtype=torch.float64)
        sizes = torch.ones(len(layers), width, dtype=torch.float64)
        source = "uniform"
        for row, layer in enumerate(layers):
            ids = self.experts[layer]
            gate = self.reader.headers[
                self.mlp_prefix(layer) + f"experts.{ids[0]}.gate_proj.weight"]
            inter, hidden = gate.shape
            sizes[row] = float(hotpool.expert_fp4_bytes(inter, hidden))
            layer_counts = self._layer_counts(layer, width)
            if layer_counts is None:
                counts[row, ids] = 1.0
            else:
                counts[row] = layer_counts.to(torch.float64)
                source = "calibration"
        budget = int(self.options.pool_gb * GiB)
        chosen = hotpool.select_pool(counts, sizes, budget) if budget > 0 else set()
        experts = sorted((layers[r], e) for r, e in chosen if e in self.experts[layers[r]])
        return {
            "budget_bytes": budget,
            "experts": [list(p) for p in experts],
            "bytes": int(sum(float(sizes[r, e]) for r, e in chosen)),
            "coverage": hotpool.coverage(chosen, counts),
            "counts_from": source,
        }

    def _layer_counts(self, layer: int, width: int) -> torch.Tensor | None:
        if self.calib is None:
            return None
        stored = self.calib.counts(layer)
        if stored is not None:
            if stored.numel() != width:
                raise CalibrationError(f"layer {layer} expert_counts has {stored.numel()} "
                                       f"entries; the checkpoint has {width} experts")
            return stored.reshape(-1)
        inputs = self.calib.inputs(layer)
        if inputs is None:
            return None
        router, bias = self._router(layer)
        return expert_counts(route(inputs.float(), router, bias, self.top_k), width)

    # -- one tensor ----------------------------------------------------------------------
    def expert_weights(self, layer: int) -> Callable[[int], tuple[torch.Tensor, torch.Tensor]]:
        prefix = self.mlp_prefix(layer)
        dev = self.options.device

        def load(expert: int) -> tuple[torch.Tensor, torch.Tensor]:
            base = f"{prefix}experts.{expert}."
            return (self.reader.dequantized(base + "gate_proj.weight").to(dev),
                    self.reader.dequantized(base + "up_proj.weight").to(dev))
        return load

    def convert_expert(self, name: str, layer: int, expert: int, proj: str,
                       pooled: bool) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        w = self.reader.dequantized(name).to(self.options.device)
        stats: dict[str, Any] = {"kind": "w2", "layer": layer, "expert": expert,
                                 "src_bytes": self._src_bytes(name)}
        calib = self.layer_calibration(layer)
        hessian: torch.Tensor | None = None
        source = "none"
        if calib is not None:
            if proj == "down_proj":
                hessian, source = calib.down_hessian(expert, self.expert_weights(layer),
                                                     self.experts[layer])
            else:
                hessian, source = calib.gate_up_hessian, "shared"
            stats["tokens"] = calib.token_count(expert)
        if self.options.method == "gptq" and hessian is not None:
            q = gptq_quantize(w, hessian, damp=self.options.damp, act_order=self.options.act_order,
                              blocksize=self.options.blocksize).to_w2()
            stats["method"] = "gptq"
        else:
            q = w2.quantize_rtn(w)
            q = w2.W2Tensor(q.packed.cpu(), q.scales_enc.cpu(), q.shape)
            stats["method"] = "rtn"
        approx = q.dequantize(torch.float32).to(w.device)
        stats["hessian"] = source
        stats["rel_fro"] = relative_frobenius(w, approx)
        if hessian is not None:
            stats["out_err"] = output_error(w, approx, hessian)
        out = q.to_state_dict(name)
        if pooled:
            fp4 = nvfp4.quantize(w.cpu())
            out.update(fp4.to_state_dict(name))
            stats["fp4_rel_fro"] = relative_frobenius(w, fp4.dequantize(torch.float32).to(w.device))
            stats["fp4_bytes"] = fp4.nbytes
        stats["out_bytes"] = q.nbytes
        return out, stats

    def _src_bytes(self, name: str) -> int:
        th = self.reader.headers[name]
        scale = self.reader.headers.get(name + SCALE_SUFFIX)
        return th.nbytes + (scale.nbytes if scale else 0)

    def convert_other(self, name: str) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        th = self.reader.headers[name]
        raw = self.reader.raw(name)
        cls = classify(name)
        stats: dict[str, Any] = {"layer": cls.layer, "dtype": th.dtype, "src_bytes": th.nbytes}
        if th.dtype == "BF16":
            packed = bf16pack.pack(raw)
            stats.update(kind="p12", out_bytes=packed.nbytes,
                         escapes=int(packed.escape_index.numel()))
            return packed.to_state_dict(name), stats
        stats.update(kind="copy", out_bytes=th.nbytes)
        return {name: raw}, stats


def _write_shard(path: Path, tensors: dict[str, torch.Tensor], meta: dict[str, str]) -> None:
    from safetensors.torch import save_file

    tmp = path.with_name(f".{path.name}.tmp")
    try:
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(tmp), metadata=meta)
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def convert(src: Path, dst: Path, options: ConvertOptions, *, resume: bool = False,
            progress: Progress | None = None) -> Manifest:
    """Convert ``src`` (FP8 checkpoint) into ``dst``; see the module docstring."""
    report = progress or _Silent()
    if dst.exists():
        raise ConversionError(f"output directory {dst} already exists; choose another DST")
    if options.method == "gptq" and options.calib is None:
        raise ConversionError("--method gptq needs --calib FILE (captured activations); "
                              "use --method rtn to convert without calibration")
    if options.blocksize % w2.GROUP:
        raise ConversionError(f"blocksize must be a multiple of {w2.GROUP}")
    reader = CheckpointReader(src)
    calib = CalibrationFile(options.calib) if options.calib is not None else None
    fingerprint = options.fingerprint(file_digest(options.calib) if options.calib else None)
    source = _source_fingerprint(reader)
    conv = _Converter(reader, options, calib, report)
    if calib is not None and calib.hidden_size:
        _check_calib_width(reader, conv, calib)
    stage = staging_dir(dst)
    # Everything that can fail on bad input is checked before the staging directory exists.
    pool = conv.plan_pool() if not (resume and stage.exists()) else {}
    manifest = _open_staging(stage, source, fingerprint, resume, report)
    if not manifest.pool:
        manifest.pool = pool or conv.plan_pool()
        manifest.save(stage)
    pooled = {(int(p[0]), int(p[1])) for p in manifest.pool["experts"]}

    done = {name for name, rec in manifest.shards.items() if _intact(stage, rec, name, report)}
    for name in list(manifest.shards):
        if name not in done:
            del manifest.shards[name]
    report.begin(reader.shards, done)
    for shard in reader.shards:
        if shard.name in done:
            continue
        try:
            manifest.shards[shard.name] = _convert_shard(conv, shard, stage, pooled, report)
        except (UserError, KeyboardInterrupt):
            raise
        except Exception as exc:
            raise ConversionError(
                f"conversion stopped in shard {shard.name}: {type(exc).__name__}: {exc}; "
                f"{len(manifest.shards)} finished shard(s) are kept in {stage}, "
                "rerun with --resume to continue") from exc
        manifest.save(stage)
        report.shard_done(shard)
    _finish(reader, stage, manifest, options)
    stage.rename(dst)
    reader.close()
    return manifest


def _check_calib_width(reader: CheckpointReader, conv: _Converter,
                       calib: CalibrationFile) -> None:
    for layer in conv.experts:
        if layer in calib.layers:
            router = reader.headers.get(conv.mlp_prefix(layer) + "gate.weight")
            if router is not None and router.shape[1] != calib.hidden_size:
                raise CalibrationError(
                    f"{calib.path} holds hidden size {calib.hidden_size}; "
                    f"layer {layer}'s router expects {router.shape[1]}")
            return


def _open_staging(stage: Path, source: dict[str, Any], options: dict[str, Any], resume: bool,
                  report: Progress) -> Manifest:
    if stage.exists():
        if not resume:
            raise ConversionError(
                f"an unfinished conversion is in {stage}; rerun with --resume to continue it "
                "or delete that directory to start over")
        manifest = Manifest.load(stage)
        if manifest.source.get("layout_sha256") != source["layout_sha256"]:
            raise ConversionError(f"{stage} was started from a different checkpoint; "
                                  "delete it to start over")
        if manifest.options != json.loads(json.dumps(options, default=str)):
            raise ConversionError(
                f"{stage} was started with different options ({manifest.options}); "
                "rerun with the same options or delete it to start over")
        report.note(f"resuming: {len(manifest.shards)} shard(s) already converted")
        return manifest
    stage.mkdir(parents=True)
    manifest = Manifest(source=source, options=json.loads(json.dumps(options, default=str)))
    manifest.save(stage)
    return manifest


def _intact(stage: Path, record: ShardRecord, name: str, report: Progress) -> bool:
    problem = verify_shard(stage, record)
    if problem is not None:
        report.note(f"redoing shard {name}: {problem}")
    return problem is None


def _convert_shard(conv: _Converter, shard: ShardInfo, stage: Path,
                   pooled: set[tuple[int, int]], report: Progress) -> ShardRecord:
    report.shard_begin(shard)
    out: dict[str, torch.Tensor] = {}
    stats: dict[str, dict[str, Any]] = {}
    for th in shard.tensors:
        cls = classify(th.name)
        if cls.kind == "fp8_scale" and classify(th.name[: -len(SCALE_SUFFIX)]).kind \
                == "routed_expert":
            report.tensor_done(shard, th.name, th.nbytes)
            continue  # folded into the expert's W2 tensors
        if cls.kind == "routed_expert":
            assert cls.layer is not None and cls.expert is not None and cls.proj is not None
            tensors, st = conv.convert_expert(th.name, cls.layer, cls.expert, cls.proj,
                                              (cls.layer, cls.expert) in pooled)
        else:
            tensors, st = conv.convert_other(th.name)
        clash = out.keys() & tensors.keys()
        if clash:
            raise CheckpointError(f"output name {sorted(clash)[0]!r} would be written twice")
        out.update(tensors)
        stats[th.name] = st
        report.tensor_done(shard, th.name, th.nbytes)
    meta = {"format": QUANT_METHOD, "format_version": str(FORMAT_VERSION), "source": shard.name}
    _write_shard(stage / shard.name, out, meta)
    digests = {name: {"sha256": tensor_digest(t), "dtype": str(t.dtype).removeprefix("torch."),
                      "shape": list(t.shape)} for name, t in out.items()}
    return ShardRecord(shard.name, digests, stats)


def _finish(reader: CheckpointReader, stage: Path, manifest: Manifest,
            options: ConvertOptions) -> None:
    weight_map = {t: rec.output for rec in manifest.shards.values() for t in rec.tensors}
    total = sum((stage / rec.output).stat().st_size for rec in manifest.shards.values())
    (stage / INDEX_NAME).write_text(json.dumps(
        {"metadata": {"total_size": total, "format_version": FORMAT_VERSION},
         "weight_map": dict(sorted(weight_map.items()))}, indent=2), encoding="utf-8")
    config = reader.config()
    config["quantization_config"] = {
        "quant_method": QUANT_METHOD,
        "format_version": FORMAT_VERSION,
        "routed_experts": {"bits": 2, "codebook": list(w2.CODEBOOK), "group_size": w2.GROUP,
                           "scale_dtype": W2_SCALE_DTYPE, "method": options.method,
                           "act_order": options.act_order},
        "bf16": "p12",
        "fp4_pool": manifest.pool,
        "source_quantization": config.get("quantization_config"),
    }
    (stage / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    for item in reader.root.iterdir():
        if item.is_file() and item.suffix != ".safetensors" and item.name not in (
                INDEX_NAME, "config.json") and not item.name.startswith("."):
            shutil.copy2(item, stage / item.name)
    stats = manifest.all_stats()
    manifest.summary = {
        "src_bytes": sum(int(s.get("src_bytes", 0)) for s in stats.values()),
        "out_bytes": total,
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    manifest.complete = True
    manifest.save(stage)
