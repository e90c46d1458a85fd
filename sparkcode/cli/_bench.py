"""``sparkcode bench humaneval|throughput|loops|kld|agent|report``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from engine.errors import UserError
from engine.paths import Paths
from engine.profiles import REASONING_EFFORTS

bench_app = typer.Typer(
    help="Measure targets side by side: HumanEval(+), throughput, loop probe, KLD, agent "
    "suite (definitions: docs/bench.md).",
    no_args_is_help=True,
)

Profiles = Annotated[
    list[str] | None,
    typer.Option(
        "--profile",
        "-p",
        help="A profile to measure (repeatable): started by the supervisor and "
        "stopped afterwards, or the running engine if it runs this profile.",
    ),
]
Endpoints = Annotated[
    list[str] | None,
    typer.Option("--endpoint", help="An OpenAI-compatible URL to measure (repeatable)."),
]
Models = Annotated[
    list[str] | None,
    typer.Option(
        "--model", help="The endpoint's model name (once for all, or once per --endpoint)."
    ),
]
KeyEnvs = Annotated[
    list[str] | None,
    typer.Option(
        "--api-key-env", help="Variable holding the endpoint's API key (once, or per endpoint)."
    ),
]
Out = Annotated[
    Path | None,
    typer.Option("--out", "-o", help="Result directory (default ./bench-KIND-TIMESTAMP)."),
]
Resume = Annotated[
    Path | None,
    typer.Option(
        "--resume",
        help="Carry on an interrupted run from its result directory (its saved "
        "settings and targets are used).",
    ),
]
BootTimeout = Annotated[float, typer.Option(help="Seconds to wait for a profile's engine.")]


def register(app: typer.Typer) -> None:
    app.add_typer(bench_app, name="bench")


def _go(
    kind: str,
    profiles: list[str] | None,
    endpoints: list[str] | None,
    models: list[str] | None,
    key_envs: list[str] | None,
    out: Path | None,
    resume: Path | None,
    boot_timeout: float,
    settings: Callable[[], dict[str, Any]],
) -> None:
    from sparkcode import bench

    paths = Paths.from_env()
    console = bench.console()
    if resume is not None:
        if profiles or endpoints or out:
            raise UserError(
                "--resume carries on with the saved targets and settings: give no "
                "--profile, --endpoint or --out with it"
            )
        result = bench.resume(kind, resume)
        done = sum(len(v) for v in result.data["units"].values())
        console.print(f"resuming {result.path}: {done} units already finished", markup=False)
    else:
        specs = bench.build_specs(profiles or [], endpoints or [], models or [], key_envs or [])
        result = bench.start(kind, specs, settings(), out)
    try:
        text = bench.execute(result, paths, out=console, boot_timeout=boot_timeout)
    except KeyboardInterrupt:
        done = sum(len(v) for v in result.data["units"].values())
        try:
            bench.finish(result)
        except Exception:  # noqa: BLE001 - a partial table is a courtesy, the JSON is what counts
            pass
        typer.echo(
            f"interrupted: {done} finished units are saved in {result.path}; carry on "
            f"with `sparkcode bench {kind} --resume {result.path}`",
            err=True,
        )
        raise typer.Exit(130) from None
    except UserError as exc:
        done = sum(len(v) for v in result.data["units"].values())
        if done:
            raise UserError(
                f"{exc}\n({done} finished units are saved in {result.path}; carry "
                f"on with `sparkcode bench {kind} --resume {result.path}`)"
            ) from None
        raise
    typer.echo(text)
    typer.echo(f"results: {result.path}")


@bench_app.command("humaneval")
def humaneval_cmd(
    profiles: Profiles = None,
    endpoints: Endpoints = None,
    models: Models = None,
    key_envs: KeyEnvs = None,
    out: Out = None,
    resume: Resume = None,
    plus: Annotated[
        Path | None, typer.Option(help="EvalPlus HumanEvalPlus.jsonl[.gz]: also score HumanEval+.")
    ] = None,
    limit: Annotated[int | None, typer.Option(help="Only the first N problems.")] = None,
    tasks: Annotated[
        list[str] | None,
        typer.Option("--task", help="Only this task id (repeatable), e.g. HumanEval/0."),
    ] = None,
    max_tokens: Annotated[
        int | None,
        typer.Option(help="Output budget (default: thinking budget + 2048, within the context)."),
    ] = None,
    thinking_budget: Annotated[
        int | None,
        typer.Option(help="thinking_token_budget (default: the profile's; -1 sends none)."),
    ] = None,
    effort: Annotated[str, typer.Option(help="reasoning_effort sent.")] = "low",
    seed: Annotated[int, typer.Option(help="Sampling seed (temperature is 0).")] = 1234,
    concurrency: Annotated[int, typer.Option(help="Requests in flight at once.")] = 1,
    workers: Annotated[int, typer.Option(help="Sandboxed test runs at once.")] = 2,
    timeout: Annotated[float, typer.Option(help="CPU seconds per test run (wall: twice).")] = 10,
    boot_timeout: BootTimeout = 900.0,
) -> None:
    """HumanEval pass@1 (and HumanEval+ with --plus), per-problem diff between targets."""
    from sparkcode import bench

    if effort not in REASONING_EFFORTS:
        raise UserError(f"--effort must be one of {', '.join(REASONING_EFFORTS)}")
    _go(
        "humaneval",
        profiles,
        endpoints,
        models,
        key_envs,
        out,
        resume,
        boot_timeout,
        lambda: bench.humaneval_settings(
            limit,
            tasks,
            plus,
            max_tokens,
            thinking_budget,
            effort,
            seed,
            concurrency,
            workers,
            timeout,
        ),
    )


def _lengths(text: str) -> list[int]:
    out = []
    for part in text.split(","):
        part = part.strip().lower()
        scale = 1024 if part.endswith("k") else 1
        try:
            out.append(int(part.removesuffix("k")) * scale)
        except ValueError:
            raise UserError(
                f"--prefill takes token counts like 8k,64k or 512, got {text!r}"
            ) from None
    return out


@bench_app.command("throughput")
def throughput_cmd(
    profiles: Profiles = None,
    endpoints: Endpoints = None,
    models: Models = None,
    key_envs: KeyEnvs = None,
    out: Out = None,
    resume: Resume = None,
    repeats: Annotated[int, typer.Option("-n", "--repeats", help="Runs of each case.")] = 3,
    decode_tokens: Annotated[int, typer.Option(help="Tokens per decode run.")] = 512,
    prefill: Annotated[
        str,
        typer.Option(
            help="Prompt lengths for prefill, comma-separated (8k = 8192 tokens); lengths "
            "beyond a target's context are skipped and say so."
        ),
    ] = "8k,64k",
    kinds: Annotated[str, typer.Option(help="Decode prompts: code, prose or both.")] = "code,prose",
    prefill_text: Annotated[
        str, typer.Option(help="Text of prefill prompts: code or prose.")
    ] = "code",
    fixed_length: Annotated[
        bool, typer.Option(help="Send min_tokens so every decode run is decode-tokens long.")
    ] = True,
    turn_tokens: Annotated[
        int,
        typer.Option(
            help="Also time an agent turn at each prefill length: the history cached, then "
            "it plus this many new tokens (0: no turns)."
        ),
    ] = 128,
    boot_timeout: BootTimeout = 900.0,
) -> None:
    """Decode tok/s (code, prose), cold prefill tok/s at exact lengths, TTFT of a turn
    on a cached history, acceptance."""
    chosen = [k.strip() for k in kinds.split(",") if k.strip()]
    if not chosen or any(k not in ("code", "prose") for k in chosen):
        raise UserError("--kinds takes code, prose or code,prose")
    if prefill_text not in ("code", "prose"):
        raise UserError("--prefill-text takes code or prose")
    if repeats < 1 or decode_tokens < 2:
        raise UserError("--repeats must be >= 1 and --decode-tokens >= 2")
    if turn_tokens < 0:
        raise UserError(f"--turn-tokens must be >= 0 (0: no turns), got {turn_tokens}")
    lengths = _lengths(prefill) if prefill.strip() else []
    _go(
        "throughput",
        profiles,
        endpoints,
        models,
        key_envs,
        out,
        resume,
        boot_timeout,
        lambda: {
            "repeats": repeats,
            "decode_tokens": decode_tokens,
            "kinds": chosen,
            "prefill_lengths": lengths,
            "prefill_text": prefill_text,
            "fixed_length": fixed_length,
            "turn_tokens": turn_tokens,
            "temperature": 0.0,
        },
    )


@bench_app.command("loops")
def loops_cmd(
    profiles: Profiles = None,
    endpoints: Endpoints = None,
    models: Models = None,
    key_envs: KeyEnvs = None,
    out: Out = None,
    resume: Resume = None,
    n: Annotated[int, typer.Option("-n", help="Samples (long-code prompts).")] = 16,
    max_tokens: Annotated[int, typer.Option(help="Output budget per sample.")] = 8192,
    temperature: Annotated[float, typer.Option(help="Sampling temperature.")] = 0.6,
    seed: Annotated[int, typer.Option(help="Seed of sample 0 (sample i: seed + i).")] = 1234,
    effort: Annotated[str, typer.Option(help="reasoning_effort sent.")] = "low",
    thinking_budget: Annotated[
        int | None,
        typer.Option(help="thinking_token_budget (default: the profile's; -1 sends none)."),
    ] = None,
    full: Annotated[
        bool, typer.Option("--full", help="Generate to the end even after the detector fired.")
    ] = False,
    keep_all: Annotated[
        bool,
        typer.Option("--keep-all", help="Keep every sample's session, not only degenerate ones."),
    ] = False,
    boot_timeout: BootTimeout = 900.0,
) -> None:
    """Long code generations scored by the degeneration detector; bad ones saved as sessions."""
    if n < 1 or max_tokens < 1:
        raise UserError("-n and --max-tokens must be >= 1")
    if effort not in REASONING_EFFORTS:
        raise UserError(f"--effort must be one of {', '.join(REASONING_EFFORTS)}")
    _go(
        "loops",
        profiles,
        endpoints,
        models,
        key_envs,
        out,
        resume,
        boot_timeout,
        lambda: {
            "n": n,
            "max_tokens": max_tokens,
            "temperature": temperature,
            "seed": seed,
            "reasoning_effort": effort,
            "thinking_token_budget": thinking_budget,
            "stop_on_detect": not full,
            "keep_all": keep_all,
        },
    )


@bench_app.command("kld")
def kld_cmd(
    profiles: Profiles = None,
    endpoints: Endpoints = None,
    models: Models = None,
    key_envs: KeyEnvs = None,
    out: Out = None,
    resume: Resume = None,
    texts: Annotated[
        list[str] | None,
        typer.Option(
            "--text", help="Text set: code, prose or a file (repeatable; default code and prose)."
        ),
    ] = None,
    chunk_tokens: Annotated[int, typer.Option(help="Tokens per chunk (one request).")] = 512,
    chunks: Annotated[int, typer.Option(help="Chunks per text set.")] = 16,
    top_k: Annotated[
        int, typer.Option(help="Top-k log-probs asked for (lowered to what the server allows).")
    ] = 64,
    floor: Annotated[bool, typer.Option(help="Run the reference twice: the noise floor.")] = True,
    boot_timeout: BootTimeout = 900.0,
) -> None:
    """KL divergence of each target against the first (teacher-forced, prompt log-probs)."""
    from sparkcode.bench import text_set

    chosen = texts or ["code", "prose"]
    for name in chosen:
        text_set(name)  # a missing file is refused before any engine starts
    if chunk_tokens < 8 or chunks < 1 or top_k < 1:
        raise UserError("--chunk-tokens must be >= 8, --chunks and --top-k >= 1")
    n_targets = len(profiles or []) + len(endpoints or [])
    if resume is None and n_targets < 2 and not floor:
        raise UserError("KLD compares targets: name two or more, or keep --floor")
    _go(
        "kld",
        profiles,
        endpoints,
        models,
        key_envs,
        out,
        resume,
        boot_timeout,
        lambda: {
            "texts": [t if t in ("code", "prose") else str(Path(t).resolve()) for t in chosen],
            "chunk_tokens": chunk_tokens,
            "chunks": chunks,
            "top_k": top_k,
            "floor": floor,
        },
    )


@bench_app.command("agent")
def agent_cmd(
    profiles: Profiles = None,
    endpoints: Endpoints = None,
    models: Models = None,
    key_envs: KeyEnvs = None,
    out: Out = None,
    resume: Resume = None,
    tasks: Annotated[
        list[str] | None,
        typer.Option("--task", help="Only this task (repeatable; --list names them)."),
    ] = None,
    kinds: Annotated[
        list[str] | None,
        typer.Option("--kind", help="Only tasks of this kind (repeatable; with --task: either)."),
    ] = None,
    tries: Annotated[int, typer.Option("-n", "--tries", help="Tries per task.")] = 3,
    seed: Annotated[int, typer.Option(help="Session seed of try 1 (try i: seed + i - 1).")] = 1234,
    max_turns: Annotated[int, typer.Option(help="Most model requests per try.")] = 10,
    max_tokens: Annotated[
        int | None, typer.Option(help="Output limit per request (default: none, as in the app).")
    ] = None,
    try_timeout: Annotated[
        float,
        typer.Option(help="Seconds a try may run; then it is stopped and checked as it stands."),
    ] = 900.0,
    structured_tools: Annotated[
        bool | None,
        typer.Option(
            "--structured-tools/--plain-tools",
            help="Small-model mode on or off for every target (default: each profile's).",
        ),
    ] = None,
    no_sandbox: Annotated[
        bool,
        typer.Option(
            "--no-sandbox", help="Run shell commands and checks unconfined (no bubblewrap)."
        ),
    ] = False,
    keep_sessions: Annotated[
        bool,
        typer.Option("--keep-sessions", help="Keep every try's session, not only failed ones."),
    ] = False,
    jobs: Annotated[
        int,
        typer.Option(
            "--jobs",
            "-j",
            help="Tries run at a time against each target (its engine batches "
            "them); wall times then include the waiting.",
        ),
    ] = 1,
    diagnostics: Annotated[
        bool,
        typer.Option(
            "--diagnostics/--no-diagnostics",
            help="Edit results carry the problems the edit "
            "introduced, from a language server, as in the app (config.toml [diagnostics]).",
        ),
    ] = True,
    until_pass: Annotated[
        bool,
        typer.Option(
            "--until-pass",
            help="Stop trying a task once a try passed: pass@n is the same, "
            "in fewer tries, but per-try success then counts only the tries made.",
        ),
    ] = False,
    list_tasks: Annotated[bool, typer.Option("--list", help="List the tasks and exit.")] = False,
    boot_timeout: BootTimeout = 900.0,
) -> None:
    """The agent task suite: real agent turns in fresh git workspaces, checked."""
    from sparkcode import bench

    if list_tasks:
        from sparkcode.bench import load_tasks

        for task in load_tasks().values():
            typer.echo(f"{task.id:<22} {task.kind:<13} {task.prompt}")
        return
    _go(
        "agent",
        profiles,
        endpoints,
        models,
        key_envs,
        out,
        resume,
        boot_timeout,
        lambda: bench.agent_settings(
            tasks,
            kinds,
            tries,
            seed,
            max_turns,
            max_tokens,
            try_timeout,
            structured_tools,
            not no_sandbox,
            keep_sessions,
            jobs,
            diagnostics,
            until_pass,
        ),
    )


@bench_app.command("report")
def report_cmd(
    dirs: Annotated[list[Path], typer.Argument(help="Result directories (one kind).")],
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="Also write table.md and plots here.")
    ] = None,
) -> None:
    """Tabulate saved results side by side."""
    from sparkcode import bench

    typer.echo(bench.report(dirs, out))
