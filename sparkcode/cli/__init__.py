"""The ``sparkcode`` command line.

Each command group lives in its own private module and registers itself on the
root Typer app; :func:`main` turns every :class:`engine.errors.UserError` into
one ``error: ...`` line and a non-zero exit status.
"""

from __future__ import annotations

import sys

import typer

from engine.errors import UserError

from . import _acp, _bench, _detect, _engine, _models, _quantize, _replay, _run, _sessions, _tui

app = typer.Typer(
    name="sparkcode",
    help="A local coding agent with a supervised vLLM engine.",
    no_args_is_help=False,
    add_completion=False,
    pretty_exceptions_enable=False,
)

for _module in (_tui, _engine, _models, _run, _sessions, _replay, _detect, _quantize, _bench, _acp):
    _module.register(app)


def main() -> None:
    """Console-script entry point."""
    try:
        app()
    except UserError as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        sys.exit(130)
