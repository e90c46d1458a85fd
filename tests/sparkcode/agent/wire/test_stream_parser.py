"""The SSE parser reads any async byte iterator and knows nothing of the client;
replay parses recorded bodies with it directly, with no ChatClient."""

from __future__ import annotations

import ast
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from sparkcode.agent.wire._stream import StreamParser, peek_first_event
from sparkcode.agent.wire.client import EngineGone
from tests.support import ROOT
from tests.support.scripted import Reply, reply_frames


def imported_names(path: Path) -> set[str]:
    """Every ``module`` and ``module.name`` an import statement in ``path`` names
    (relative modules keep their dots)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            names |= {module, *(f"{module}.{alias.name}" for alias in node.names)}
    return names


async def reads(chunks: list[bytes]) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield chunk


def test_the_parser_imports_nothing_from_the_client() -> None:
    names = imported_names(ROOT / "sparkcode/agent/wire/_stream.py")
    assert not {n for n in names if n.startswith((".client", "sparkcode.agent.wire.client"))}


def test_replay_builds_no_client() -> None:
    for path in sorted((ROOT / "sparkcode/replay").glob("*.py")):
        names = imported_names(path)
        assert not {n for n in names if n.endswith((".ChatClient", ".ChatStream"))}, path


async def test_a_body_from_any_byte_iterator_parses_to_deltas_and_a_result() -> None:
    frames = reply_frames(
        Reply(
            reasoning=["hm"], content=["Hel", "lo"], tool_calls=[("read_file", '{"path": "a.py"}')]
        )
    )
    # One read cut mid-event: the parser joins reads itself.
    body = b"".join(frames)
    parser = StreamParser(source="a test body")
    deltas = [d async for d in parser.parse(reads([body[:37], body[37:]]))]
    assert "".join(d.content for d in deltas) == "Hello"
    assert "".join(d.reasoning for d in deltas) == "hm"
    result = parser.result()
    assert parser.done and not result.cut and result.finish_reason == "tool_calls"
    assert [(c.name, c.arguments) for c in result.tool_calls] == [("read_file", '{"path": "a.py"}')]
    assert parser.stats.completion_tokens == 5


async def test_a_body_cut_before_its_finish_names_its_source() -> None:
    frames = reply_frames(Reply(content=["a", "b", "c"]))
    parser = StreamParser(source="recorded request 3")
    with pytest.raises(EngineGone, match="recorded request 3 ended before"):
        async for _ in parser.parse(reads(frames[:2])):
            pass
    assert parser.content == "ab" and parser.result().cut


async def test_peeking_the_first_event_keeps_the_whole_body() -> None:
    error = b'data: {"error": {"message": "unknown field reasoning_effort"}}\n\n'
    found, rest = await peek_first_event(reads([error[:10], error[10:]]))
    assert found is not None and "reasoning_effort" in found
    assert b"".join([c async for c in rest]) == error
    frames = reply_frames(Reply(content=["ok"]))
    found, rest = await peek_first_event(reads(frames))
    parser = StreamParser(source="s")
    assert found is None and [d.content async for d in parser.parse(rest)][0] == "ok"
