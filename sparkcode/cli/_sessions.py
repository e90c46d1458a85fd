"""``sparkcode sessions ...``: list, show and export recorded sessions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from engine.errors import UserError
from engine.paths import Paths
from sparkcode.sessions import (
    Exchange,
    Session,
    SessionStore,
    blobs_dir,
    copy_blobs,
    exchange_output,
    is_model_call,
    load_session,
    summarize,
)
from sparkcode.sessions.export import SUFFIXES, TranscriptFormat, transcript_format

from ._format import human_duration

sessions_app = typer.Typer(help="Recorded agent sessions.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(sessions_app, name="sessions")


def store() -> SessionStore:
    return SessionStore(Paths.from_env().sessions_dir)


def warn_problems(session: Session) -> None:
    """Corrupt lines are reported (file and line) but never stop a command."""
    for problem in session.problems:
        typer.echo(f"warning: {problem}", err=True)
    if session.truncated_tail:
        typer.echo(
            f"warning: {session.path}: the last line was cut short (a crash while "
            "recording?) and was left out",
            err=True,
        )


@sessions_app.command("list")
def list_cmd(as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """List recorded sessions, oldest first."""
    rows = store().summaries()
    if as_json:
        typer.echo(json.dumps([r.to_json() for r in rows], indent=2))
        return
    if not rows:
        typer.echo(f"no sessions recorded yet (in {store().directory})")
        return
    typer.echo(
        f"{'ID':<12}  {'CREATED':<25}  {'REQ':>4}  {'TOKENS':>7}  {'TIME':>7}  ENGINE / MODEL"
    )
    for r in rows:
        flag = " (damaged)" if r.problems or r.truncated else ""
        typer.echo(
            f"{r.id:<12}  {r.created:<25}  {r.requests:>4}  {r.completion_tokens:>7}  "
            f"{human_duration(r.duration_s):>7}  {r.engine} / {r.model or '?'}{flag}"
        )
        if r.worktree:
            typer.echo(f"{'':<12}  worktree {r.worktree} (branch {r.branch or '?'})")


@sessions_app.command("show")
def show_cmd(
    session_id: Annotated[str, typer.Argument(metavar="ID", help="Session ID or unique prefix.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Show one session: its engine, each request and what the agent did."""
    session = store().load(session_id)
    warn_problems(session)
    summary = summarize(session)
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "summary": summary.to_json(),
                    "header": session.header,
                    "problems": [str(p) for p in session.problems],
                    "requests": [_request_json(session, i) for i in range(len(session.exchanges))],
                    "events": [
                        {"t_s": (e.t_ns - session.t0_ns) / 1e9, "type": e.type, "data": e.data}
                        for e in session.events
                    ],
                },
                indent=2,
            )
        )
        return
    engine = session.engine
    typer.echo(f"session {session.id}  ({session.path})")
    typer.echo(f"  created    {summary.created}  origin {summary.origin}")
    typer.echo(f"  workspace  {summary.workspace}")
    if summary.worktree:
        typer.echo(f"  worktree   {summary.worktree} (branch {summary.branch or '?'})")
    typer.echo(
        f"  engine     {engine.get('profile') or 'endpoint'} at {engine.get('base_url')}"
        f"  vLLM {engine.get('vllm_version') or '?'}"
    )
    typer.echo(
        f"  model      {summary.model or '?'}  revision {engine.get('model_revision') or '?'}"
    )
    if engine.get("argv"):
        typer.echo(f"  command    {' '.join(str(a) for a in engine['argv'])}")
    typer.echo("")
    for item in session.timeline():
        t = (item.t_ns - session.t0_ns) / 1e9
        if isinstance(item, Exchange):
            data = _request_json(session, session.exchanges.index(item))
            error = f"  ERROR {data['error']}" if data["error"] else ""
            typer.echo(
                f"[{t:8.2f}s] request {data['request']} {data['method']} {data['path']}"
                f" -> {data['status']}  {data['tokens']} tokens  "
                f"{data['chunks']} chunks  {data['finish'] or ''}{error}"
            )
            if data["text"]:
                typer.echo(f"             {_clip(str(data['text']))}")
        else:
            typer.echo(f"[{t:8.2f}s] {item.type}: {_clip(json.dumps(item.data))}")


def _request_json(session: Session, position: int) -> dict[str, object]:
    exchange = session.exchanges[position]
    output = exchange_output(exchange) if is_model_call(exchange) else None
    return {
        "request": exchange.index,
        "method": exchange.method,
        "path": exchange.path,
        "status": exchange.status,
        "chunks": len(exchange.chunks),
        "tokens": output.completion_tokens if output else None,
        "finish": output.finish_reason if output else None,
        "error": exchange.error or (output.error if output else None),
        "text": (output.reasoning + output.content) if output else "",
        "t_s": (exchange.t_ns - session.t0_ns) / 1e9,
    }


def _clip(text: str, width: int = 110) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 3] + "..."


@sessions_app.command("export")
def export_cmd(
    session_id: Annotated[str, typer.Argument(metavar="ID", help="Session ID or unique prefix.")],
    file: Annotated[
        Path,
        typer.Argument(
            metavar="FILE",
            help="Where to write it (a directory: ID.jsonl/.md/.html in it; "
            "- prints a transcript).",
        ),
    ],
    fmt: Annotated[
        str,
        typer.Option(
            "--format",
            metavar="jsonl|md|html",
            help="jsonl: the raw recording; md or html: a readable transcript.",
        ),
    ] = "jsonl",
    force: Annotated[bool, typer.Option("--force", help="Overwrite FILE.")] = False,
) -> None:
    """Copy a session file (JSONL, secrets already redacted) to FILE, or write its
    transcript (--format md|html: turns, thinking, tool calls, figures)."""
    if fmt not in SUFFIXES:  # refused before anything is read
        raise UserError(f"unknown --format {fmt!r}; known: {', '.join(SUFFIXES)}")
    source = store().resolve(session_id)
    if fmt != "jsonl":
        _export_transcript(source, file, transcript_format(fmt), force=force)
        return
    if file.is_dir():
        file = file / source.name
    if file.exists() and not force:
        raise UserError(f"{file} exists; pass --force to overwrite it")
    try:
        # A session cut short by a crash ends in reserved zero bytes: leave them out.
        file.write_bytes(source.read_bytes().rstrip(b"\x00"))
        images = copy_blobs(source, file)
    except OSError as exc:
        raise UserError(f"cannot write {file}: {exc.strerror}") from None
    typer.echo(
        f"exported {source.stem} to {file}"
        + (f" (and its {images} images to {blobs_dir(file)})" if images else "")
    )


def _export_transcript(source: Path, file: Path, fmt: TranscriptFormat, *, force: bool) -> None:
    import asyncio

    from sparkcode.replay import session_transcript

    session = load_session(source)
    warn_problems(session)
    text = asyncio.run(session_transcript(session, fmt))
    if str(file) == "-":
        typer.echo(text, nl=False)
        return
    if file.is_dir():
        file = file / f"{source.stem}{SUFFIXES[fmt]}"
    if file.exists() and not force:
        raise UserError(f"{file} exists; pass --force to overwrite it")
    try:
        file.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UserError(f"cannot write {file}: {exc.strerror}") from None
    typer.echo(f"exported the transcript of {source.stem} ({fmt}) to {file}")


@sessions_app.command("fork")
def fork_cmd(
    session_id: Annotated[str, typer.Argument(metavar="ID", help="Session ID (unique prefix).")],
    turn: Annotated[
        int | None,
        typer.Option(
            "--turn", min=0, help="Keep the conversation up to this turn (default: all of it)."
        ),
    ] = None,
) -> None:
    """Start a new session from ID's conversation (up to --turn); resume it later."""
    import asyncio

    from sparkcode.replay import rebuild_conversation
    from sparkcode.start import write_fork

    paths = Paths.from_env()
    sessions = SessionStore(paths.sessions_dir)
    session = sessions.load(session_id)
    warn_problems(session)
    rebuilt = asyncio.run(rebuild_conversation(session, turn=turn, store=sessions))
    for note in rebuilt.notes:
        typer.echo(f"note: {note}", err=True)
    if rebuilt.turns < rebuilt.total_turns:
        typer.echo(
            f"note: the files stay as turn {rebuilt.total_turns} left them (a fork "
            "rewinds the conversation only; /undo in the TUI rewinds both)",
            err=True,
        )
    new_id = write_fork(paths, rebuilt, session.engine)
    typer.echo(new_id)
    typer.echo(
        f"forked {session.id} after turn {rebuilt.turns} of {rebuilt.total_turns} as "
        f"{new_id}; continue it with `sparkcode --resume {new_id}` or "
        f'`sparkcode run --resume {new_id} "..."`',
        err=True,
    )
