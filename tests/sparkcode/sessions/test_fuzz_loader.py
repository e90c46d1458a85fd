"""Fuzzing (hypothesis): the session loader and the crash repair on damaged files."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.errors import UserError
from sparkcode.sessions import SessionFileError, load_session, quick_summary
from sparkcode.sessions._appendlog import repair

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

HEADER = {"kind": "header", "format": 1, "session_id": "abc", "t0_ns": 0, "workspace": "/w"}
RECORDS = [
    HEADER,
    {
        "kind": "request",
        "req": 0,
        "t_ns": 1,
        "method": "POST",
        "url": "http://x/v1/chat",
        "headers": [["a", "b"]],
        "body": '{"model": "m"}',
    },
    {"kind": "response", "req": 0, "t_ns": 2, "status": 200, "headers": []},
    {"kind": "chunk", "req": 0, "t_ns": 3, "data": 'data: {"choices": []}\n\n'},
    {"kind": "chunk", "req": 0, "t_ns": 4, "b64": "ZGF0YQ=="},
    {"kind": "end", "req": 0, "t_ns": 5, "usage": {"completion_tokens": 1}, "error": None},
    {"kind": "event", "t_ns": 6, "type": "TurnFinished", "data": {"reason": "stop"}},
]
VALID = b"".join(json.dumps(r).encode() + b"\n" for r in RECORDS)

EDITS = st.lists(
    st.tuples(st.integers(0, len(VALID)), st.integers(0, 12), st.binary(max_size=12)), max_size=8
)


def damaged(edits: list[tuple[int, int, bytes]], tail_zeros: int) -> bytes:
    data = VALID
    for at, cut, insert in edits:
        data = data[:at] + insert + data[at + cut :]
    return data + b"\x00" * tail_zeros


@FUZZ
@given(edits=EDITS, tail_zeros=st.integers(0, 3000))
def test_a_damaged_file_loads_or_is_refused_with_a_message(
    edits: list[tuple[int, int, bytes]], tail_zeros: int
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "s.jsonl"
        path.write_bytes(damaged(edits, tail_zeros))
        try:
            session = load_session(path)
        except SessionFileError as exc:
            assert "s.jsonl" in str(exc)
        else:
            for problem in session.problems:
                assert problem.line >= 1 and problem.message.strip()
        try:
            quick_summary(path)
        except UserError as exc:
            assert "s.jsonl" in str(exc)


@FUZZ
@given(edits=EDITS, tail_zeros=st.integers(0, 3000), cut=st.integers(0, len(VALID)))
def test_repair_always_leaves_plain_jsonl_lines_or_nothing(
    edits: list[tuple[int, int, bytes]], tail_zeros: int, cut: int
) -> None:
    """A killed writer's file: any prefix of the records, then zeros (the padding)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "s.jsonl"
        raw = damaged(edits, 0)[:cut] + b"\x00" * tail_zeros
        path.write_bytes(raw)
        repair(path)
        if not path.exists():
            assert raw.rstrip(b"\x00").rfind(b"\n") < 0  # nothing whole was there
            return
        data = path.read_bytes()
        assert not data.endswith(b"\x00") and (data == b"" or data.endswith(b"\n"))
        # Only the cut tail and the padding go; every whole line stays as it was.
        kept = raw.rstrip(b"\x00")
        assert kept.startswith(data) or data == kept + b"\n"
