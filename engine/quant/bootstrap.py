"""GPTQ calibrated on the box itself: bootstrap from a model that fits.

The FP8 source does not fit in a Spark's memory, so its activations cannot be captured
from it. Instead:

* round 0: convert by RTN (no calibration; the result fits);
* capture k (k >= 1): serve round k-1's model, record its MoE-block inputs on a code corpus
  (``engine.quant.engine_capture``);
* round k: convert the source again by GPTQ from capture k.

Everything lives in the staging area ``.<DST>.calib`` next to DST, with ``bootstrap.json``
recording the options and each finished step; a stopped run resumes (``resume=True``) at the
first unfinished step, and a conversion step inside it at its first unfinished shard. A
round's model is deleted as soon as the capture from it is done, so at most one converted
model and one calibration file are on disk at a time. The last round is renamed to DST and
the staging area removed.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from engine.errors import UserError
from engine.quant.calib import file_digest
from engine.quant.checkpoint import CheckpointReader, classify
from engine.quant.converter import ConvertOptions, text_config
from engine.quant.manifest import Manifest
from engine.quant.pipeline import Progress, SilentProgress, convert, staging_dir

STATE_NAME = "bootstrap.json"
STATE_VERSION = 1
GiB = 1 << 30


class BootstrapError(UserError):
    """The calibrated conversion cannot start or continue."""


@dataclass(frozen=True)
class BootstrapOptions:
    """What decides the result besides the conversion options (a resume must match)."""

    rounds: int = 1
    calib_tokens: int = 16384
    chunk_tokens: int = 2048
    corpus: Path | None = None

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["corpus"] = str(self.corpus.resolve()) if self.corpus else None
        return d


@dataclass(frozen=True)
class Step:
    kind: str  # "convert" | "capture"
    round: int

    @property
    def key(self) -> str:
        return f"{self.kind}-{self.round}"

    @property
    def title(self) -> str:
        if self.kind == "capture":
            return f"capture {self.round}: serve round {self.round - 1}, record MoE inputs"
        return f"round {self.round}: convert by {'RTN' if self.round == 0 else 'GPTQ'}"


def plan(rounds: int) -> list[Step]:
    steps = [Step("convert", 0)]
    for k in range(1, rounds + 1):
        steps += [Step("capture", k), Step("convert", k)]
    return steps


class BootstrapProgress(Progress, Protocol):
    """Conversion progress plus the step line and the capture's events."""

    def step_begin(self, index: int, total: int, step: Step) -> None: ...
    def engine_phase(self, phase: str) -> None: ...
    def capture_begin(self, prompts: int, tokens: int) -> None: ...
    def prompt_done(self, tokens: int) -> None: ...


class SilentBootstrap(SilentProgress):
    def step_begin(self, index: int, total: int, step: Step) -> None: ...
    def engine_phase(self, phase: str) -> None: ...
    def capture_begin(self, prompts: int, tokens: int) -> None: ...
    def prompt_done(self, tokens: int) -> None: ...


# capture(model_dir, out_file, progress) -> None: writes a calibration file from model_dir.
CaptureFn = Callable[[Path, Path, BootstrapProgress], None]


def bootstrap_stage(dst: Path) -> Path:
    return dst.parent / f".{dst.name}.calib"


# -- disk --------------------------------------------------------------------------------


def estimate_output_bytes(reader: CheckpointReader, options: ConvertOptions) -> int:
    """Bytes of one converted model: W2 experts (2 bits + one byte per 32), P12 for BF16
    (12 bits), everything else copied, plus the FP4 pool budget."""
    total = 0
    for name, th in reader.headers.items():
        kind = classify(name).kind
        numel = 1
        for d in th.shape:
            numel *= d
        if kind == "routed_expert":
            total += numel // 4 + numel // 32
        elif kind == "fp8_scale" and classify(name[: -len("_scale_inv")]).kind == "routed_expert":
            continue
        elif th.dtype == "BF16":
            total += numel * 3 // 2
        else:
            total += th.nbytes
    return total + int(options.pool_gb * GiB)


def estimate_calib_bytes(reader: CheckpointReader, tokens: int) -> int:
    layers = {c.layer for n in reader.headers if (c := classify(n)).kind == "routed_expert"}
    hidden = int(text_config(reader.config()).get("hidden_size", 0) or 0)
    if not hidden:
        routers = [
            th
            for n, th in reader.headers.items()
            if classify(n).kind == "router" and len(th.shape) == 2
        ]
        hidden = int(routers[0].shape[1]) if routers else 0
    return len(layers) * tokens * hidden * 2


def _tree_bytes(path: Path) -> int:
    if not path.exists():
        return 0
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def check_disk(
    dst: Path,
    stage: Path,
    reader: CheckpointReader,
    options: ConvertOptions,
    boot: BootstrapOptions,
) -> None:
    """Refuse to start when DST's file system cannot hold one model plus one capture."""
    model = estimate_output_bytes(reader, options)
    calib = estimate_calib_bytes(reader, boot.calib_tokens)
    need = int((model + calib) * 1.02) - _tree_bytes(stage)
    free = shutil.disk_usage(dst.parent).free
    if need > free:
        raise BootstrapError(
            f"not enough disk space in {dst.parent}: the calibrated conversion needs about "
            f"{need / GiB:.1f} GiB more (one converted model of ~{model / GiB:.1f} GiB at a time "
            f"plus calibration inputs of ~{calib / GiB:.1f} GiB), {free / GiB:.1f} GiB are free; "
            "free some space or choose a DST on a larger disk"
        )


# -- state -------------------------------------------------------------------------------


def _fingerprint(
    reader: CheckpointReader, options: ConvertOptions, boot: BootstrapOptions
) -> dict[str, Any]:
    h = hashlib.sha256()
    for shard in reader.shards:
        h.update(f"{shard.name}:{shard.size}\n".encode())
    conv = replace(options, method="gptq", calib=None).fingerprint(None)
    return {
        "source": str(reader.root.resolve()),
        "layout_sha256": h.hexdigest(),
        "convert": conv,
        "bootstrap": boot.to_json(),
    }


def _load_state(stage: Path) -> dict[str, Any]:
    try:
        data = json.loads((stage / STATE_NAME).read_text(encoding="utf-8"))
        if data.get("version") != STATE_VERSION:
            raise ValueError(f"version {data.get('version')!r}")
        return dict(data)
    except FileNotFoundError as exc:
        raise BootstrapError(f"{stage} has no {STATE_NAME}; delete it to start over") from exc
    except (ValueError, AttributeError) as exc:
        raise BootstrapError(
            f"{stage / STATE_NAME} is corrupt ({exc}); delete {stage} to start over"
        ) from exc


def _save_state(stage: Path, state: dict[str, Any]) -> None:
    tmp = stage / f".{STATE_NAME}.tmp"
    with tmp.open("w", encoding="utf-8") as fh:
        json.dump(state, fh, indent=1, sort_keys=True)
        fh.flush()
        os.fsync(fh.fileno())
    tmp.replace(stage / STATE_NAME)


def _open(
    stage: Path, fingerprint: dict[str, Any], resume: bool, report: BootstrapProgress
) -> dict[str, Any]:
    if stage.exists():
        if not resume:
            raise BootstrapError(
                f"an unfinished calibrated conversion is in {stage}; rerun with --resume to "
                "continue it or delete that directory to start over"
            )
        state = _load_state(stage)
        if state["fingerprint"] != json.loads(json.dumps(fingerprint)):
            raise BootstrapError(
                f"{stage} was started from a different checkpoint or with different options "
                f"({state['fingerprint']}); rerun with the same ones or delete it to start over"
            )
        report.note(
            f"resuming: {len(state['done'])} step(s) already done "
            f"({', '.join(state['done']) or 'none'})"
        )
        return state
    stage.mkdir(parents=True)
    state = {"version": STATE_VERSION, "fingerprint": fingerprint, "done": [], "calib": {}}
    _save_state(stage, state)
    return state


# -- the run -----------------------------------------------------------------------------


def round_dir(stage: Path, k: int) -> Path:
    return stage / f"round{k}"


def calib_path(stage: Path, k: int) -> Path:
    return stage / f"calib-{k}.safetensors"


def run_bootstrap(
    src: Path,
    dst: Path,
    options: ConvertOptions,
    boot: BootstrapOptions,
    capture: CaptureFn,
    *,
    resume: bool = False,
    progress: BootstrapProgress | None = None,
) -> Manifest:
    """Rounds of convert and capture (module docstring); returns the final manifest."""
    report = progress or SilentBootstrap()
    if dst.exists():
        raise BootstrapError(f"output directory {dst} already exists; choose another DST")
    if boot.rounds < 1:
        raise BootstrapError("--rounds must be at least 1 (round 0 is RTN, GPTQ starts at 1)")
    if options.calib is not None:
        raise BootstrapError("--calib-from-engine captures its own calibration; drop --calib")
    reader = CheckpointReader(src)
    stage = bootstrap_stage(dst)
    fingerprint = _fingerprint(reader, options, boot)
    if not (resume and stage.exists()):
        check_disk(dst, stage, reader, options, boot)
    state = _open(stage, fingerprint, resume, report)
    reader.close()
    steps = plan(boot.rounds)
    done = len(state["done"])
    if done and not _product_ok(stage, steps[done - 1], state):
        # Only the last step's product is kept; without it the run starts over.
        report.note(f"the output of '{steps[done - 1].title}' is gone; starting from round 0")
        done, state["done"] = 0, []
    for index in range(done, len(steps)):
        step = steps[index]
        report.step_begin(index, len(steps), step)
        if step.kind == "capture":
            out = calib_path(stage, step.round)
            try:
                capture(round_dir(stage, step.round - 1), out, report)
            except UserError as exc:
                raise BootstrapError(
                    f"{step.title} failed: {exc}\nthe finished steps are kept in {stage}; "
                    "rerun with --resume to continue from this step"
                ) from exc
            state["calib"][str(step.round)] = file_digest(out)
        else:
            _convert_round(src, stage, options, step.round, report)
        state["done"].append(step.key)
        _save_state(stage, state)
        _drop_unneeded(stage, step)
    final = round_dir(stage, boot.rounds)
    manifest = Manifest.load(final)
    manifest.summary["calibration"] = {
        "from_engine": True,
        "rounds": boot.rounds,
        "calib_tokens": boot.calib_tokens,
        "corpus": boot.to_json()["corpus"] or "python stdlib",
    }
    manifest.save(final)
    final.rename(dst)
    shutil.rmtree(stage)
    return manifest


def _product_ok(stage: Path, step: Step, state: dict[str, Any]) -> bool:
    """Is the output of a finished step (the one the next step reads) still intact?"""
    if step.kind == "capture":
        path = calib_path(stage, step.round)
        return path.is_file() and file_digest(path) == state["calib"].get(str(step.round))
    target = round_dir(stage, step.round)
    try:
        return Manifest.load(target).complete
    except UserError:
        return False


def _convert_round(
    src: Path, stage: Path, options: ConvertOptions, k: int, report: BootstrapProgress
) -> None:
    target = round_dir(stage, k)
    if target.exists():  # finished but not yet recorded (stopped between the two)
        if Manifest.load(target).complete:
            return
        shutil.rmtree(target)
    opts = (
        replace(options, method="rtn", calib=None)
        if k == 0
        else replace(options, method="gptq", calib=calib_path(stage, k))
    )
    convert(src, target, opts, resume=staging_dir(target).exists(), progress=report)


def _drop_unneeded(stage: Path, step: Step) -> None:
    """After capture k, round k-1 is no longer needed; after round k, capture k is not."""
    if step.kind == "capture":
        shutil.rmtree(round_dir(stage, step.round - 1), ignore_errors=True)
    elif step.round > 0:
        calib_path(stage, step.round).unlink(missing_ok=True)
