"""The small-model policy: guards plugged in, called at the loop's named points.

The mechanisms themselves are tested through the agent where they act
(``test_structured.py``, ``test_questions.py``, ``test_kept_files.py``, ...); these tests
show that a guard is one module the policy calls, and the facts the guards share.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Sequence
from pathlib import Path

import sparkcode.agent.scaffold as scaffold_pkg
from sparkcode.agent import Agent, AgentSettings, ChatClient, Notice, Permissions
from sparkcode.agent.core.calls import CheckedCall
from sparkcode.agent.scaffold import DEFAULT_GUARDS, Guard, RequestPlan, Scaffold, Task, ToolResult
from sparkcode.agent.tools import ToolContext, default_tools
from sparkcode.config import Config
from tests.support.scripted import Reply, ScriptedServer

AGENT = Path(scaffold_pkg.__file__).resolve().parent.parent


class Shout(Guard):
    """A new guard: says so at a turn's start, sends a lower temperature on the turn's
    second request, refuses ``bash`` and marks every tool result."""

    def __init__(self, settings: AgentSettings) -> None:
        self.settings = settings
        self.seen: list[str] = []

    def begin_turn(self, task: Task, ctx: ToolContext) -> Sequence[Notice]:
        self.seen.append(f"turn {task.text}")
        return [Notice(message="shouting", code="shout")]

    def before_request(self, plan: RequestPlan, task: Task) -> None:
        self.seen.append(f"request {plan.number}")
        if plan.number == 2:
            plan.params["temperature"] = 0.1

    def after_reply(self, calls: list[CheckedCall], task: Task) -> None:
        for call in calls:
            if call.name == "bash":
                call.error = "no shell while shouting"

    def on_tool_result(self, result: ToolResult, task: Task) -> None:
        result.text += " [HEARD]"


async def test_a_guard_plugged_into_the_policy_acts_at_each_point(workspace: Path) -> None:
    (workspace / "a.py").write_text("x = 1\n")
    server = ScriptedServer(
        [
            Reply(
                tool_calls=[
                    ("read_file", json.dumps({"path": "a.py"})),
                    ("bash", json.dumps({"command": "ls"})),
                ]
            ),
            Reply(content=["x is 1"]),
        ]
    )
    client = ChatClient("http://engine.test/v1", "m", transport=server.transport())
    settings = AgentSettings()
    policy = Scaffold.for_settings(settings, extra=[Shout])
    agent = Agent(
        client,
        workspace,
        settings=settings,
        scaffold=policy,
        permissions=Permissions(Config(), mode="full-auto"),
    )
    events = [e async for e in agent.run_turn("what is x?")]
    shout = policy.guards[-1]
    assert isinstance(shout, Shout)
    assert shout.seen == ["turn what is x?", "request 1", "request 2"]
    assert [e.code for e in events if isinstance(e, Notice)] == ["shout"]
    assert server.requests[0].get("temperature") != 0.1
    assert server.requests[1]["temperature"] == 0.1
    results = [m["content"] for m in server.requests[1]["messages"] if m["role"] == "tool"]
    assert "x = 1" in results[0]
    assert results[0].endswith(" [HEARD]")
    assert results[1] == "error: no shell while shouting [HEARD]"


def test_the_default_policy_is_one_guard_per_module() -> None:
    modules = [make.__module__ for make in DEFAULT_GUARDS]
    assert len(set(modules)) == len(modules)
    assert all(m.startswith("sparkcode.agent.scaffold._") for m in modules)
    policy = Scaffold.for_settings(AgentSettings())
    assert [type(g) for g in policy.guards] == list(DEFAULT_GUARDS)
    assert not policy.steps and Scaffold.for_settings(AgentSettings(structured_tools=True)).steps


def test_the_turn_names_no_private_attribute_of_the_agent() -> None:
    """``_turn.py`` sees the conversation through public names only."""
    tree = ast.parse((AGENT / "core" / "_turn.py").read_text(encoding="utf-8"))
    private = sorted(
        {
            node.attr
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute)
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
        }
    )
    assert private == []
    protocol = next(
        n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Conversation"
    )
    names = [
        str(getattr(n, "name", None) or getattr(getattr(n, "target", None), "id", ""))
        for n in protocol.body
    ]
    assert names and not [n for n in names if n.startswith("_")]


def _call(name: str, **args: str) -> CheckedCall:
    tool = default_tools().get(name)
    return CheckedCall(
        call_id="c",
        name=name,
        raw_arguments="{}",
        args=dict(args),
        history_arguments="{}",
        tool=tool,
    )


def test_the_task_reads_the_message_and_follows_the_results() -> None:
    task = Task.read(
        "Rename helpers.py to textutil.py and add a test to test_b.py, then run the tests.",
        default_tools(),
        steps=False,
    )
    assert task.runs_asked and task.run_pending
    assert task.to_change == ("helpers.py", "textutil.py", "test_b.py")
    task.saw(ToolResult(_call("bash", command="git mv helpers.py textutil.py"), "ok"))
    assert not task.run_pending
    assert task.left_to_change() == "test_b.py"
    task.saw(ToolResult(_call("write_file", path="tests/test_b.py"), "refused: no"))
    assert task.left_to_change() == "test_b.py"  # a refused edit changed nothing
    task.saw(ToolResult(_call("write_file", path="tests/test_b.py"), "wrote it"))
    assert task.left_to_change() == ""


def test_a_result_ran_unless_it_says_it_did_not() -> None:
    assert ToolResult(_call("read_file", path="a"), "x = 1").ran
    for text in ("error: no", "refused: no", "not run: no"):
        assert not ToolResult(_call("read_file", path="a"), text).ran
    unknown = CheckedCall(
        call_id="c", name="nope", raw_arguments="", args={}, history_arguments="{}"
    )
    assert not ToolResult(unknown, "fine").ran
