"""The agent loop against a scripted OpenAI-compatible server, path by path."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from sparkcode.agent import (
    Agent,
    AgentError,
    AgentSettings,
    ApprovalDecision,
    ApprovalRequested,
    ApprovalResolved,
    BudgetExceeded,
    ChatClient,
    ContentDelta,
    Event,
    Notice,
    Permissions,
    ReasoningDelta,
    SnapshotTaken,
    ToolCallFinished,
    TurnFinished,
    UndoStore,
    UsageUpdate,
)
from sparkcode.agent.scaffold.prompts import LOOP_NUDGE
from sparkcode.config import Config, PermissionRule
from tests.support.scripted import Reply, ScriptedServer, assistant_messages


def make_agent(
    server: ScriptedServer,
    workspace: Path,
    *,
    mode: str = "full-auto",
    config: Config | None = None,
    undo: UndoStore | None = None,
    **settings: Any,
) -> Agent:
    client = ChatClient("http://engine.test/v1", "m", transport=server.transport())
    perms = Permissions(config or Config(), mode=mode)  # type: ignore[arg-type]
    return Agent(
        client, workspace, settings=AgentSettings(**settings), permissions=perms, undo=undo
    )


async def run(agent: Agent, text: str, answers: list[bool] | None = None) -> list[Event]:
    """Drive one turn, answering approvals in order (the consumer-future path)."""
    answers = list(answers or [])
    events: list[Event] = []
    async for event in agent.run_turn(text):
        events.append(event)
        if isinstance(event, ApprovalRequested):
            event.respond(ApprovalDecision(approved=answers.pop(0), reason="not now"))
    return events


def of(events: list[Event], kind: type) -> list[Any]:
    return [e for e in events if isinstance(e, kind)]


async def test_plain_answer_counts_tokens_from_usage_not_frames(workspace: Path) -> None:
    server = ScriptedServer(
        [Reply(reasoning=["let me ", "think"], content=["Hello", " there"], tokens_per_frame=3)]
    )
    agent = make_agent(server, workspace)
    events = await run(agent, "hi")
    finished = of(events, TurnFinished)[-1]
    assert finished.reason == "stop" and finished.content == "Hello there"
    assert "".join(e.text for e in of(events, ContentDelta)) == "Hello there"
    reasoning = of(events, ReasoningDelta)
    assert [e.tokens_so_far for e in reasoning] == [3, 6]
    final = [u for u in of(events, UsageUpdate) if u.final][-1]
    assert final.completion_tokens == 12 and final.reasoning_tokens == 6
    body = server.requests[0]
    assert body["reasoning_effort"] == "low" and body["thinking_token_budget"] == 1536
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert agent.history[-1] == {"role": "assistant", "content": "Hello there"}


@pytest.mark.parametrize("unstreamed", [0, 38])
async def test_an_answer_with_no_text_and_no_call_is_explained(
    workspace: Path, unstreamed: int
) -> None:
    # vLLM's streaming tool parser swallows a call it cannot parse: the usage counts
    # the tokens, but nothing arrives. The user must be told, not shown nothing.
    server = ScriptedServer([Reply(unstreamed=unstreamed)])
    events = await run(make_agent(server, workspace), "write a note")
    notices = [n for n in of(events, Notice) if n.code == "empty_answer"]
    assert len(notices) == 1
    if unstreamed:
        assert f"generated {unstreamed} tokens" in notices[0].message
        assert "tool-call parser" in notices[0].message
    else:
        assert "empty answer" in notices[0].message
    assert of(events, TurnFinished)[-1].reason == "stop"


async def test_edit_with_missing_match_is_refused_with_actionable_message(workspace: Path) -> None:
    (workspace / "a.py").write_text("x = 1\nx = 1\n")
    args_missing = json.dumps({"path": "a.py", "old_string": "y = 2", "new_string": "y = 3"})
    args_ambiguous = json.dumps({"path": "a.py", "old_string": "x = 1", "new_string": "x = 2"})
    server = ScriptedServer(
        [
            Reply(tool_calls=[("edit_file", args_missing), ("edit_file", args_ambiguous)]),
            Reply(content=["ok"]),
        ]
    )
    agent = make_agent(server, workspace, mode="ask")
    events = await run(agent, "edit")
    results = of(events, ToolCallFinished)
    assert (
        "not found" in (results[0].error or "")
        and "copy old_string from it exactly" in results[0].result
    )
    assert "occurs 2 times" in (results[1].error or "") and "lines 1, 2" in results[1].result
    assert not of(events, ApprovalRequested)  # a call that cannot apply is not offered
    assert (workspace / "a.py").read_text() == "x = 1\nx = 1\n"
    tool_msgs = [m for m in server.requests[1]["messages"] if m["role"] == "tool"]
    assert "not found" in tool_msgs[0]["content"] and "occurs 2 times" in tool_msgs[1]["content"]


async def test_malformed_calls_become_errors_and_are_never_sent_back_raw(workspace: Path) -> None:
    server = ScriptedServer(
        [
            Reply(
                tool_calls=[
                    ("read_file", '{"path": "a.py"'),
                    ("no_such_tool", "{}"),
                    ("read_file", "{}"),
                    ("read_file", "[1]"),
                ]
            ),
            Reply(content=["sorry"]),
        ]
    )
    agent = make_agent(server, workspace)
    events = await run(agent, "go")
    errors = [e.error for e in of(events, ToolCallFinished)]
    assert errors[0] is not None and "not valid JSON" in errors[0]
    assert errors[1] is not None and "no tool named 'no_such_tool'" in errors[1]
    assert errors[2] is not None and "needs the argument(s) path" in errors[2]
    assert errors[3] is not None and "must be a JSON object" in errors[3]
    sent = assistant_messages(server.requests[1])[0]["tool_calls"]
    for call in sent:
        json.loads(call["function"]["arguments"])  # every one is valid JSON now
    assert sent[0]["function"]["arguments"] == "{}"
    assert of(events, TurnFinished)[-1].reason == "stop"


async def test_three_identical_calls_stop_the_loop_and_ask(workspace: Path) -> None:
    (workspace / "a.py").write_text("x\n")
    call = ("read_file", json.dumps({"path": "a.py"}))
    server = ScriptedServer([Reply(tool_calls=[call]) for _ in range(3)] + [Reply(content=["?"])])
    agent = make_agent(server, workspace)
    events = await run(agent, "loop", answers=[False])
    asks = of(events, ApprovalRequested)
    assert len(asks) == 1 and asks[0].kind == "loop" and "3 times" in asks[0].summary
    assert of(events, TurnFinished)[-1].reason == "loop"
    assert len(server.requests) == 3
    assert agent.history[-1]["role"] == "tool"  # the history stays valid


async def test_loop_nudge_tells_the_model_once_then_asks(workspace: Path) -> None:
    """``loop_nudge``: the turn's first loop is not run and its result says why, the turn
    goes on; a second loop in the same turn asks the user as before."""
    (workspace / "a.py").write_text("x\n")
    call = ("read_file", json.dumps({"path": "a.py"}))
    server = ScriptedServer([Reply(tool_calls=[call]) for _ in range(6)] + [Reply(content=["?"])])
    agent = make_agent(server, workspace, loop_nudge=True)
    events = await run(agent, "loop", answers=[False])
    finished = of(events, ToolCallFinished)
    assert [f.error is None for f in finished] == [True, True, False, True, True, False]
    assert finished[2].result == f"not run: {LOOP_NUDGE}"
    assert server.requests[3]["messages"][-1]["content"] == f"not run: {LOOP_NUDGE}"
    asks = of(events, ApprovalRequested)
    assert len(asks) == 1 and asks[0].kind == "loop"
    assert of(events, TurnFinished)[-1].reason == "loop"
    assert of(events, TurnFinished)[-1].loops == {"repeat": 2}


async def test_thinking_over_budget_is_cut_and_the_turn_continues_without_thinking(
    workspace: Path,
) -> None:
    server = ScriptedServer([Reply(until_closed=True), Reply(content=["answer"])])
    # "hmm hmm ..." is degenerate too: only the budget is under test here.
    agent = make_agent(
        server, workspace, thinking_token_budget=20, budget_margin=5, degenerate="off"
    )
    events = await run(agent, "think hard")
    exceeded = of(events, BudgetExceeded)
    assert len(exceeded) == 1 and exceeded[0].budget == 20 and exceeded[0].used == 26
    assert server.frames_sent < 40  # the client stopped reading the stream
    second = server.requests[1]
    assert second["reasoning_effort"] == "none" and "thinking_token_budget" not in second
    assert of(events, TurnFinished)[-1].content == "answer"
    assert max(e.tokens_so_far for e in of(events, ReasoningDelta)) == 26


async def test_rejected_thinking_budget_is_dropped_remembered_and_noticed(workspace: Path) -> None:
    error = {
        "error": {
            "message": "thinking_token_budget is set but reasoning_config is not configured",
            "type": "BadRequestError",
            "code": 400,
        }
    }
    server = ScriptedServer(
        [Reply(status=400, error_body=error), Reply(content=["a"]), Reply(content=["b"])]
    )
    agent = make_agent(server, workspace)
    events = await run(agent, "one")
    notices = of(events, Notice)
    assert any("thinking_token_budget" in n.message for n in notices)
    assert of(events, TurnFinished)[-1].content == "a"
    assert "thinking_token_budget" in server.requests[0]
    assert "thinking_token_budget" not in server.requests[1]
    await run(agent, "two")
    assert "thinking_token_budget" not in server.requests[2]
    assert server.requests[2]["reasoning_effort"] == "low"


async def test_denied_edit_is_not_applied_and_the_turn_stops(workspace: Path) -> None:
    args = json.dumps({"path": "new.txt", "content": "hello\n"})
    server = ScriptedServer(
        [Reply(tool_calls=[("write_file", args), ("bash", '{"command": "touch x"}')])]
    )
    agent = make_agent(server, workspace, mode="ask")
    events = await run(agent, "write", answers=[False])
    ask = of(events, ApprovalRequested)[0]
    assert ask.kind == "edit" and "+hello" in ask.detail and "create new.txt" == ask.summary
    assert not (workspace / "new.txt").exists() and not (workspace / "x").exists()
    assert of(events, TurnFinished)[-1].reason == "denied"
    tool_msgs = [m["content"] for m in agent.history if m["role"] == "tool"]
    assert "declined" in tool_msgs[0] and "not now" in tool_msgs[0]
    assert "not run" in tool_msgs[1]  # the second call is answered, not left dangling


async def test_approved_edit_through_approver_callback(workspace: Path) -> None:
    args = json.dumps({"path": "new.txt", "content": "hello\n"})
    server = ScriptedServer([Reply(tool_calls=[("write_file", args)]), Reply(content=["done"])])
    agent = make_agent(server, workspace, mode="ask")
    seen: list[ApprovalRequested] = []

    async def approver(req: ApprovalRequested) -> ApprovalDecision:
        seen.append(req)
        return ApprovalDecision(approved=True)

    agent.approver = approver
    events = [e async for e in agent.run_turn("write")]
    assert len(seen) == 1 and (workspace / "new.txt").read_text() == "hello\n"
    finished = of(events, ToolCallFinished)[0]
    assert finished.diff is not None and "+hello" in finished.diff


async def test_deny_rule_from_config_refuses_without_asking(workspace: Path) -> None:
    config = Config(deny=(PermissionRule.parse("bash:rm *"),))
    server = ScriptedServer(
        [Reply(tool_calls=[("bash", '{"command": "rm -rf src"}')]), Reply(content=["ok"])]
    )
    agent = make_agent(server, workspace, mode="full-auto", config=config)
    events = await run(agent, "clean")
    assert not of(events, ApprovalRequested)
    assert "denied by rule 'bash:rm *'" in (of(events, ToolCallFinished)[0].error or "")


async def test_engine_gone_mid_stream_keeps_history(workspace: Path) -> None:
    server = ScriptedServer(
        [Reply(content=["partial ", "answer ", "more"], die_after=2), Reply(content=["recovered"])]
    )
    agent = make_agent(server, workspace)
    events = await run(agent, "question")
    error = of(events, AgentError)[0]
    assert error.code == "engine_gone" and "lost mid-stream" in error.message
    assert of(events, TurnFinished)[-1].reason == "error"
    assert agent.history[1] == {"role": "user", "content": "question"}
    assert agent.history[2] == {"role": "assistant", "content": "partial answer "}
    events = await run(agent, "again")
    assert of(events, TurnFinished)[-1].content == "recovered"
    assert [m["role"] for m in server.requests[1]["messages"]] == [
        "system",
        "user",
        "assistant",
        "user",
    ]


async def test_unreachable_engine_is_a_clear_error(workspace: Path) -> None:
    import httpx

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused")

    client = ChatClient("http://engine.test/v1", "m", transport=httpx.MockTransport(refuse))
    agent = Agent(client, workspace)
    events = [e async for e in agent.run_turn("hi")]
    assert "cannot reach http://engine.test/v1" in of(events, AgentError)[0].message
    assert agent.history[-1] == {"role": "user", "content": "hi"}


async def test_undo_restores_workspace_without_touching_user_git(
    repo: Path, tmp_path: Path
) -> None:
    index_before = (repo / ".git" / "index").read_bytes()
    head_before = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True
    ).stdout
    edit = json.dumps({"path": "hello.py", "old_string": "'hi'", "new_string": "'hello'"})
    create = json.dumps({"path": "pkg/new.py", "content": "x = 1\n"})
    server = ScriptedServer(
        [Reply(tool_calls=[("edit_file", edit), ("write_file", create)]), Reply(content=["done"])]
    )
    undo = UndoStore(repo, tmp_path / "data")
    agent = make_agent(server, repo, undo=undo)
    events = await run(agent, "change")
    assert len(of(events, SnapshotTaken)) == 1
    assert "'hello'" in (repo / "hello.py").read_text() and (repo / "pkg/new.py").exists()
    applied = agent.undo()
    assert (repo / "hello.py").read_text() == "def greet():\n    return 'hi'\n"
    assert not (repo / "pkg").exists()
    assert set(applied.changed) == {"hello.py", "pkg/new.py"}
    assert (repo / ".git" / "index").read_bytes() == index_before
    assert (
        subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True
        ).stdout
        == head_before
    )
    assert (
        subprocess.run(["git", "stash", "list"], cwd=repo, capture_output=True, text=True).stdout
        == ""
    )


async def test_context_compaction_keeps_the_prompt_start_byte_stable(workspace: Path) -> None:
    from sparkcode.agent import ContextCompacted

    long = "word " * 300
    server = ScriptedServer(
        [
            Reply(content=[long], tokens_per_frame=300),
            Reply(content=["summary of it"]),
            Reply(content=["second answer"]),
        ]
    )
    agent = make_agent(server, workspace, context_limit=400)
    first_events = await run(agent, "first")
    assert not of(first_events, ContextCompacted)
    events = await run(agent, "second question")
    compacted = of(events, ContextCompacted)
    assert len(compacted) == 1 and compacted[0].messages_summarised == 2
    assert compacted[0].tokens_before > 320
    summariser = server.requests[1]
    assert "tools" not in summariser and "word word" in summariser["messages"][-1]["content"]
    final, first = server.requests[2], server.requests[0]
    assert json.dumps(final["messages"][0]) == json.dumps(first["messages"][0])
    assert json.dumps(final["tools"]) == json.dumps(first["tools"])
    assert [m["role"] for m in final["messages"]] == ["system", "user", "assistant", "user"]
    assert "summary of it" in final["messages"][1]["content"]
    assert final["messages"][-1] == {"role": "user", "content": "second question"}
    assert of(events, TurnFinished)[-1].content == "second answer"


async def test_metrics_deltas_become_events(workspace: Path) -> None:
    from sparkcode.agent import MetricsPoller, MetricsUpdate

    def scrape(accepted: int, drafts: int, hits: int, queries: int, kv: float) -> str:
        return (
            "# TYPE vllm:spec_decode_num_accepted_tokens counter\n"
            f'vllm:spec_decode_num_accepted_tokens_total{{model_name="m"}} {accepted}\n'
            "# TYPE vllm:spec_decode_num_drafts counter\n"
            f'vllm:spec_decode_num_drafts_total{{model_name="m"}} {drafts}\n'
            "# TYPE vllm:prefix_cache_hits counter\n"
            f'vllm:prefix_cache_hits_total{{model_name="m"}} {hits}\n'
            "# TYPE vllm:prefix_cache_queries counter\n"
            f'vllm:prefix_cache_queries_total{{model_name="m"}} {queries}\n'
            "# TYPE vllm:kv_cache_usage_perc gauge\n"
            f'vllm:kv_cache_usage_perc{{model_name="m"}} {kv}\n'
        )

    server = ScriptedServer(
        [Reply(content=["x"])],
        metrics=[scrape(10, 10, 0, 100, 0.1), scrape(40, 20, 300, 500, 0.25)],
    )
    agent = make_agent(server, workspace)
    agent.metrics = MetricsPoller(agent.client.fetch_metrics)
    events = await run(agent, "hi")
    update = of(events, MetricsUpdate)[-1]
    assert update.acceptance_length == pytest.approx(4.0)
    assert update.prefix_cache_hit_rate == pytest.approx(0.75)
    assert update.kv_cache_usage == pytest.approx(0.25)


async def test_subscribers_see_every_event_and_a_broken_one_does_not_break(workspace: Path) -> None:
    server = ScriptedServer([Reply(content=["a"])])
    agent = make_agent(server, workspace)
    seen: list[str] = []
    agent.subscribe(lambda e: seen.append(e.event_type))

    def broken(event: Event) -> None:
        raise RuntimeError("boom")

    agent.subscribe(broken)
    events = await run(agent, "hi")
    assert seen == [e.event_type for e in events]


async def test_cancel_stops_the_stream_and_keeps_partial_text(workspace: Path) -> None:
    server = ScriptedServer([Reply(content=["one ", "two ", "three"])])
    agent = make_agent(server, workspace)
    events: list[Event] = []
    async for event in agent.run_turn("count"):
        events.append(event)
        if isinstance(event, ContentDelta):
            agent.cancel()
    assert of(events, TurnFinished)[-1].reason == "cancelled"
    assert agent.history[-1] == {"role": "assistant", "content": "one "}


async def test_context_overflow_error_compacts_and_retries(workspace: Path) -> None:
    from sparkcode.agent import ContextCompacted

    overflow = {
        "error": {
            "message": "This model's maximum context length is 2048 tokens. "
            "However, you requested 2100 tokens."
        }
    }
    server = ScriptedServer(
        [
            Reply(content=["first answer"]),
            Reply(status=400, error_body=overflow),
            Reply(content=["the summary"]),
            Reply(content=["fits now"]),
        ]
    )
    agent = make_agent(server, workspace)  # no context limit known: no early compaction
    await run(agent, "one")
    events = await run(agent, "two")
    assert len(of(events, ContextCompacted)) == 1
    assert of(events, TurnFinished)[-1].content == "fits now"
    assert "the summary" in server.requests[-1]["messages"][1]["content"]


async def test_forced_tool_names_the_tool_with_a_narrower_schema_once(workspace: Path) -> None:
    schema = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "enum": ["a.txt"]},
            "content": {"type": "string", "maxLength": 8},
        },
        "required": ["path", "content"],
    }
    args = json.dumps({"path": "a.txt", "content": "hi"})
    server = ScriptedServer([Reply(tool_calls=[("write_file", args)]), Reply(content=["ok"])])
    agent = make_agent(server, workspace, force_tool="write_file", force_tool_parameters=schema)
    await run(agent, "write")
    first, second = server.requests
    assert first["tool_choice"] == {"type": "function", "function": {"name": "write_file"}}
    forced = [t for t in first["tools"] if t["function"]["name"] == "write_file"][0]
    assert forced["function"]["parameters"] == schema
    # Without strict, vLLM constrains only the call envelope, not the arguments.
    assert forced["function"]["strict"] is True
    assert [t for t in first["tools"] if t["function"].get("strict")] == [forced]
    assert second["tool_choice"] == "auto"
    assert second["tools"] == agent.tools.specs()
    assert (workspace / "a.txt").read_text() == "hi"


async def test_a_rule_refusal_is_the_tool_result_and_the_turn_goes_on(workspace: Path) -> None:
    # A program's policy (the agent bench's approver) refuses a call: unlike a person's
    # "no", the turn is not ended; the model reads the reason and tries another way.
    server = ScriptedServer(
        [
            Reply(tool_calls=[("bash", '{"command": "touch x", "sandbox": false}')]),
            Reply(tool_calls=[("bash", '{"command": "touch y"}')]),
            Reply(content=["done"]),
        ]
    )
    agent = make_agent(server, workspace, mode="ask")

    async def policy(request: ApprovalRequested) -> ApprovalDecision:
        if "touch x" in request.summary + request.detail:
            return ApprovalDecision(approved=False, by="rule", reason="only in the sandbox")
        return ApprovalDecision(approved=True)

    agent.approver = policy
    events = [e async for e in agent.run_turn("touch")]
    resolved = of(events, ApprovalResolved)
    assert [(r.approved, r.by) for r in resolved] == [(False, "rule"), (True, "user")]
    assert of(events, TurnFinished)[-1].reason == "stop" and len(server.requests) == 3
    tool_msgs = [m["content"] for m in agent.history if m["role"] == "tool"]
    assert tool_msgs[0].startswith("refused: only in the sandbox")
    assert not (workspace / "x").exists() and (workspace / "y").exists()
