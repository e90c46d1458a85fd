"""``sparkcode models ...``: the builtin models, fetched, verified and converted."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Annotated

import typer

from engine.errors import UserError
from engine.paths import Paths

if TYPE_CHECKING:
    from engine.models import Builtin

models_app = typer.Typer(help="Fetch and list the builtin models.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(models_app, name="models")


def _builtin_named(name: str, paths: Paths) -> str:
    """A builtin model's name, given it or a profile that uses it."""
    from engine.models import BUILTINS
    from engine.profiles import load_profile

    if name in BUILTINS:
        return name
    try:
        profile = load_profile(name, paths)
    except UserError:
        profile = None
    if profile is not None and profile.model_builtin in BUILTINS:
        return profile.model_builtin
    known = ", ".join(sorted(BUILTINS))
    raise UserError(
        f"{name!r} is neither a builtin model nor a profile that uses one (builtin models: {known})"
    )


@models_app.command("fetch")
def fetch_cmd(
    name: Annotated[
        str | None,
        typer.Argument(
            help="Builtin model or a profile that uses one (default: the CPU coder this "
            "machine suits)."
        ),
    ] = None,
) -> None:
    """Download, verify by sha256 and convert a builtin model (once; reruns resume).

    Without NAME it fetches the model of the CPU default (``make run`` does this);
    if that fails, the default stays cpu-demo and the error says why.
    """
    from engine.models import BUILTINS
    from engine.profiles import cpu_coder_name, default_profile_name

    paths = Paths.from_env()
    if name is None:
        if default_profile_name(paths) == "glm53-flash-spark":
            typer.echo("this machine has CUDA: its default is glm53-flash-spark; nothing to fetch")
            return
        name = cpu_coder_name()
        try:
            _fetch(BUILTINS[_builtin_named(name, paths)], paths)
        except Exception as exc:  # noqa: BLE001 - any failure leaves cpu-demo as the default
            raise UserError(
                f"{exc}\nthe {name} model could not be installed, so sparkcode "
                "uses cpu-demo (SmolLM2-135M) until `sparkcode models fetch` "
                "succeeds"
            ) from None
        return
    _fetch(BUILTINS[_builtin_named(name, paths)], paths)


def _fetch(builtin: Builtin, paths: Paths) -> None:
    from engine.models import install_builtin, is_installed

    if is_installed(builtin, paths):
        typer.echo(f"{builtin.name}: already installed in {paths.models_dir / builtin.name}")
        return
    began = time.monotonic()
    target = install_builtin(
        builtin,
        paths,
        progress=lambda msg: typer.echo(f"  [{time.monotonic() - began:5.1f}s] {msg}", err=True),
    )
    typer.echo(f"{builtin.name}: installed in {target} ({time.monotonic() - began:.0f}s)")


@models_app.command("list")
def list_cmd(as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """The builtin models, where they come from and whether they are installed."""
    from engine.models import BUILTINS, is_installed

    paths = Paths.from_env()
    rows = [
        {
            "name": b.name,
            "installed": is_installed(b, paths),
            "description": b.description,
            "sha256": b.split.sha256 if b.split else None,
            "path": str(paths.models_dir / b.name),
        }
        for b in BUILTINS.values()
    ]
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    width = max(len(str(r["name"])) for r in rows)
    for row in rows:
        state = "installed" if row["installed"] else "-"
        typer.echo(f"{row['name']:<{width}}  {state:<9}  {row['description']}")
