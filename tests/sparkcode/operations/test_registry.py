"""The one operations layer: both fronts offer what the registry says, the same way."""

from __future__ import annotations

from pathlib import Path
from typing import get_args

import msgspec
import pytest

from engine.paths import Paths
from engine.profiles import AgentKnobs, ReasoningEffort
from sparkcode.acp import _dispatch
from sparkcode.acp._commands import available_commands
from sparkcode.acp._commands import parse_command as acp_parse
from sparkcode.operations import (
    EFFORTS,
    REGISTRY,
    Arg,
    Operation,
    Ops,
    Reply,
    Setting,
    offered,
    registered,
)
from sparkcode.sessions import SessionStore
from sparkcode.start import AgentSession, SessionOptions, build_session, resolve_target
from sparkcode.tui import commands as tui
from sparkcode.tui.completion import suggest_completion, unique_command
from tests.support.scripted import Reply as ModelReply
from tests.support.scripted import ScriptedServer


def test_both_fronts_offer_the_shared_commands_with_the_same_help_and_arguments() -> None:
    shared = {op.name for op in REGISTRY.values() if op.fronts == {"tui", "acp"}}
    acp = {c.name: c for c in available_commands()}
    tui_shared = {name for name in tui.COMMANDS if name in shared}
    assert {
        "clear",
        "undo",
        "redo",
        "compact",
        "context",
        "effort",
        "act",
        "jobs",
        "export",
    } <= shared
    assert set(acp) == shared == tui_shared
    for name in shared:
        op, ours, theirs = REGISTRY[name], tui.COMMANDS[name], acp[name]
        assert ours.help == theirs.description == op.help
        assert ours.choices == op.choices
        hint = theirs.input.root.hint if theirs.input is not None else None
        assert hint == (op.arg.hint if op.arg is not None else None)
        if op.choices:
            assert hint == "|".join(ours.choices)  # the editor sees the same values
    for name, op in REGISTRY.items():  # one front only: said why, and only there
        if op.fronts != {"tui", "acp"}:
            assert op.only_here and (name in tui.COMMANDS) == ("tui" in op.fronts)
            assert (name in acp) == ("acp" in op.fronts)


def test_every_offered_operation_runs_in_its_front_and_no_handler_is_left_over() -> None:
    shared = {n for n, op in REGISTRY.items() if op.setting or op.query}
    tui_offered = {op.name for op in offered("tui")}
    acp_offered = {op.name for op in offered("acp")}
    assert tui_offered - shared == set(tui.HANDLERS)
    assert acp_offered - shared == set(_dispatch.HANDLERS) | _dispatch.SESSION_HANDLED
    assert not shared & (set(tui.HANDLERS) | set(_dispatch.HANDLERS))


def test_effort_takes_every_value_of_the_setting_in_both_fronts() -> None:
    assert EFFORTS == get_args(ReasoningEffort) and "medium" in EFFORTS
    for effort in EFFORTS:
        msgspec.convert({"reasoning_effort": effort}, AgentKnobs)  # the setting takes it
        assert tui.parse_command(f"/effort {effort}").arg == effort
        parsed = acp_parse(f"/effort {effort}")
        assert parsed is not None and parsed[0].choices == EFFORTS
    hint = next(c for c in available_commands() if c.name == "effort").input
    assert hint is not None and hint.root.hint.split("|") == list(EFFORTS)
    with pytest.raises(msgspec.ValidationError):  # and the registry offers no other
        msgspec.convert({"reasoning_effort": "huge"}, AgentKnobs)
    with pytest.raises(tui.CommandError, match=r"usage: /effort none\|minimal\|low\|medium"):
        tui.parse_command("/effort huge")


async def _built(workspace: Path, paths: Paths, server: ScriptedServer) -> AgentSession:
    target = resolve_target(workspace, paths, endpoint="http://engine.test/v1")
    return await build_session(
        target,
        SessionOptions(origin="acp", start_engine=False, transport=server.transport(), mcp=False),
        paths,
    )


async def _show(event: object) -> None:
    raise AssertionError(f"no event expected, got {event!r}")


async def test_acp_runs_effort_medium_on_the_real_agent_and_the_request_says_it(
    workspace: Path, paths: Paths
) -> None:
    server = ScriptedServer([ModelReply(content=["ok"])])
    session = await _built(workspace, paths, server)
    try:
        ctx = _dispatch.Context(session, _show, SessionStore(paths.sessions_dir))
        effort = REGISTRY["effort"]
        assert await _dispatch.run_command(ctx, effort, "medium") == "reasoning effort: medium"
        assert (await _dispatch.run_command(ctx, effort, "huge")).startswith(
            "/effort failed: usage: /effort none|minimal|low|medium"
        )
        async for _ in session.agent.run_turn("hi"):
            pass
        assert server.requests[-1]["reasoning_effort"] == "medium"
    finally:
        await session.aclose()


async def _pong(agent: Ops, arg: str) -> Reply:
    return Reply(f"pong {arg}".strip() + f" ({agent.context_report().count('|') > 0})")


def _loud(arg: str) -> Setting:
    return Setting(lambda agent: agent.set_thinking_history(arg == "yes"), f"loud: {arg}")


async def test_a_new_command_is_one_entry_that_both_fronts_show_and_run(
    workspace: Path, paths: Paths
) -> None:
    ping = Operation(
        "ping",
        "answer pong (a test entry)",
        Arg("[WORD]"),
        query=_pong,
        palette="Ping",
        no_agent="nothing to ping yet",
    )
    loud = Operation(
        "loud", "set loudness (a test entry)", Arg(choices=("yes", "no")), setting=_loud
    )
    assert "ping" not in tui.COMMANDS and acp_parse("/ping") is None
    with registered(ping), registered(loud):
        # the TUI: commands, /help, completion, palette entries
        assert tui.COMMANDS["ping"].help == ping.help and "/ping [WORD]" in tui.help_markdown()
        assert tui.parse_command("/loud yes").arg == "yes"
        with pytest.raises(tui.CommandError, match=r"usage: /loud yes\|no"):
            tui.parse_command("/loud maybe")
        assert unique_command("/pin") == "/ping" and unique_command("/loud y") == "/loud yes"
        assert suggest_completion("/loud n", None) == "/loud no"  # type: ignore[arg-type]
        # ACP: available commands with the same help and hint, and parsed
        listed = {c.name: c for c in available_commands()}
        assert listed["ping"].description == ping.help
        assert listed["ping"].input is not None
        assert listed["ping"].input.root.hint == "WORD (optional)"
        assert listed["loud"].input is not None and listed["loud"].input.root.hint == "yes|no"
        parsed = acp_parse("/ping there")
        assert parsed is not None and parsed == (ping, "there")
        # and both run it: ACP on the real agent, the TUI through its generic handler
        server = ScriptedServer([])
        session = await _built(workspace, paths, server)
        try:
            ctx = _dispatch.Context(session, _show, SessionStore(paths.sessions_dir))
            assert await _dispatch.run_command(ctx, ping, "there") == "pong there (True)"
            assert await _dispatch.run_command(ctx, loud, "yes") == "loud: yes"
            assert session.agent.settings.thinking_history is True
            assert (await _dispatch.run_command(ctx, loud, "maybe")) == (
                "/loud failed: usage: /loud yes|no"
            )
        finally:
            await session.aclose()
    assert "ping" not in tui.COMMANDS and "ping" not in {c.name for c in available_commands()}
