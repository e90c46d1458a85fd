"""``sparkcode engine ...``: profiles, start, stop, status, logs."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated

import typer

from engine.errors import EngineStateError, UserError
from engine.pagemath import PageMath, prefix_cache_math
from engine.paths import Paths
from engine.profiles import default_profile_name, list_profiles, load_profile, render
from engine.supervisor import (
    EngineStatus,
    NodeStatus,
    Reuse,
    Supervisor,
    ensure_running,
    likely_cause,
    tail_lines,
)

from . import _engine_node, _patches
from ._format import human_bytes, human_duration

engine_app = typer.Typer(
    help="Start, watch and stop the managed vLLM engine.", no_args_is_help=True
)

ProfileOpt = Annotated[
    str | None, typer.Option("--profile", "-p", help="Profile name or path to a profile TOML file.")
]


def register(app: typer.Typer) -> None:
    _patches.register(engine_app)
    _engine_node.register(engine_app)
    app.add_typer(engine_app, name="engine")


@engine_app.command("profiles")
def profiles_cmd(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """List the engine profiles (shipped and user-defined)."""
    paths = Paths.from_env()
    default = default_profile_name(paths)
    profiles = list_profiles(paths)
    if as_json:
        typer.echo(
            json.dumps(
                [
                    {
                        "name": p.name,
                        "kind": p.kind,
                        "description": p.description,
                        "source": str(p.source),
                        "default": p.name == default,
                    }
                    for p in profiles
                ],
                indent=2,
            )
        )
        return
    width = max(len(p.name) for p in profiles)
    for p in profiles:
        mark = "*" if p.name == default else " "
        typer.echo(f"{mark} {p.name:<{width}}  {p.kind:<8}  {p.description}")
    typer.echo("\n* default on this machine")


@engine_app.command("command")
def command_cmd(
    profile: ProfileOpt = None,
    port: Annotated[int | None, typer.Option(help="Override the profile's port.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Print the exact command line and environment a profile launches."""
    paths = Paths.from_env()
    prof = load_profile(profile or default_profile_name(paths), paths)
    spec = render(prof, paths, port=port)
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "argv": spec.argv,
                    "env": spec.redacted_env(),
                    "base_url": spec.base_url,
                    "model": spec.model,
                    "nodes": [
                        {
                            "node": w.node,
                            "node_rank": w.node_rank,
                            "ssh": w.ssh,
                            "argv": w.argv,
                            "env": w.redacted_env(),
                        }
                        for w in spec.workers
                    ],
                },
                indent=2,
            )
        )
        return
    if prof.kind == "endpoint":
        typer.echo(f"# profile {prof.name}: no local engine; requests go to {spec.base_url}")
        if spec.api_key_env:
            typer.echo(f"# API key read from ${spec.api_key_env}")
        return
    for launch in (spec, *spec.workers):
        if spec.workers:
            where = f"ssh {launch.ssh}" if launch.ssh else "this machine"
            typer.echo(f"# {launch.node} node (rank {launch.node_rank}, {where})")
        for key, value in sorted(launch.redacted_env().items()):
            typer.echo(f"export {key}={_quote(value)}")
        typer.echo(" \\\n  ".join(_argv_lines(launch.argv)))


def _argv_lines(argv: list[str]) -> list[str]:
    """The command split one option (with its value) per line, shell-quoted."""
    lines: list[str] = [" ".join(_quote(a) for a in argv[:3])]  # python -m module
    for arg in argv[3:]:
        takes_value = lines[-1].startswith("--") and " " not in lines[-1]
        if takes_value and not arg.startswith("--"):
            lines[-1] += f" {_quote(arg)}"
        else:
            lines.append(_quote(arg))
    return lines


def _quote(value: str) -> str:
    import shlex

    return shlex.quote(value)


@engine_app.command("start")
def start_cmd(
    profile: ProfileOpt = None,
    port: Annotated[int | None, typer.Option(help="Port to serve on.")] = None,
    no_wait: Annotated[bool, typer.Option("--no-wait", help="Return once launched.")] = False,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for /health.")] = 900.0,
    skip_memory_check: Annotated[
        bool, typer.Option("--skip-memory-check", help="Launch even if memory looks short.")
    ] = False,
) -> None:
    """Start the engine detached and wait until it answers /health."""
    paths = Paths.from_env()
    prof = load_profile(profile or default_profile_name(paths), paths)
    began = time.monotonic()

    def show(phase: str) -> None:
        typer.echo(f"  [{time.monotonic() - began:5.1f}s] {phase}", err=True)

    # This command starts an engine; one that already runs is refused by name.
    handle = ensure_running(
        prof,
        paths,
        reuse=Reuse.NEVER,
        port=port,
        wait=not no_wait,
        timeout=timeout,
        on_phase=show,
        progress=lambda msg: typer.echo(f"  {msg}", err=True),
        skip_memory_check=skip_memory_check,
    )
    status = handle.status
    if no_wait:
        typer.echo(f"launched pid {status.pid}; log {status.log_path}")
    else:
        typer.echo(
            f"ready: {status.model} at {status.base_url} (pid {status.pid}, "
            f"{time.monotonic() - began:.1f}s)"
        )


@engine_app.command("stop")
def stop_cmd() -> None:
    """Stop the engine (SIGINT, then SIGTERM, then SIGKILL) and leave no process."""
    sup = Supervisor(Paths.from_env())
    before = sup.stop()
    if before.state == "stopped":  # only a worker node an earlier engine left running
        pids = ", ".join(str(n.pid) for n in before.nodes)
        typer.echo(f"stopped a worker node left without its head (pid {pids})")
    elif before.state == "crashed":
        line = f"engine had already exited ({_exit_text(before)}); record cleared"
        left = [n for n in before.nodes if n.state == "running"]
        for node in left:  # a headless worker never exits without its head
            line += f"; stopped the {node.name} node it left running (pid {node.pid})"
        typer.echo(line)
    else:
        typer.echo(f"stopped engine pid {before.pid} ({before.profile})")


@engine_app.command("status")
def status_cmd(
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Show the engine's state, health, memory and model."""
    paths = Paths.from_env()
    status = Supervisor(paths).status()
    page_math = _page_math(status, paths)
    if as_json:
        doc = status.to_json()
        doc["prefix_cache"] = page_math.to_json() if page_math else None
        typer.echo(json.dumps(doc, indent=2))
        return
    typer.echo(_describe(status, page_math))
    if status.state in ("crashed", "degraded"):
        raise typer.Exit(1)


def _page_math(status: EngineStatus, paths: Paths) -> PageMath | None:
    """The running profile's prefix-cache page math; None if unknown or not hybrid."""
    if status.profile is None:
        return None
    try:
        profile = load_profile(status.profile, paths)
    except UserError:
        return None  # the profile file changed or went away since the start
    log = tail_lines(Path(status.log_path), 400) if status.log_path else None
    return prefix_cache_math(profile, paths, log)


def _describe(s: EngineStatus, page_math: PageMath | None = None) -> str:
    if s.state == "stopped":
        return "engine: stopped"
    lines = [f"engine: {s.state}" + (f" ({s.phase})" if s.state == "booting" and s.phase else "")]
    rows = [
        ("profile", s.profile),
        ("model", s.model),
        ("pid", s.pid),
        ("port", s.port),
        ("url", s.base_url),
        ("healthy", "yes" if s.healthy else "no"),
        ("uptime", human_duration(s.uptime_s) if s.uptime_s is not None else None),
        ("memory", human_bytes(s.memory_rss_bytes) if s.memory_rss_bytes else None),
        ("vllm", s.vllm_version),
        ("log", s.log_path),
    ]
    if s.state == "crashed":
        rows.append(("exit", _exit_text(s)))
    for line in s.plugin:
        rows.append(("plugin", line))
    if page_math is not None:
        rows.append(("prefix", page_math.summary()))
    lines += [f"  {k:<8} {v}" for k, v in rows if v is not None]
    if s.log_tail:
        lines.append("  last log lines:")
        lines += [f"  | {line}" for line in s.log_tail]
    for node in s.nodes:
        lines.append(f"  {node.name:<8} {_node_line(node)}")
        lines += [f"  | [{node.name}] {line}" for line in node.log_tail]
        if s.state == "crashed" and node.state == "running":
            lines.append(
                f"  the {node.name} node still runs without its head (vLLM's headless "
                "worker never exits on its own): `sparkcode engine stop` ends it"
            )
    return "\n".join(lines)


def _exit_text(s: EngineStatus) -> str:
    """How a crashed engine ended: its exit code and signal, as its runner recorded them."""
    if s.exit_code is None and s.exit_signal is None:
        # The runner ignores SIGINT/SIGTERM and always writes the engine's exit: only a
        # SIGKILL of the runner itself (kill -9 of the group, the OOM killer) or a
        # reboot leaves nothing.
        return (
            "code unknown: no exit status recorded (the engine's runner was killed "
            "with it, e.g. kill -9 of its process group)"
        )
    code = s.exit_code if s.exit_code is not None else "unknown"
    return f"code {code}" + (f", signal {s.exit_signal}" if s.exit_signal else "")


def _node_line(node: NodeStatus) -> str:
    """One worker node in `engine status`: state, where, pid, memory, how it ended."""
    parts = [node.state, node.where]
    if node.address:
        parts.append(node.address)
    if node.pid is not None:
        parts.append(f"pid {node.pid}")
    if node.memory_rss_bytes:
        parts.append(human_bytes(node.memory_rss_bytes))
    if node.state == "exited":
        code = node.exit_code if node.exit_code is not None else "unknown"
        parts.append(
            f"exit code {code}" + (f", signal {node.exit_signal}" if node.exit_signal else "")
        )
        cause = likely_cause(node.log_tail)
        if cause:
            parts.append(cause)
    if node.error:
        parts.append(node.error)
    return ", ".join(str(p) for p in parts)


@engine_app.command("logs")
def logs_cmd(
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing new lines.")
    ] = False,
    lines: Annotated[int, typer.Option("-n", "--lines", help="How many lines to show.")] = 50,
) -> None:
    """Print the engine log (the running engine's, else the latest); a multi-node
    engine's lines are tagged [head] and [worker]."""
    sup = Supervisor(Paths.from_env())
    path = sup.log_path()
    if path is None:
        raise EngineStateError("no engine log yet; start an engine first")
    transports = sup.transports()
    tag = "[head] " if transports else ""
    for line in tail_lines(path, lines):
        typer.echo(f"{tag}{line}")
    for transport in transports:
        for line in transport.logs(lines):
            typer.echo(f"[{transport.name}] {line}")
    if follow:
        _follow(sup, path, tag)


def _follow(sup: Supervisor, path: Path, tag: str = "") -> None:
    with path.open("rb") as fh:
        fh.seek(0, 2)
        while True:
            chunk = fh.readline()
            if chunk:
                typer.echo(tag + chunk.decode("utf-8", "replace").rstrip("\n"))
                continue
            if sup.status().state in ("stopped", "crashed"):
                return
            time.sleep(0.2)
