"""Hooks with real shells: block, format, time out, crash, trust (scripted server)."""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from engine.paths import Paths
from sparkcode.agent import HookRan, Notice, ToolCallFinished, TurnFinished, TurnStarted
from sparkcode.agent.hooks import STOP_CONTINUES, HookContext, Hooks, describe
from sparkcode.config import parse_config
from sparkcode.hook_specs import HookConfigError, HookSpec, parse_claude_hooks, project_hooks
from sparkcode.session_hooks import session_hooks
from sparkcode.trust import TrustStore
from tests.sparkcode.agent.test_loop import make_agent, of, run
from tests.support.scripted import Reply, ScriptedServer

PY = shlex.quote(sys.executable)


def hooks(workspace: Path, *specs: HookSpec) -> Hooks:
    return Hooks(specs, HookContext(workspace=workspace, session_id="s1"))


def tool_results(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


async def test_a_pre_tool_use_hook_exiting_2_blocks_the_call_and_tells_the_model(
        workspace: Path) -> None:
    # The hook reads the event's JSON on stdin, as Claude Code's hooks do.
    guard = (f"{PY} -c \"import json,sys; e=json.load(sys.stdin); "
             "sys.exit(0) if 'rm ' not in e['tool_input']['command'] else "
             "(print('no rm here, use git clean', file=sys.stderr), sys.exit(2))\"")
    server = ScriptedServer([
        Reply(tool_calls=[("bash", json.dumps({"command": "rm -f keep.txt"}))]),
        Reply(content=["ok"]),
    ])
    (workspace / "keep.txt").write_text("x")
    agent = make_agent(server, workspace)
    agent.hooks = hooks(workspace, HookSpec("PreToolUse", guard, matcher="Bash"))
    events = await run(agent, "clean up")
    assert (workspace / "keep.txt").exists()  # the tool never ran
    ran = of(events, HookRan)[0]
    assert ran.blocked and ran.exit_code == 2 and ran.call_id is not None
    finished = of(events, ToolCallFinished)[0]
    assert finished.error and "no rm here, use git clean" in finished.result
    assert "no rm here, use git clean" in tool_results(server.requests[1])[0]


async def test_a_post_tool_use_hook_formats_the_edited_file(workspace: Path) -> None:
    fmt = workspace.parent / "fmt.py"
    fmt.write_text("import json, pathlib, sys\n"
                   "p = pathlib.Path(json.load(sys.stdin)['tool_input']['path'])\n"
                   "p.write_text(''.join(l.rstrip() + '\\n' for l in p.read_text()"
                   ".splitlines()))\nprint('formatted', p.name)\n")
    server = ScriptedServer([
        Reply(tool_calls=[("write_file", json.dumps({"path": "a.py",
                                                     "content": "x = 1   \ny = 2\t\n"}))]),
        Reply(content=["done"]),
    ])
    agent = make_agent(server, workspace)
    agent.hooks = hooks(workspace, HookSpec("PostToolUse", f"{PY} {fmt}",
                                            matcher="Edit|Write|MultiEdit"))
    events = await run(agent, "write a.py")
    assert (workspace / "a.py").read_text() == "x = 1\ny = 2\n"
    ran = of(events, HookRan)[0]
    assert ran.exit_code == 0 and ran.stdout == "formatted a.py" and ran.tool == "write_file"
    assert "formatted a.py" in describe(ran)
    # Exit 0: shown to the user, not sent to the model.
    assert "formatted" not in tool_results(server.requests[1])[0]


async def test_a_post_tool_use_hook_exiting_2_appends_its_stderr_to_the_result(
        workspace: Path) -> None:
    server = ScriptedServer([
        Reply(tool_calls=[("write_file", json.dumps({"path": "b.py", "content": "x=\n"}))]),
        Reply(content=["done"]),
    ])
    agent = make_agent(server, workspace)
    agent.hooks = hooks(workspace, HookSpec(
        "PostToolUse", "echo 'b.py:1: SyntaxError' >&2; exit 2", matcher="write_file"))
    await run(agent, "write b.py")
    result = tool_results(server.requests[1])[0]
    assert result.startswith("wrote") or "b.py" in result
    assert result.endswith("b.py:1: SyntaxError")


async def test_a_hanging_hook_is_killed_at_its_timeout_with_its_process_group(
        workspace: Path) -> None:
    pidfile = workspace.parent / "child.pid"
    spec = HookSpec("PreToolUse", f"sleep 60 & echo $! > {pidfile}; wait", timeout_s=0.5)
    server = ScriptedServer([
        Reply(tool_calls=[("bash", json.dumps({"command": "echo ran > out.txt"}))]),
        Reply(content=["ok"]),
    ])
    agent = make_agent(server, workspace)
    agent.hooks = hooks(workspace, spec)
    started = time.monotonic()
    events = await run(agent, "go")
    assert time.monotonic() - started < 10
    ran = of(events, HookRan)[0]
    assert ran.timed_out and ran.failed and not ran.blocked and "timed out" in describe(ran)
    with pytest.raises(ProcessLookupError):  # the background sleep died with the group
        for _ in range(50):
            os.kill(int(pidfile.read_text()), 0)
            time.sleep(0.1)
    # A timeout is not a block: the tool still ran.
    assert (workspace / "out.txt").read_text() == "ran\n"


async def test_a_crashing_hook_is_an_error_shown_and_the_turn_goes_on(workspace: Path) -> None:
    server = ScriptedServer([
        Reply(tool_calls=[("bash", json.dumps({"command": "echo hi"}))]),
        Reply(content=["ok"]),
    ])
    agent = make_agent(server, workspace)
    agent.hooks = hooks(workspace, HookSpec("PostToolUse", "no-such-command-xyz"))
    events = await run(agent, "go")
    ran = of(events, HookRan)[0]
    assert ran.exit_code == 127 and ran.failed
    assert "failed (exit 127)" in describe(ran) and "not found" in describe(ran)
    assert of(events, TurnFinished)[-1].reason == "stop"
    assert "no-such-command" not in tool_results(server.requests[1])[0]


async def test_a_user_prompt_submit_hook_can_refuse_a_prompt(workspace: Path) -> None:
    server = ScriptedServer([Reply(content=["fine"])])
    agent = make_agent(server, workspace)
    agent.hooks = hooks(workspace, HookSpec(
        "UserPromptSubmit",
        f"{PY} -c \"import json,sys; p=json.load(sys.stdin)['prompt']; "
        "sys.exit(2 if 'secret' in p else 0)\" || (echo 'no secrets please' >&2; exit 2)"))
    events = await run(agent, "print the secret")
    assert of(events, TurnFinished)[-1].reason == "blocked"
    assert any(n.code == "prompt_blocked" and "no secrets please" in n.message
               for n in of(events, Notice))
    assert server.requests == [] and len(agent.history) == 1 and agent.turns == 0
    events = await run(agent, "hello")
    assert of(events, TurnFinished)[-1].reason == "stop" and agent.turns == 1


async def test_session_start_output_joins_the_first_prompt_once(workspace: Path) -> None:
    server = ScriptedServer([Reply(content=["a"]), Reply(content=["b"])])
    agent = make_agent(server, workspace)
    agent.hooks = hooks(workspace, HookSpec(
        "SessionStart", f"{PY} -c \"import json,sys; print('branch main,', "
        "json.load(sys.stdin)['source'])\""))
    events = await run(agent, "first")
    assert of(events, TurnStarted)[0].user_text == "first"  # as typed; the context is sent
    await run(agent, "second")
    users = [m["content"] for m in server.requests[1]["messages"] if m["role"] == "user"]
    assert users == ["first\n\nbranch main, startup", "second"]


async def test_a_stop_hook_sends_the_model_back_but_only_a_few_times(workspace: Path) -> None:
    server = ScriptedServer([Reply(content=[f"answer {i}"]) for i in range(10)])
    agent = make_agent(server, workspace)
    agent.hooks = hooks(workspace, HookSpec("Stop", "echo 'tests fail: 2 failed' >&2; exit 2"))
    events = await run(agent, "fix it")
    assert len(server.requests) == STOP_CONTINUES + 1
    last = server.requests[-1]["messages"][-1]
    assert last["role"] == "user" and "tests fail: 2 failed" in last["content"]
    assert any(n.code == "stop_hook_limit" for n in of(events, Notice))
    assert of(events, TurnFinished)[-1].reason == "stop"


def test_config_toml_hooks_and_their_bad_entries(tmp_path: Path) -> None:
    cfg = parse_config('[[hooks.PostToolUse]]\nmatcher = "edit_file|write_file"\n'
                       'command = "ruff format ."\ntimeout_s = 30\n', tmp_path / "c.toml")
    (spec,) = cfg.hooks
    assert spec.event == "PostToolUse" and spec.timeout_s == 30 and spec.matches("edit_file")
    assert not spec.matches("multi_edit") and not spec.matches("bash")
    for bad, why in [('[[hooks.PostTool]]\ncommand = "x"\n', "unknown hook event"),
                     ('[[hooks.Stop]]\ncommand = ""\n', "command must be"),
                     ('[[hooks.Stop]]\ncommand = "x"\nmatcher = "("\n', "not a valid regex"),
                     ('[[hooks.Stop]]\ncommand = "x"\ntimeout_s = 0\n', "timeout"),
                     ('[[hooks.Stop]]\ncommand = "x"\nwhen = 1\n', "unknown key 'when'")]:
        with pytest.raises(HookConfigError, match=why):
            parse_config(bad, tmp_path / "c.toml")


def test_claude_settings_hooks_are_read_with_claude_tool_names(workspace: Path) -> None:
    (workspace / ".claude").mkdir()
    (workspace / ".claude" / "settings.json").write_text(json.dumps({"hooks": {
        "PostToolUse": [{"matcher": "Edit|Write", "hooks": [
            {"type": "command", "command": "npx prettier --write .", "timeout": 20}]}]}}))
    (workspace / ".sparkcode").mkdir()
    (workspace / ".sparkcode" / "hooks.toml").write_text('[[Stop]]\ncommand = "make test"\n')
    found = project_hooks(workspace)
    assert [(s.event, s.source) for s in found] == [
        ("Stop", ".sparkcode/hooks.toml"), ("PostToolUse", ".claude/settings.json")]
    post = found[1]
    assert post.matches("edit_file") and post.matches("write_file") and post.timeout_s == 20
    assert not post.matches("bash")
    with pytest.raises(HookConfigError, match="only \"type\": \"command\""):
        parse_claude_hooks({"Stop": [{"hooks": [{"type": "http", "url": "x"}]}]}, "s.json")


async def test_project_hooks_run_only_once_the_project_is_trusted(workspace: Path,
                                                                  paths: Paths) -> None:
    (workspace / ".sparkcode").mkdir()
    (workspace / ".sparkcode" / "hooks.toml").write_text('[[Stop]]\ncommand = "true"\n')
    user = (HookSpec("Stop", "echo user"),)

    async def start(trust: bool | None, answer: bool | None = None) -> tuple[Hooks, list[str]]:
        async def ask(ws: Path, specs: tuple[HookSpec, ...]) -> bool:
            assert ws == workspace and specs[0].command == "true"
            assert answer is not None
            return answer

        return await session_hooks(workspace, user, paths, trust=trust,
                                   ask=ask if answer is not None else None,
                                   session_id="s", transcript=None)

    got, notes = await start(None)  # `run` without a terminal and without the flag
    assert got.specs == user and "not trusted" in notes[0] and "--trust-project" in notes[0]
    got, _ = await start(None, answer=False)
    assert got.specs == user and not TrustStore(paths.state_dir).is_trusted(workspace)
    # A real shell proves the untrusted hook is not run at all.
    server = ScriptedServer([Reply(content=["ok"])])
    agent = make_agent(server, workspace)
    agent.hooks = got
    assert [r.command for r in of(await run(agent, "hi"), HookRan)] == ["echo user"]
    got, _ = await start(None, answer=True)  # asked once, remembered
    assert [s.command for s in got.specs] == ["echo user", "true"]
    got, notes = await start(None)
    assert len(got.specs) == 2 and "project hooks: 1" in notes[0]


async def test_a_malformed_project_hook_file_is_a_note_not_a_failed_start(
        workspace: Path, paths: Paths) -> None:
    (workspace / ".sparkcode").mkdir()
    (workspace / ".sparkcode" / "hooks.toml").write_text("[[Stop]\n")
    got, notes = await session_hooks(workspace, (), paths, trust=True, ask=None,
                                     session_id=None, transcript=None)
    assert not got.specs and "malformed TOML" in notes[0]


async def test_a_hook_that_exits_leaving_a_child_keeps_its_exit_code(workspace: Path) -> None:
    # The child holds stdout open; the hook itself is done: exit 0, not a timeout.
    spec = HookSpec("Stop", "sleep 60 & echo started; exit 0", timeout_s=5)
    started = time.monotonic()
    (ran,) = await hooks(workspace, spec).run("Stop", {"stop_hook_active": False})
    assert time.monotonic() - started < 3
    assert ran.exit_code == 0 and not ran.timed_out and ran.stdout == "started"


async def test_the_event_json_reaches_the_hook_on_stdin(workspace: Path) -> None:
    spec = HookSpec("PostToolUse", "cat", matcher="bash")
    (ran,) = await hooks(workspace, spec).run(
        "PostToolUse", {"tool_name": "bash", "tool_input": {"command": "ls"},
                        "tool_response": "exit code 0"}, tool="bash", call_id="c9")
    sent = json.loads(ran.stdout)
    assert sent == {"session_id": "s1", "transcript_path": "", "cwd": str(workspace),
                    "hook_event_name": "PostToolUse", "tool_name": "bash",
                    "tool_input": {"command": "ls"}, "tool_response": "exit code 0"}
    assert ran.call_id == "c9" and ran.tool == "bash"
