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
from pathlib import Path
from typing import Any, Protocol

import torch

from engine.codecs import w2
from engine.codecs.format import FORMAT_VERSION, QUANT_METHOD, W2_SCALE_DTYPE
from engine.errors import UserError
from engine.quant.calib import CalibrationFile, file_digest
from engine.quant.checkpoint import (
    INDEX_NAME,
    SCALE_SUFFIX,
    CheckpointError,
    CheckpointReader,
    ShardInfo,
    classify,
)
from engine.quant.converter import ConvertOptions, TensorConverter, check_calib_width
from engine.quant.manifest import Manifest, ShardRecord, tensor_digest, verify_shard

__all__ = [
    "ConversionError",
    "ConvertOptions",
    "Progress",
    "SilentProgress",
    "convert",
    "staging_dir",
]


class ConversionError(UserError):
    """The conversion stopped; finished shards are kept for ``--resume``."""


class Progress(Protocol):
    """What the pipeline reports; the CLI draws progress bars from it."""

    def begin(self, shards: list[ShardInfo], done: set[str]) -> None: ...
    def shard_begin(self, shard: ShardInfo) -> None: ...
    def tensor_done(self, shard: ShardInfo, name: str, nbytes: int) -> None: ...
    def shard_done(self, shard: ShardInfo) -> None: ...
    def note(self, message: str) -> None: ...


class SilentProgress:
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
    return {
        "path": str(reader.root.resolve()),
        "layout_sha256": h.hexdigest(),
        "shards": len(reader.shards),
    }


def _write_shard(path: Path, tensors: dict[str, torch.Tensor], meta: dict[str, str]) -> None:
    from safetensors.torch import save_file

    tmp = path.with_name(f".{path.name}.tmp")
    try:
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(tmp), metadata=meta)
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def convert(
    src: Path,
    dst: Path,
    options: ConvertOptions,
    *,
    resume: bool = False,
    progress: Progress | None = None,
) -> Manifest:
    """Convert ``src`` (FP8 checkpoint) into ``dst``; see the module docstring."""
    report = progress or SilentProgress()
    if dst.exists():
        raise ConversionError(f"output directory {dst} already exists; choose another DST")
    if options.method == "gptq" and options.calib is None:
        raise ConversionError(
            "--method gptq needs --calib FILE (captured activations); "
            "use --method rtn to convert without calibration"
        )
    if options.blocksize % w2.GROUP:
        raise ConversionError(f"blocksize must be a multiple of {w2.GROUP}")
    reader = CheckpointReader(src)
    calib = CalibrationFile(options.calib) if options.calib is not None else None
    fingerprint = options.fingerprint(file_digest(options.calib) if options.calib else None)
    source = _source_fingerprint(reader)
    conv = TensorConverter(reader, options, calib)
    if calib is not None and calib.hidden_size:
        check_calib_width(reader, conv, calib)
    stage = staging_dir(dst)
    # Everything that can fail on bad input is checked before the staging directory exists.
    pool = conv.plan_pool() if not (resume and stage.exists()) else {}
    manifest = _open_staging(stage, source, fingerprint, resume, report)
    if not manifest.pool:
        manifest.pool = pool or conv.plan_pool()
        manifest.save(stage)
    # Pool experts and candidates both get FP4 copies; the config tells them apart.
    pooled = {
        (int(p[0]), int(p[1]))
        for p in [*manifest.pool["experts"], *manifest.pool.get("candidates", [])]
    }

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
                "rerun with --resume to continue"
            ) from exc
        manifest.save(stage)
        report.shard_done(shard)
    _finish(reader, stage, manifest, options)
    stage.rename(dst)
    reader.close()
    return manifest


def _open_staging(
    stage: Path, source: dict[str, Any], options: dict[str, Any], resume: bool, report: Progress
) -> Manifest:
    if stage.exists():
        if not resume:
            raise ConversionError(
                f"an unfinished conversion is in {stage}; rerun with --resume to continue it "
                "or delete that directory to start over"
            )
        manifest = Manifest.load(stage)
        if manifest.source.get("layout_sha256") != source["layout_sha256"]:
            raise ConversionError(
                f"{stage} was started from a different checkpoint; delete it to start over"
            )
        if manifest.options != json.loads(json.dumps(options, default=str)):
            raise ConversionError(
                f"{stage} was started with different options ({manifest.options}); "
                "rerun with the same options or delete it to start over"
            )
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


def _convert_shard(
    conv: TensorConverter,
    shard: ShardInfo,
    stage: Path,
    pooled: set[tuple[int, int]],
    report: Progress,
) -> ShardRecord:
    report.shard_begin(shard)
    out: dict[str, torch.Tensor] = {}
    stats: dict[str, dict[str, Any]] = {}
    for th in shard.tensors:
        cls = classify(th.name)
        if (
            cls.kind == "fp8_scale"
            and classify(th.name[: -len(SCALE_SUFFIX)]).kind == "routed_expert"
        ):
            report.tensor_done(shard, th.name, th.nbytes)
            continue  # folded into the expert's W2 tensors
        if cls.kind == "routed_expert":
            assert cls.layer is not None and cls.expert is not None and cls.proj is not None
            tensors, st = conv.convert_expert(
                th.name, cls.layer, cls.expert, cls.proj, (cls.layer, cls.expert) in pooled
            )
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
    digests = {
        name: {
            "sha256": tensor_digest(t),
            "dtype": str(t.dtype).removeprefix("torch."),
            "shape": list(t.shape),
        }
        for name, t in out.items()
    }
    return ShardRecord(shard.name, digests, stats)


def _finish(
    reader: CheckpointReader, stage: Path, manifest: Manifest, options: ConvertOptions
) -> None:
    weight_map = {t: rec.output for rec in manifest.shards.values() for t in rec.tensors}
    total = sum((stage / rec.output).stat().st_size for rec in manifest.shards.values())
    (stage / INDEX_NAME).write_text(
        json.dumps(
            {
                "metadata": {"total_size": total, "format_version": FORMAT_VERSION},
                "weight_map": dict(sorted(weight_map.items())),
            },
            indent=2,
        ),
        encoding="utf-8",
    )
    config = reader.config()
    config["quantization_config"] = {
        "quant_method": QUANT_METHOD,
        "format_version": FORMAT_VERSION,
        "routed_experts": {
            "bits": 2,
            "codebook": list(w2.CODEBOOK),
            "group_size": w2.GROUP,
            "scale_dtype": W2_SCALE_DTYPE,
            "method": options.method,
            "act_order": options.act_order,
            "scales": options.scales,
            "refit": options.refit,
        },
        "bf16": "p12",
        "fp4_pool": manifest.pool,
        "source_quantization": config.get("quantization_config"),
    }
    (stage / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    for item in reader.root.iterdir():
        if (
            item.is_file()
            and item.suffix != ".safetensors"
            and item.name not in (INDEX_NAME, "config.json")
            and not item.name.startswith(".")
        ):
            shutil.copy2(item, stage / item.name)
    stats = manifest.all_stats()
    manifest.summary = {
        "src_bytes": sum(int(s.get("src_bytes", 0)) for s in stats.values()),
        "out_bytes": total,
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    manifest.complete = True
    manifest.save(stage)
