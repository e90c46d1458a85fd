"""``sparkcode replay ID``: play a session back, rerun it, compare, minimize."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer

from engine.errors import UserError
from engine.paths import Paths
from sparkcode.replay import (
    FlagKind,
    Launcher,
    RerunResult,
    Target,
    details,
    endpoint_target,
    managed_target,
    minimize,
    profile_launcher,
    rerun,
    results_json,
    seed_note,
    table,
    write_bundle,
)
from sparkcode.sessions import Session, SessionStore

from ._sessions import warn_problems


def register(app: typer.Typer) -> None:
    app.command("replay")(replay_cmd)


def replay_cmd(
    session_id: Annotated[
        str, typer.Argument(metavar="ID", help="Session ID (unique prefix) or file.")
    ],
    play: Annotated[
        bool,
        typer.Option(
            "--play",
            help="Re-render the session in the TUI from the recorded bytes (no engine needed).",
        ),
    ] = False,
    speed: Annotated[
        float,
        typer.Option(
            help="Playback speed: 1 = original pace, 4 = four times faster, 0 = no waiting."
        ),
    ] = 1.0,
    do_rerun: Annotated[
        bool,
        typer.Option(
            "--rerun", help="Re-send the requests in order to a live engine and compare every turn."
        ),
    ] = False,
    endpoint: Annotated[
        str | None,
        typer.Option(
            help="Rerun against this OpenAI-compatible URL (default: the managed engine)."
        ),
    ] = None,
    model: Annotated[
        str | None, typer.Option(help="Model name to send instead of the recorded one.")
    ] = None,
    api_key_env: Annotated[
        str | None, typer.Option(help="Variable holding the endpoint's API key.")
    ] = None,
    profiles: Annotated[
        list[str] | None,
        typer.Option(
            "--profile",
            "-p",
            help="Rerun against this engine profile (repeatable): each is "
            "started by the supervisor in turn and stopped afterwards.",
        ),
    ] = None,
    do_minimize: Annotated[
        bool,
        typer.Option(
            "--minimize",
            help="Find the shortest part of "
            "the session reproducing a flagged turn and "
            "write a repro bundle.",
        ),
    ] = False,
    turn: Annotated[
        int | None,
        typer.Option(help="The flagged turn to minimize (default: the first flagged one)."),
    ] = None,
    bundle: Annotated[Path | None, typer.Option(help="Repro bundle directory.")] = None,
    max_runs: Annotated[int, typer.Option(help="At most this many reruns while minimizing.")] = 60,
    no_isolate: Annotated[
        bool,
        typer.Option(
            "--no-isolate",
            help="Send bodies exactly as "
            "recorded, sharing the engine's prefix cache "
            "with earlier traffic.",
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print results as JSON.")] = False,
) -> None:
    """Play back, rerun or minimize a recorded session."""
    if speed < 0:
        raise UserError("--speed must be >= 0")
    paths = Paths.from_env()
    store = SessionStore(paths.sessions_dir)
    session = store.load(session_id)
    warn_problems(session)
    if play:
        from sparkcode.tui.screens.replay import ReplayApp

        ReplayApp(session, speed=speed).run()
        return
    if not (do_rerun or profiles or do_minimize):
        raise UserError("say what to do: --play, --rerun, --profile NAME or --minimize")
    if endpoint and profiles:
        raise UserError("--endpoint and --profile are exclusive")

    def log(message: str) -> None:
        typer.echo(message, err=True)

    note = seed_note(session)
    if note:
        log(f"note: session {session.id}: {note}")
    launches = _launches(paths, profiles or [], endpoint, model, api_key_env, log)
    results: list[RerunResult] = []
    bundle_written: Path | None = None
    for label, launch in launches:
        log(f"== {label}")
        with launch() as target:
            result = asyncio.run(rerun(session, target, isolate=not no_isolate, progress=log))
            results.append(result)
            if do_minimize and bundle_written is None:
                bundle_written = _minimize(session, target, result, turn, bundle, max_runs, log)
    data = results_json(session, results)
    if bundle_written is not None:
        data["bundle"] = str(bundle_written)
    store.save_result(session.id, data)
    if as_json:
        typer.echo(json.dumps(data, indent=2))
        return
    typer.echo(table(data))
    text = details(data)
    if text:
        typer.echo("")
        typer.echo(text)
    if bundle_written is not None:
        typer.echo(f"\nrepro bundle: {bundle_written}")


def _launches(
    paths: Paths,
    profiles: list[str],
    endpoint: str | None,
    model: str | None,
    api_key_env: str | None,
    log: Callable[[str], None],
) -> list[tuple[str, Callable[[], contextlib.AbstractContextManager[Target]]]]:
    if profiles:
        launcher: Launcher = profile_launcher(paths, on_phase=lambda p: log(f"  {p}"))
        return [(name, lambda name=name: launcher(name)) for name in profiles]  # type: ignore[misc]
    target = endpoint_target(endpoint, model, api_key_env) if endpoint else managed_target(paths)
    if model and not endpoint:
        target = replace(target, model=model)
    return [(target.label, lambda: contextlib.nullcontext(target))]


def _minimize(
    session: Session,
    target: Target,
    result: RerunResult,
    turn: int | None,
    bundle: Path | None,
    max_runs: int,
    log: Callable[[str], None],
) -> Path | None:
    if turn is not None:
        chosen = next((t for t in result.turns if t.turn == turn), None)
        if chosen is None:
            raise UserError(f"session {session.id} has no turn {turn}")
        if not chosen.flagged:
            raise UserError(
                f"turn {turn} is identical on {target.label} and the detector did "
                "not fire; nothing to minimize"
            )
    else:
        chosen = next((t for t in result.turns if t.flagged), None)
        if chosen is None:
            log(f"no flagged turn on {target.label}; nothing to minimize")
            return None
    kind: FlagKind = "degenerate" if chosen.rerun_detector is not None else "diverged"
    log(f"minimizing turn {chosen.turn} ({kind}) on {target.label}")
    found = asyncio.run(
        minimize(session, target, chosen.request, kind, max_runs=max_runs, progress=log)
    )
    directory = bundle or Path.cwd() / f"repro-{session.id}-turn{chosen.turn}"
    return write_bundle(directory, session, target, found)
