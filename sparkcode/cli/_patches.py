"""``sparkcode engine patches [check]``: sparkcode's vLLM source patches."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from engine.patches import check_all

patches_app = typer.Typer(
    help="sparkcode's numbered source patches against vLLM.", invoke_without_command=True
)

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON.")]


def register(engine_app: typer.Typer) -> None:
    """Add ``engine patches`` to the engine command group."""
    engine_app.add_typer(patches_app, name="patches")


@patches_app.callback()
def patches_default(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """Dry-run each patch against the installed vLLM (same as ``check``)."""
    if ctx.invoked_subcommand is None:
        _check(as_json)


@patches_app.command("check")
def check_cmd(as_json: JsonOpt = False) -> None:
    """Report each patch as applied, appliable or conflict; exit 1 on a conflict."""
    _check(as_json)


def _check(as_json: bool) -> None:
    results = check_all()
    if as_json:
        typer.echo(
            json.dumps(
                [
                    {
                        "number": r.entry.number,
                        "file": r.entry.file,
                        "target": r.entry.target,
                        "vllm_version": r.entry.vllm_version,
                        "purpose": r.entry.purpose,
                        "upstream": r.entry.upstream,
                        "plugin_feature": r.entry.plugin_feature,
                        "state": r.state,
                        "detail": r.detail,
                    }
                    for r in results
                ],
                indent=2,
            )
        )
    else:
        for r in results:
            typer.echo(f"{r.entry.number:04d} {r.state:<9} {r.entry.file}")
            typer.echo(f"     {r.entry.purpose}")
            typer.echo(f"     {r.detail}")
            if r.entry.upstream:
                typer.echo(f"     upstream: {r.entry.upstream}")
            if r.entry.plugin_feature and r.state != "applied":
                typer.echo(f"     runtime form: plugin feature {r.entry.plugin_feature}")
    if any(r.state == "conflict" for r in results):
        raise typer.Exit(1)
