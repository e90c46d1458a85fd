"""Hooks with real shells: block, format, time out, crash, stop (scripted server)."""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from sparkcode.agent import HookRan, Notice, ToolCallFinished, TurnFinished, TurnStarted
from sparkcode.agent.extensions.hooks import STOP_CONTINUES, HookContext, Hooks
from sparkcode.hooks import HookSpec
from sparkcode.hooks.session import describe
from tests.sparkcode.agent.core.test_loop import make_agent, of, run
from tests.support.scripted import Reply, ScriptedServer

PY = shlex.quote(sys.executable)


def hooks(workspace: Path, *specs: HookSpec) -> Hooks:
    return Hooks(specs, HookContext(workspace=workspace, session_id="s1"))


def tool_results(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


async def test_a_pre_tool_use_hook_exiting_2_blocks_the_call_and_tells_the_model(
    workspace: Path,
) -> None:
    # The hook reads the event's JSON on stdin, as Claude Code's hooks do.
    guard = (
        f'{PY} -c "import json,sys; e=json.load(sys.stdin); '
        "sys.exit(0) if 'rm ' not in e['tool_input']['command'] else "
        "(print('no rm here, use git clean', file=sys.stderr), sys.exit(2))\""
    )
    server = ScriptedServer(
        [
            Reply(tool_calls=[("bash", json.dumps({"command": "rm -f keep.txt"}))]),
            Reply(content=["ok"]),
        ]
    )
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
    fmt.write_text(
        "import json, pathlib, sys\n"
        "p = pathlib.Path(json.load(sys.stdin)['tool_input']['path'])\n"
        "p.write_text(''.join(l.rstrip() + '\\n' for l in p.read_text()"
        ".splitlines()))\nprint('formatted', p.name)\n"
    )
    server = ScriptedServer(
        [
            Reply(
                tool_calls=[
                    ("write_file", json.dumps({"path": "a.py", "content": "x = 1   \ny = 2\t\n"}))
                ]
            ),
            Reply(content=["done"]),
        ]
    )
    agent = make_agent(server, workspace)
    agent.hooks = hooks(
        workspace, HookSpec("PostToolUse", f"{PY} {fmt}", matcher="Edit|Write|MultiEdit")
    )
    events = await run(agent, "write a.py")
    assert (workspace / "a.py").read_text() == "x = 1\ny = 2\n"
    ran = of(events, HookRan)[0]
    assert ran.exit_code == 0 and ran.stdout == "formatted a.py" and ran.tool == "write_file"
    assert "formatted a.py" in describe(ran)
    # Exit 0: shown to the user, not sent to the model.
    assert "formatted" not in tool_results(server.requests[1])[0]


async def test_a_post_tool_use_hook_exiting_2_appends_its_stderr_to_the_result(
    workspace: Path,
) -> None:
    server = ScriptedServer(
        [
            Reply(tool_calls=[("write_file", json.dumps({"path": "b.py", "content": "x=\n"}))]),
            Reply(content=["done"]),
        ]
    )
    agent = make_agent(server, workspace)
    agent.hooks = hooks(
        workspace,
        HookSpec("PostToolUse", "echo 'b.py:1: SyntaxError' >&2; exit 2", matcher="write_file"),
    )
    await run(agent, "write b.py")
    result = tool_results(server.requests[1])[0]
    assert result.startswith("wrote") or "b.py" in result
    assert result.endswith("b.py:1: SyntaxError")


async def test_a_hanging_hook_is_killed_at_its_timeout_with_its_process_group(
    workspace: Path,
) -> None:
    pidfile = workspace.parent / "child.pid"
    spec = HookSpec("PreToolUse", f"sleep 60 & echo $! > {pidfile}; wait", timeout_s=0.5)
    server = ScriptedServer(
        [
            Reply(tool_calls=[("bash", json.dumps({"command": "echo ran > out.txt"}))]),
            Reply(content=["ok"]),
        ]
    )
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
    server = ScriptedServer(
        [Reply(tool_calls=[("bash", json.dumps({"command": "echo hi"}))]), Reply(content=["ok"])]
    )
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
    agent.hooks = hooks(
        workspace,
        HookSpec(
            "UserPromptSubmit",
            f"{PY} -c \"import json,sys; p=json.load(sys.stdin)['prompt']; "
            "sys.exit(2 if 'secret' in p else 0)\" || (echo 'no secrets please' >&2; exit 2)",
        ),
    )
    events = await run(agent, "print the secret")
    assert of(events, TurnFinished)[-1].reason == "blocked"
    assert any(
        n.code == "prompt_blocked" and "no secrets please" in n.message for n in of(events, Notice)
    )
    assert server.requests == [] and len(agent.history) == 1 and agent.turns == 0
    events = await run(agent, "hello")
    assert of(events, TurnFinished)[-1].reason == "stop" and agent.turns == 1


async def test_session_start_output_joins_the_first_prompt_once(workspace: Path) -> None:
    server = ScriptedServer([Reply(content=["a"]), Reply(content=["b"])])
    agent = make_agent(server, workspace)
    agent.hooks = hooks(
        workspace,
        HookSpec(
            "SessionStart",
            f"{PY} -c \"import json,sys; print('branch main,', json.load(sys.stdin)['source'])\"",
        ),
    )
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


async def test_a_hook_that_exits_leaving_a_child_keeps_its_exit_code(workspace: Path) -> None:
    # The child holds stdout open; the hook itself is done: exit 0, not a timeout.
    # Waiting for the child would end only at the 30 s timeout; the bound leaves a
    # loaded machine room to start bash.
    spec = HookSpec("Stop", "sleep 60 & echo started; exit 0", timeout_s=30)
    started = time.monotonic()
    (ran,) = await hooks(workspace, spec).run("Stop", {"stop_hook_active": False})
    assert time.monotonic() - started < 20
    assert ran.exit_code == 0 and not ran.timed_out and ran.stdout == "started"


async def test_the_event_json_reaches_the_hook_on_stdin(workspace: Path) -> None:
    spec = HookSpec("PostToolUse", "cat", matcher="bash")
    (ran,) = await hooks(workspace, spec).run(
        "PostToolUse",
        {"tool_name": "bash", "tool_input": {"command": "ls"}, "tool_response": "exit code 0"},
        tool="bash",
        call_id="c9",
    )
    sent = json.loads(ran.stdout)
    assert sent == {
        "session_id": "s1",
        "transcript_path": "",
        "cwd": str(workspace),
        "hook_event_name": "PostToolUse",
        "tool_name": "bash",
        "tool_input": {"command": "ls"},
        "tool_response": "exit code 0",
    }
    assert ran.call_id == "c9" and ran.tool == "bash"
