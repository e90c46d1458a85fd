"""``sparkcode engine node ...``: this machine's part of a multi-node engine.

The head's supervisor runs these over ssh on the worker box (each prints one JSON
object with ``--json``; a refusal is ``{"error": "..."}`` and exit 1). They use the
same runner, process group, exit file and log as the head's engine, under
``<state>/engine/node/``. By hand: ``status``, ``logs`` and ``stop`` (a worker left
running by a head that died).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Annotated, Any

import typer

from engine.errors import UserError
from engine.paths import Paths
from engine.supervisor import LocalNode, NodeStatus, node_dir

from ._format import human_bytes, human_duration

node_app = typer.Typer(
    help="This machine's node of a multi-node engine (run by the head over ssh).",
    no_args_is_help=True,
)

JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object.")]
LinesOpt = Annotated[int, typer.Option("-n", "--lines", help="How many log lines.")]


def register(engine_app: typer.Typer) -> None:
    engine_app.add_typer(node_app, name="node")


def _node() -> LocalNode:
    return LocalNode(node_dir(Paths.from_env().engine_dir))


def _answer(
    as_json: bool, work: Callable[[], dict[str, Any]], show: Callable[[dict[str, Any]], str]
) -> None:
    try:
        data = work()
    except UserError as exc:
        if not as_json:
            raise
        typer.echo(json.dumps({"error": str(exc)}))
        raise typer.Exit(1) from None
    typer.echo(json.dumps(data) if as_json else show(data))


def _describe(data: dict[str, Any]) -> str:
    s = NodeStatus.from_json(data)
    lines = [f"node: {s.state}"]
    rows = [
        ("pid", s.pid),
        ("address", s.address),
        ("uptime", human_duration(s.uptime_s) if s.uptime_s is not None else None),
        ("memory", human_bytes(s.memory_rss_bytes) if s.memory_rss_bytes else None),
        ("log", s.log_path),
    ]
    if s.state == "exited":
        rows.append(
            ("exit", f"code {s.exit_code}" + (f", signal {s.exit_signal}" if s.exit_signal else ""))
        )
    lines += [f"  {k:<8} {v}" for k, v in rows if v is not None]
    lines += [f"  | {line}" for line in s.log_tail]
    return "\n".join(lines)


@node_app.command("status")
def status_cmd(as_json: JsonOpt = False, lines: LinesOpt = 20) -> None:
    """This machine's node: running, exited (with its exit code and log tail) or stopped."""
    _answer(as_json, lambda: _node().status(lines).to_json(), _describe)


@node_app.command("check")
def check_cmd(
    model: Annotated[str | None, typer.Option(help="The model directory to fingerprint.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """What a head asks before a start: the model's fingerprint, free memory, a live node."""
    _answer(as_json, lambda: _node().check(model).to_json(), lambda d: json.dumps(d, indent=2))


@node_app.command("start")
def start_cmd(as_json: JsonOpt = False) -> None:
    """Start a node from the launch the head sends on stdin (JSON: argv, env, ...)."""

    def work() -> dict[str, Any]:
        try:
            payload = json.loads(sys.stdin.read())
            argv = [sys.executable, *[str(a) for a in payload["argv"]]]
            env = {str(k): str(v) for k, v in payload["env"].items()}
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise UserError(
                f"engine node start: stdin is not a launch from a head ({exc})"
            ) from None
        return (
            _node()
            .start(
                argv,
                env,
                profile=str(payload.get("profile", "?")),
                address=str(payload.get("address", "")),
                model_path=payload.get("model_path"),
                redacted_env=payload.get("redacted_env") or {},
            )
            .to_json()
        )

    _answer(as_json, work, _describe)


@node_app.command("stop")
def stop_cmd(as_json: JsonOpt = False) -> None:
    """Stop this machine's node (SIGINT, SIGTERM, SIGKILL to its group); nothing is left."""
    _answer(
        as_json,
        lambda: _node().stop().to_json(),
        lambda d: "node stopped" if d["state"] != "stopped" else "no node was running",
    )


@node_app.command("logs")
def logs_cmd(as_json: JsonOpt = False, lines: LinesOpt = 50) -> None:
    """The node's log (the running node's, else the latest)."""
    _answer(as_json, lambda: {"lines": _node().logs(lines)}, lambda d: "\n".join(d["lines"]))
