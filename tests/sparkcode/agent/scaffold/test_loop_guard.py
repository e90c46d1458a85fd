"""The loop guard: repeats, cycles of period 2 and 3, and failing calls retried with
nearly the same arguments; asked like the identical-call guard, counted in run --json."""

from __future__ import annotations

import io
import json
from pathlib import Path

from sparkcode.agent.scaffold.loop_guard import Call, LoopGuard, similar
from sparkcode.cli._run import EXIT_STOPPED, RunRequest, run_headless
from sparkcode.start import SessionOptions
from tests.support.http_server import serve, url
from tests.support.scripted import Reply


def edit(old: str) -> Call:
    return Call("edit_file", json.dumps({"path": "a.py", "old_string": old, "new_string": "y"}))


def read(path: str) -> Call:
    return Call("read_file", json.dumps({"path": path}))


def asked(guard: LoopGuard, calls: list[Call], failed: bool = False) -> list[int]:
    """Indices of the calls the guard asked about."""
    out = []
    for i, call in enumerate(calls):
        if guard.check(call) is not None:
            out.append(i)
        guard.failed(failed)
    return out


def test_repeats_and_cycles_of_two_and_three() -> None:
    a, b, c = read("src/main.py"), read("README.md"), Call("list_files", "{}")
    assert asked(LoopGuard(), [a, a, a]) == [2]
    guard = LoopGuard()
    assert asked(guard, [a, b, a, b, a]) == [4] and guard.counts == {"cycle": 1}
    guard = LoopGuard()
    assert asked(guard, [a, b, c, a, b, c, a]) == [6] and guard.counts == {"cycle": 1}
    # Progress is not a cycle: a third call breaks it, and so does a new argument.
    assert asked(LoopGuard(), [a, b, a, c, a, b, a, c]) == []
    assert asked(LoopGuard(), [a, b, a, b, read("src/util.py"), b]) == []
    # Told to go on, the guard watches afresh.
    guard = LoopGuard()
    assert asked(guard, [a, b, a, b, a]) == [4]
    guard.forgive()
    assert asked(guard, [b, a, b, a]) == []


def test_failing_calls_retried_with_nearly_the_same_arguments() -> None:
    tries = [edit("x = 1"), edit("x = 2"), edit("x =  1"), edit("x = 3")]
    guard = LoopGuard()
    assert asked(guard, tries, failed=True) == [3] and guard.counts == {"failing": 1}
    # The same retries succeeding are work, not a loop.
    assert asked(LoopGuard(), tries, failed=False) == []
    # Different edits failing are not "nearly the same".
    other = [
        edit("def main():\n    run()"),
        edit("class Config:"),
        edit("import os"),
        edit("return value"),
    ]
    assert asked(LoopGuard(), other, failed=True) == []
    assert similar('{"command": "pytest -x t.py"}', '{"command": "pytest -q t.py"}')
    assert not similar('{"path": "README.md"}', '{"path": "docs/agent.md"}')


async def test_run_json_reports_the_cycle_and_stops(workspace: Path) -> None:
    a = ("read_file", json.dumps({"path": "README.md"}))
    b = ("list_files", json.dumps({"pattern": "*.md"}))
    replies = [Reply(tool_calls=[call]) for call in (a, b, a, b, a)] + [Reply(content=["x"])]
    out, err = io.StringIO(), io.StringIO()
    with serve(replies) as server:
        code = await run_headless(
            RunRequest(
                prompt="look",
                workspace=workspace,
                as_json=True,
                endpoint=url(server),
                session=SessionOptions(record=False),
            ),
            out=out,
            err=err,
        )
    events = [json.loads(line) for line in out.getvalue().splitlines()]
    assert code == EXIT_STOPPED, err.getvalue()
    ask = [e for e in events if e["type"] == "ApprovalRequested"]
    assert len(ask) == 1 and ask[0]["kind"] == "loop" and "cycle" in ask[0]["summary"]
    assert events[-1]["type"] == "TurnFinished" and events[-1]["reason"] == "loop"
    assert events[-1]["loops"] == {"cycle": 1}
    assert len(server.requests) == 5
