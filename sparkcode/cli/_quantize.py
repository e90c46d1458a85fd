"""``sparkcode quantize``: convert the FP8 GLM-5.3-Flash checkpoint; inspect the result.

Command shape: ``quantize`` is a command group whose *default* command is
``convert``, so both spellings of the issue work::

    sparkcode quantize SRC DST [--method gptq|rtn] [--calib FILE] [--pool-gb 2]
                               [--fp4-candidates-gb 0] [--resume]
    sparkcode quantize inspect DST

The group looks at its first argument: a subcommand name (``convert``,
``inspect``) selects that subcommand, anything else is taken as SRC of
``convert``. (A source directory literally named ``inspect`` is written
``./inspect`` or with the explicit ``sparkcode quantize convert ...``.)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Self

import typer
from typer.core import TyperGroup

# Only light modules at import time: every `sparkcode` command imports this
# one, and the quantizer proper pulls in torch (seconds of start-up).
from engine.codecs.format import DEFAULT_MIN_TOKENS

if TYPE_CHECKING:
    from engine.quant.bootstrap import Step
    from engine.quant.checkpoint import ShardInfo

from ._format import human_bytes, human_duration

DEFAULT_COMMAND = "convert"


class _DefaultToConvert(TyperGroup):
    """A group that runs ``convert`` when the first argument is not a subcommand."""

    # typer vendors click; its Context type is not exported, hence the loose annotation.
    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = [DEFAULT_COMMAND, *args]
        result: list[str] = super().parse_args(ctx, args)
        return result


quantize_app = typer.Typer(
    cls=_DefaultToConvert,
    help="Convert the FP8 GLM-5.3-Flash checkpoint to 2-bit experts (or inspect a conversion).",
    no_args_is_help=True,
)


def register(app: typer.Typer) -> None:
    app.add_typer(quantize_app, name="quantize")


class _RichProgress:
    """Two bars: the whole conversion (bytes of source, with ETA) and the current shard."""

    def __init__(self) -> None:
        from rich.progress import (
            BarColumn,
            Progress,
            TaskProgressColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.bar = Progress(
            TextColumn("{task.description:<34}"),
            BarColumn(),
            TaskProgressColumn(),
            TextColumn("{task.fields[size]}"),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            transient=False,
        )
        self.total: Any = None
        self.shard: Any = None

    def __enter__(self) -> Self:
        self.bar.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.bar.__exit__(None, None, None)

    @staticmethod
    def _bytes(shard: ShardInfo) -> int:
        return sum(t.nbytes for t in shard.tensors)

    def begin(self, shards: list[ShardInfo], done: set[str]) -> None:
        total = sum(self._bytes(s) for s in shards)
        already = sum(self._bytes(s) for s in shards if s.name in done)
        self.total = self.bar.add_task(
            f"all {len(shards)} shards", total=total, completed=already, size=human_bytes(total)
        )

    def shard_begin(self, shard: ShardInfo) -> None:
        if self.shard is not None:
            self.bar.remove_task(self.shard)
        self.shard = self.bar.add_task(
            shard.name[-34:], total=self._bytes(shard), size=human_bytes(self._bytes(shard))
        )

    def tensor_done(self, shard: ShardInfo, name: str, nbytes: int) -> None:
        self.bar.advance(self.shard, nbytes)
        self.bar.advance(self.total, nbytes)

    def shard_done(self, shard: ShardInfo) -> None:
        return None

    def note(self, message: str) -> None:
        self.bar.console.print(message)


class _BootstrapProgress(_RichProgress):
    """One display across the rounds: the step counter, then the current step's bars
    (conversion: all shards and the current one; capture: engine boot, then prompts)."""

    def __init__(self) -> None:
        super().__init__()
        self.steps: Any = None
        self.capture: Any = None

    def _clear(self) -> None:
        for task in (self.total, self.shard, self.capture):
            if task is not None:
                self.bar.remove_task(task)
        self.total = self.shard = self.capture = None

    def step_begin(self, index: int, total: int, step: Step) -> None:
        self._clear()
        if self.steps is None:
            self.steps = self.bar.add_task(f"{total} steps", total=total, completed=index, size="")
        self.bar.update(self.steps, completed=index)
        self.bar.console.print(f"step {index + 1}/{total}: {step.title}")

    def engine_phase(self, phase: str) -> None:
        if self.capture is None:
            self.capture = self.bar.add_task("engine: starting", total=None, size="")
        self.bar.update(self.capture, description=f"engine: {phase}"[:34])

    def capture_begin(self, prompts: int, tokens: int) -> None:
        if self.capture is not None:
            self.bar.remove_task(self.capture)
        self.capture = self.bar.add_task(
            f"capture: {prompts} prompts", total=tokens, size=f"{tokens} tokens"
        )

    def prompt_done(self, tokens: int) -> None:
        self.bar.advance(self.capture, tokens)

    def finish(self) -> None:
        self._clear()
        if self.steps is not None:
            self.bar.update(self.steps, completed=self.bar.tasks[0].total)


@quantize_app.command("convert")
def convert_cmd(
    src: Annotated[Path, typer.Argument(help="Official FP8 checkpoint directory.")],
    dst: Annotated[Path, typer.Argument(help="Output directory (must not exist yet).")],
    method: Annotated[str, typer.Option(help="Routed-expert quantizer: gptq or rtn.")] = "gptq",
    calib: Annotated[
        Path | None,
        typer.Option(
            help="Calibration activations (safetensors from the capture hook); needed by gptq."
        ),
    ] = None,
    pool_gb: Annotated[
        float, typer.Option(help="Byte budget of the FP4 hot-expert pool, in GiB (0 disables it).")
    ] = 2.0,
    fp4_candidates_gb: Annotated[
        float,
        typer.Option(
            help="Disk budget, in GiB, for FP4 copies of the next experts after the pool: "
            "candidates the engine can swap in live (0: none)."
        ),
    ] = 0.0,
    resume: Annotated[
        bool, typer.Option(help="Continue an interrupted conversion of the same SRC into DST.")
    ] = False,
    act_order: Annotated[
        bool,
        typer.Option(
            "--act-order/--no-act-order",
            help="GPTQ in decreasing Hessian-diagonal order (static groups).",
        ),
    ] = True,
    damp: Annotated[float, typer.Option(help="GPTQ dampening, fraction of mean diag(H).")] = 0.01,
    min_tokens: Annotated[
        int, typer.Option(help="Fewest routed tokens for an expert's own down_proj Hessian.")
    ] = DEFAULT_MIN_TOKENS,
    down_fallback: Annotated[
        str, typer.Option(help="Starved experts' down_proj: rtn or pooled (layer-wide Hessian).")
    ] = "rtn",
    device: Annotated[str, typer.Option(help="Torch device for GPTQ (cpu, cuda).")] = "cpu",
    calib_from_engine: Annotated[
        bool,
        typer.Option(
            "--calib-from-engine",
            help="Calibrate on this box: RTN round 0, serve it, capture, GPTQ (see --rounds).",
        ),
    ] = False,
    corpus: Annotated[
        Path | None,
        typer.Option(
            help="With --calib-from-engine: your code, added to the Python standard library."
        ),
    ] = None,
    rounds: Annotated[
        int,
        typer.Option(
            help="With --calib-from-engine: GPTQ rounds, each captured from the previous one."
        ),
    ] = 1,
    calib_tokens: Annotated[
        int, typer.Option(help="With --calib-from-engine: tokens captured per round.")
    ] = 16384,
    chunk_tokens: Annotated[
        int, typer.Option(help="With --calib-from-engine: tokens per calibration prompt.")
    ] = 2048,
    engine_profile: Annotated[
        str | None,
        typer.Option(
            help="With --calib-from-engine: the profile whose settings serve each round "
            "(default: this machine's default profile)."
        ),
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars.")] = False,
) -> None:
    """Convert SRC (FP8 GLM-5.3-Flash) into DST (W2 experts, P12 BF16, FP4 pool)."""
    import time

    from engine.errors import UserError
    from engine.quant.pipeline import ConvertOptions, convert

    if method not in ("gptq", "rtn"):
        raise UserError(f"--method must be gptq or rtn, not {method!r}")
    if down_fallback not in ("rtn", "pooled"):
        raise UserError(f"--down-fallback must be rtn or pooled, not {down_fallback!r}")
    if pool_gb < 0:
        raise UserError("--pool-gb must not be negative")
    if fp4_candidates_gb < 0:
        raise UserError("--fp4-candidates-gb must not be negative")
    if fp4_candidates_gb and not pool_gb:
        raise UserError("--fp4-candidates-gb needs a pool to swap into (--pool-gb > 0)")
    options = ConvertOptions(
        method=method,  # type: ignore[arg-type]
        calib=calib,
        pool_gb=pool_gb,
        fp4_candidates_gb=fp4_candidates_gb,
        damp=damp,
        act_order=act_order,
        min_tokens=min_tokens,
        down_fallback=down_fallback,  # type: ignore[arg-type]
        device=device,
    )
    started = time.monotonic()
    if calib_from_engine:
        manifest = _calibrated(
            src,
            dst,
            options,
            resume,
            quiet,
            rounds=rounds,
            calib_tokens=calib_tokens,
            chunk_tokens=chunk_tokens,
            corpus=corpus,
            engine_profile=engine_profile,
        )
    elif corpus is not None or engine_profile is not None:
        raise UserError("--corpus and --engine-profile go with --calib-from-engine")
    elif quiet:
        manifest = convert(src, dst, options, resume=resume)
    else:
        with _RichProgress() as progress:
            manifest = convert(src, dst, options, resume=resume, progress=progress)
    pool = manifest.pool
    typer.echo(
        f"wrote {dst}: {human_bytes(manifest.summary.get('out_bytes', 0))} from "
        f"{human_bytes(manifest.summary.get('src_bytes', 0))} in "
        f"{human_duration(time.monotonic() - started)}; FP4 pool {len(pool.get('experts', []))} "
        f"experts, coverage {100 * float(pool.get('coverage', 0.0)):.1f}%"
        + (f", {len(pool['candidates'])} FP4 candidates" if pool.get("candidates") else "")
    )


def _calibrated(
    src: Path,
    dst: Path,
    options: Any,
    resume: bool,
    quiet: bool,
    *,
    rounds: int,
    calib_tokens: int,
    chunk_tokens: int,
    corpus: Path | None,
    engine_profile: str | None,
) -> Any:
    """``--calib-from-engine``: the bootstrap rounds, the engine run by the supervisor."""
    from engine.errors import UserError
    from engine.paths import Paths
    from engine.profiles import default_profile_name, load_profile
    from engine.quant.bootstrap import BootstrapOptions, run_bootstrap
    from engine.quant.engine_capture import NEEDS_THE_MACHINE, make_capture
    from engine.supervisor import ensure_idle

    if options.method != "gptq":
        raise UserError("--calib-from-engine makes a GPTQ model; drop --method rtn")
    paths = Paths.from_env()
    base = load_profile(engine_profile or default_profile_name(paths), paths)
    if base.kind != "vllm":
        raise UserError(
            f"profile {base.name} is an endpoint; --calib-from-engine serves each "
            "round itself and needs a vllm profile (--engine-profile)"
        )
    ensure_idle(paths, NEEDS_THE_MACHINE)
    boot = BootstrapOptions(
        rounds=rounds, calib_tokens=calib_tokens, chunk_tokens=chunk_tokens, corpus=corpus
    )
    capture = make_capture(base, paths, corpus=corpus, tokens=calib_tokens, chunk=chunk_tokens)
    if quiet:
        return run_bootstrap(src, dst, options, boot, capture, resume=resume)
    with _BootstrapProgress() as progress:
        manifest = run_bootstrap(src, dst, options, boot, capture, resume=resume, progress=progress)
        progress.finish()
    return manifest


@quantize_app.command("inspect")
def inspect_cmd(
    dst: Annotated[Path, typer.Argument(help="A converted model directory.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Per-layer error (relative Frobenius, output error on calibration inputs) and sizes."""
    from engine.quant.inspect import inspect_model, render_text

    report = inspect_model(dst)
    if as_json:
        typer.echo(json.dumps(report.to_json(), indent=2))
    else:
        typer.echo(render_text(report))
