"""``sparkcode`` with no command: open the terminal UI."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from engine.paths import Paths

from ._options import ApiKeyEnvOption, EndpointOption, ModelOption, WorktreeGroup, WorktreeOption


def register(app: typer.Typer) -> None:
    """Make plain ``sparkcode`` (no subcommand) open the TUI."""
    app.callback(invoke_without_command=True, cls=WorktreeGroup)(tui)


def tui(
    ctx: typer.Context,
    profile: Annotated[
        str | None,
        typer.Option(
            "--profile", "-p", help="Engine profile (default: the machine's default profile)."
        ),
    ] = None,
    endpoint: EndpointOption = None,
    model: ModelOption = None,
    api_key_env: ApiKeyEnvOption = None,
    vision: Annotated[
        bool,
        typer.Option(
            "--vision", help="With --endpoint: the model takes images (/image, @shot.png)."
        ),
    ] = False,
    workspace: Annotated[
        Path | None,
        typer.Option(
            "--workspace", "-w", help="Directory the agent works in (default: the current one)."
        ),
    ] = None,
    continue_latest: Annotated[
        bool,
        typer.Option("--continue", "-c", help="Continue the latest session of this workspace."),
    ] = False,
    resume: Annotated[
        str | None,
        typer.Option(
            "--resume", "-r", help="Continue the recorded session ID (`sparkcode sessions list`)."
        ),
    ] = None,
    worktree: WorktreeOption = None,
) -> None:
    """Open the sparkcode terminal UI (run a subcommand for anything else)."""
    from engine.errors import UserError

    if ctx.invoked_subcommand is not None:
        given = [
            name
            for name, value in (
                ("--profile", profile),
                ("--endpoint", endpoint),
                ("--model", model),
                ("--api-key-env", api_key_env),
                ("--workspace", workspace),
                ("--vision", vision or None),
                ("--resume", resume),
                ("--continue", continue_latest or None),
                ("--worktree", worktree),
            )
            if value is not None
        ]
        if given:
            # They belong to the TUI; silently ignoring them would run the subcommand
            # against another engine or workspace than the one asked for.
            command = ctx.invoked_subcommand
            raise UserError(
                f"{', '.join(given)} before `{command}` would be ignored (those "
                f"options set up the TUI); give a command its options after its "
                f"name (see `sparkcode {command} --help`)"
            )
        return
    import asyncio
    import sys

    from sparkcode.cli._run import resume_here
    from sparkcode.tui.launch import LaunchOptions, build_app
    from sparkcode.worktree import find_worktree, open_worktree

    if endpoint and profile:
        raise UserError("--endpoint and --profile exclude each other; pass one")
    if resume and continue_latest:
        raise UserError("--resume and --continue exclude each other; pass one")
    paths = Paths.from_env()  # once for this start: resume, the app and the note on exit
    root = (workspace or Path.cwd()).expanduser().resolve()
    tree = open_worktree(root, worktree or None) if worktree is not None else None
    try:
        if tree is not None:
            root = tree.workspace
        rebuilt = None
        if resume or continue_latest:
            rebuilt = asyncio.run(resume_here(paths, root, resume, continue_latest, sys.stderr))
            root = Path(rebuilt.workspace)
        # The worktree opened here, or the one a resumed session was recorded in.
        tree_here = tree if tree is not None and tree.workspace == root else find_worktree(root)
        app = build_app(
            LaunchOptions(
                workspace=root,
                profile=profile,
                endpoint=endpoint,
                model=model,
                api_key_env=api_key_env,
                resume=rebuilt,
                vision=vision,
                worktree=tree_here,
            ),
            paths,
        )
    except BaseException:
        if tree is not None:
            tree.discard()  # a start that failed leaves no new worktree behind
        raise
    app.run()
    if tree_here is not None:  # how to merge or remove it
        typer.echo(tree_here.exit_advice(), err=True)
    note_running_engine(paths)


def note_running_engine(paths: Paths) -> None:
    """Say on the way out that the engine keeps running (it is kept warm on purpose: a GLM
    boot takes minutes), and how to stop it."""
    from engine.supervisor import Supervisor

    try:
        status = Supervisor(paths).status()
    except Exception:  # noqa: BLE001 - a note must never turn a clean exit into an error
        return
    if status.state in ("booting", "ready", "unhealthy"):
        where = f" on {status.base_url}" if status.base_url else ""
        typer.echo(
            f"sparkcode: the {status.profile} engine is still running{where} "
            f"({status.state}, pid {status.pid}); `sparkcode engine stop` stops it",
            err=True,
        )
