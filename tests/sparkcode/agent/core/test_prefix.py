"""Prefix stability (docs/agent.md): every request's prompt, rendered as vLLM renders it
through a real chat template, opens with the whole prompt of the request before it
(minus its generation prompt), byte for byte and token for token, while the effort,
thinking, the mode and a question turn change mid-conversation; also across /undo and
a resumed session.

Templates: GLM-5.3-Flash's as reconstructed from the notes (``tests/support/
glm53_chat_template.jinja``, not the official file; it renders the effort before the
history) and the official Qwen2.5-Coder one the cpu-coder profiles install (tools
before the history). Bodies are the ones the real agent sent to a scripted server.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from engine.paths import Paths
from engine.profiles import AgentKnobs
from sparkcode.agent import (
    Agent,
    AgentSettings,
    BudgetExceeded,
    ChatClient,
    Event,
    Permissions,
    ToolCallFinished,
)
from sparkcode.agent.core.effort import PLACEMENTS, placement_names
from sparkcode.agent.scaffold import QUESTION_REFUSAL
from sparkcode.config import Config
from sparkcode.replay import rebuild_conversation
from sparkcode.sessions import SessionStore
from sparkcode.start import SessionOptions, build_session, resolve_target
from tests.support.prompts import (
    GLM_TEMPLATE,
    QWEN_TEMPLATE,
    common_prefix,
    render_prompt,
    template_tokenizer,
)
from tests.support.scripted import Reply, ScriptedServer

pytestmark = pytest.mark.slow  # vLLM's request model takes ~10 s to import

READ_A = json.dumps({"path": "a.py"})


@pytest.fixture(scope="module")
def glm() -> Any:
    return template_tokenizer(GLM_TEMPLATE)


@pytest.fixture(scope="module")
def qwen() -> Any:
    return template_tokenizer(QWEN_TEMPLATE)


def make_agent(server: ScriptedServer, workspace: Path, **settings: Any) -> Agent:
    client = ChatClient("http://engine.test/v1", "m", transport=server.transport())
    return Agent(
        client,
        workspace,
        settings=AgentSettings(**settings),
        permissions=Permissions(Config(), mode="full-auto"),
    )


async def run(agent: Agent, text: str, *, after_call: dict[str, Any] | None = None) -> list[Event]:
    """One turn; ``after_call``: settings to change once the first call has run (a
    change made while the turn runs, as /effort can be)."""
    events: list[Event] = []
    async for event in agent.run_turn(text):
        events.append(event)
        if isinstance(event, ToolCallFinished) and after_call:
            for name, value in after_call.items():
                setattr(agent.settings, name, value)
            after_call = None
    return events


def breaks(tokenizer: Any, bodies: list[dict[str, Any]]) -> list[tuple[int, int, str]]:
    """Where each request's prompt stops opening with the one before it: (request,
    characters shared, the earlier prompt's text from there); empty when none does."""
    out = []
    for i in range(1, len(bodies)):
        before = render_prompt(tokenizer, bodies[i - 1], generation=False)
        now = render_prompt(tokenizer, bodies[i])
        if not now.startswith(before):
            at = common_prefix(before, now)
            out.append((i + 1, at, before[at : at + 60]))
            continue
        ids_before = tokenizer(before, add_special_tokens=False)["input_ids"]
        ids_now = tokenizer(now, add_special_tokens=False)["input_ids"]
        assert ids_now[: len(ids_before)] == ids_before, f"request {i + 1}: tokens differ"
    return out


def glm_script() -> list[Reply]:
    return [
        Reply(tool_calls=[("read_file", READ_A)]),
        Reply(content=["x is 1"]),
        Reply(tool_calls=[("read_file", READ_A)]),
        Reply(content=["still 1"]),
        Reply(until_closed=True),
        Reply(content=["planned"]),
    ]


async def glm_conversation(workspace: Path, place: str) -> list[dict[str, Any]]:
    """Effort low, then high between turns, max while a turn runs, then low again for a
    turn in plan mode whose thinking runs past its budget (its retry has thinking off)."""
    (workspace / "a.py").write_text("x = 1\n")
    server = ScriptedServer(glm_script())
    agent = make_agent(
        server,
        workspace,
        effort_placement=place,
        reasoning_effort="low",
        thinking_history=True,
        degenerate="off",
    )
    await run(agent, "What is x in a.py?")
    agent.settings.reasoning_effort = "high"  # what /effort high does
    await run(agent, "Read it again.", after_call={"reasoning_effort": "max"})
    agent.set_mode("plan")
    agent.settings.reasoning_effort = "low"
    agent.settings.thinking_token_budget, agent.settings.budget_margin = 8, 2
    events = await run(agent, "Plan a change of x.")
    assert any(isinstance(e, BudgetExceeded) for e in events)
    return server.requests


async def test_glm_effort_thinking_and_mode_changes_keep_the_prefix(
    glm: Any, workspace: Path
) -> None:
    bodies = await glm_conversation(workspace, "glm")
    assert len(bodies) == 6
    assert breaks(glm, bodies) == []
    # The template's value stays the first; the changes are said after the history.
    assert {b["reasoning_effort"] for b in bodies} == {"low"}
    notes = [m["content"] for m in bodies[-1]["messages"] if m["role"] == "system"][1:]
    assert notes == ["Reasoning Effort: High", "Reasoning Effort: Max", "Reasoning Effort: Low"]
    assert bodies[4]["chat_template_kwargs"] == {"enable_thinking": True}
    assert bodies[5]["chat_template_kwargs"] == {"enable_thinking": False}
    assert render_prompt(glm, bodies[5]).endswith("<|assistant|><think></think>")
    assert bodies[5]["messages"][-1]["content"].endswith(
        "Nothing is changed until the user approves the plan.]"
    )


async def test_glm_with_the_effort_in_each_request_breaks_at_token_three(
    glm: Any, workspace: Path
) -> None:
    # The control: the same conversation saying the effort per request (what a
    # template without the effort line gets) re-renders GLM's prompt from its start.
    bodies = await glm_conversation(workspace, "request")
    found = breaks(glm, bodies)
    assert [(request, text.split("<")[0]) for request, _, text in found] == [
        (3, "Low"),
        (4, "High"),
        (5, "Max"),
        (6, "Low"),
    ]
    assert all(at == len("[gMASK]<sop><|system|>Reasoning Effort: ") for _, at, _ in found)


async def test_glm_thinking_of_an_earlier_turn_is_the_one_break_left(
    glm: Any, workspace: Path
) -> None:
    # GLM's template clears an earlier turn's reasoning (clear_thinking): a turn that
    # kept thinking between its calls (thinking_history) is rendered without it once
    # the next user message comes. The prefix holds up to that assistant message.
    (workspace / "a.py").write_text("x = 1\n")
    server = ScriptedServer(
        [
            Reply(reasoning=["look at a.py"], tool_calls=[("read_file", READ_A)]),
            Reply(content=["x is 1"]),
            Reply(content=["ok"]),
        ]
    )
    agent = make_agent(server, workspace, effort_placement="glm", thinking_history=True)
    await run(agent, "What is x in a.py?")
    await run(agent, "Thanks.")
    found = breaks(glm, server.requests)
    assert [(request, text[: len("look at a.py</think>")]) for request, _, text in found] == [
        (3, "look at a.py</think>")
    ]
    before = render_prompt(glm, server.requests[1], generation=False)
    assert before[: found[0][1]].endswith("What is x in a.py?<|assistant|><think>")


async def test_qwen_question_turns_and_effort_changes_keep_the_tool_list(
    qwen: Any, workspace: Path
) -> None:
    (workspace / "a.py").write_text("x = 1\n")
    edit = json.dumps({"path": "a.py", "old_string": "x = 1", "new_string": "x = 2"})
    server = ScriptedServer(
        [
            Reply(tool_calls=[("edit_file", edit)]),
            Reply(content=["x is 1"]),
            Reply(tool_calls=[("edit_file", edit)]),
            Reply(content=["done"]),
        ]
    )
    agent = make_agent(server, workspace, questions_read_only=True, reasoning_effort="low")
    events = await run(agent, "What is x in a.py?")
    finished = [e for e in events if isinstance(e, ToolCallFinished)]
    assert finished[0].error == QUESTION_REFUSAL  # offered, but refused by name
    assert (workspace / "a.py").read_text() == "x = 1\n"
    agent.settings.reasoning_effort = "high"
    await run(agent, "Fix a.py so that x is 2.")
    assert (workspace / "a.py").read_text() == "x = 2\n"
    bodies = server.requests
    assert all(b["tools"] == agent.tools.specs() for b in bodies)
    assert [b["reasoning_effort"] for b in bodies] == ["low", "low", "high", "high"]
    assert breaks(qwen, bodies) == []


async def test_undo_takes_the_effort_note_back_with_its_turn(glm: Any, workspace: Path) -> None:
    server = ScriptedServer(
        [
            Reply(content=["one"]),
            Reply(content=["two"]),
            Reply(content=["three"]),
            Reply(content=["four"]),
        ]
    )
    agent = make_agent(server, workspace, effort_placement="glm")
    await run(agent, "first")
    agent.settings.reasoning_effort = "high"
    await run(agent, "second")
    assert agent.history[-3] == {"role": "system", "content": "Reasoning Effort: High"}
    agent.undo()
    assert [m["role"] for m in agent.history] == ["system", "user", "assistant"]
    await run(agent, "second again")  # still high: said again
    agent.undo()
    agent.settings.reasoning_effort = "low"
    await run(agent, "second, low")  # back to the pinned effort: no note
    third, fourth = server.requests[2:]
    assert third["messages"][-2] == {"role": "system", "content": "Reasoning Effort: High"}
    assert [m["role"] for m in fourth["messages"]] == ["system", "user", "assistant", "user"]
    assert breaks(glm, [server.requests[0], third]) == []
    assert breaks(glm, [server.requests[0], fourth]) == []


async def test_a_resumed_session_keeps_the_recorded_effort_in_the_template(
    glm: Any, workspace: Path, paths: Paths
) -> None:
    async def start(server: ScriptedServer, effort: str, **options: Any) -> Any:
        target = resolve_target(workspace, paths, endpoint="http://engine.test/v1")
        knobs = AgentKnobs(effort_placement="glm", reasoning_effort=effort)  # type: ignore[arg-type]
        return await build_session(
            target,
            SessionOptions(
                origin="run",
                permission_mode="full-auto",
                transport=server.transport(),
                knobs=knobs,
                **options,
            ),
            paths,
        )

    first = ScriptedServer([Reply(content=["one"]), Reply(content=["two"])])
    session = await start(first, "low")
    async for _ in session.agent.run_turn("first"):
        pass
    session.agent.settings.reasoning_effort = "high"
    async for _ in session.agent.run_turn("second"):
        pass
    await session.aclose()
    rebuilt = await rebuild_conversation(SessionStore(paths.sessions_dir).load(session.session_id))
    assert rebuilt.reasoning_effort == "low"

    again = ScriptedServer([Reply(content=["three"])])
    resumed = await start(again, "max", resume=rebuilt)  # this start says max
    async for _ in resumed.agent.run_turn("third"):
        pass
    await resumed.aclose()
    body = again.requests[0]
    assert body["reasoning_effort"] == "low"
    assert body["messages"][-2] == {"role": "system", "content": "Reasoning Effort: Max"}
    assert breaks(glm, [first.requests[-1], body]) == []


def test_the_knob_names_the_placements_of_the_table() -> None:
    assert set(placement_names()) == set(PLACEMENTS)
