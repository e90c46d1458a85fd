"""Every agent task is solvable and its check can fail: on the untouched workspace
(and the answer a model gives when it did nothing) the check fails; with the
reference solution shipped in the task file it passes. The checks run the
workspace's tests for real, in the same sandbox as the agent's shell tool."""

from __future__ import annotations

import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.errors import UserError
from sparkcode.agent.tools._sandbox import Sandbox, find_bwrap
from sparkcode.bench._agent_tasks import (
    KINDS,
    apply_solution,
    check,
    load_tasks,
    make_workspace,
    select,
    workspace_diff,
)

TASKS = load_tasks()


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox | None]:
    path = find_bwrap().path
    box = Sandbox(path) if path else None
    yield box
    if box is not None:
        box.cleanup()


def test_the_suite_has_three_tasks_of_each_kind() -> None:
    assert len(TASKS) >= 24
    counts = Counter(t.kind for t in TASKS.values())
    assert set(counts) == set(KINDS) and min(counts.values()) >= 3
    # Table order: by kind, then by name.
    assert [t.kind for t in TASKS.values()] == sorted(
        (t.kind for t in TASKS.values()), key=KINDS.index
    )


@pytest.mark.parametrize("task_id", list(TASKS))
def test_check_fails_untouched_and_passes_the_reference(
    task_id: str, tmp_path: Path, sandbox: Sandbox | None
) -> None:
    task = TASKS[task_id]
    ws = make_workspace(task, tmp_path / "ws")
    log = subprocess.run(
        ["git", "log", "--format=%s"], cwd=ws, capture_output=True, text=True, check=True
    ).stdout
    assert log.strip() == f"task {task_id}: starting files"
    assert not subprocess.run(
        ["git", "status", "--porcelain"], cwd=ws, capture_output=True, text=True, check=True
    ).stdout
    # What a try that does nothing leaves: the starting files and an echo of the prompt.
    assert check(task, ws, task.prompt, sandbox), "the check passes a try that did nothing"
    answer = apply_solution(task, ws)
    assert check(task, ws, answer, sandbox) == []
    if task.kind not in ("answer", "run-tests"):
        assert workspace_diff(ws).startswith("diff --git")


def test_a_broken_solution_is_named_precisely(tmp_path: Path, sandbox: Sandbox | None) -> None:
    task = TASKS["fix-test-mean"]
    ws = make_workspace(task, tmp_path / "ws")
    (ws / "test_stats.py").write_text("import unittest\n")  # "fixed" by deleting the tests
    failed = check(task, ws, "Done.", sandbox)
    assert "test_stats.py was changed (it must stay as committed)" in failed
    assert "0 tests ran, at least 2 expected" in failed
    task = TASKS["rename-module"]
    ws = make_workspace(task, tmp_path / "ws2")
    (ws / "textutil.py").write_text("x = 1\n")
    failed = check(task, ws, "Done.", sandbox)
    assert "helpers.py still exists" in failed
    assert "textutil.py lacks 'def title_case'" in failed
    assert "'helpers' is still in main.py" in failed


def test_selection_and_bad_names() -> None:
    assert select(None, None) == list(TASKS)
    assert select(["answer-value"], ["create"]) == [
        "answer-value",
        "create-hello",
        "create-json",
        "create-module",
    ]
    with pytest.raises(UserError, match="unknown agent task.*nope; the tasks are: answer-"):
        select(["nope"], None)
    with pytest.raises(UserError, match="unknown task kind.*fix; the kinds are: answer, "):
        select(None, ["fix"])
