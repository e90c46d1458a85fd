"""Worktree sessions' git side (sparkcode/worktree.py) on real repositories."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from engine.errors import UserError
from sparkcode.worktree import Worktree, find_worktree, open_worktree, same_repository


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout


def test_a_new_worktree_is_a_branch_from_head_inside_the_git_directory(repo: Path) -> None:
    (repo / "hello.py").write_text("changed, not committed\n")  # a dirty tree
    tree = open_worktree(repo, "fix")
    assert tree.created and tree.branch == "sparkcode/fix" and tree.name == "fix"
    assert tree.path == (repo / ".git" / "sparkcode" / "worktrees" / "fix").resolve()
    assert tree.workspace == tree.path and tree.repo == repo.resolve()
    assert git(tree.path, "rev-parse", "--abbrev-ref", "HEAD").strip() == "sparkcode/fix"
    assert tree.base == git(repo, "rev-parse", "HEAD").strip()
    # It starts from HEAD: the uncommitted change stays in the main tree, and says so.
    assert (tree.path / "hello.py").read_text() == "def greet():\n    return 'hi'\n"
    assert any("starts from HEAD: the 1 uncommitted change" in n for n in tree.notes)
    # The main tree does not see it as untracked files.
    assert git(repo, "status", "--porcelain").strip() == "M hello.py"


def test_a_subdirectory_start_works_in_the_same_subdirectory(repo: Path) -> None:
    (repo / "src").mkdir()
    (repo / "src" / "m.py").write_text("x = 1\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "src")
    tree = open_worktree(repo / "src")
    assert tree.workspace == tree.path / "src"
    assert tree.branch.startswith("sparkcode/") and len(tree.name) > 10  # a generated name


def test_the_same_name_reopens_it_and_the_workspace_is_found_as_one(repo: Path) -> None:
    first = open_worktree(repo, "fix")
    (first.path / "new.txt").write_text("kept\n")
    again = open_worktree(repo, "fix")
    assert not again.created and again.path == first.path
    assert (again.path / "new.txt").read_text() == "kept\n"
    assert any("reopened the worktree" in n for n in again.notes)
    found = find_worktree(first.path)
    assert found is not None and found.branch == "sparkcode/fix" and found.repo == first.repo
    assert find_worktree(repo) is None
    assert same_repository(repo, first.path)


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("a..b", "git refuses sparkcode/a..b"),
        ("x.lock", "git refuses sparkcode/x.lock"),
        ("has space", "letters, digits"),
        ("a/b", "letters, digits"),
        ("-x", "letters, digits"),
    ],
)
def test_a_bad_name_is_refused_before_anything_is_made(repo: Path, name: str, why: str) -> None:
    with pytest.raises(UserError, match=why):
        open_worktree(repo, name)
    assert "sparkcode" not in git(repo, "branch", "--list")
    assert len(git(repo, "worktree", "list").splitlines()) == 1


def test_not_a_repository_or_no_commit_is_refused_naming_the_directory(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(UserError, match=f"{plain} is not in the working tree"):
        open_worktree(plain, "x")
    git(plain, "init", "-q")
    with pytest.raises(UserError, match="has no commit yet"):
        open_worktree(plain, "x")
    with pytest.raises(UserError, match="is not a directory"):
        open_worktree(tmp_path / "missing", "x")


def test_collisions_are_refused_with_what_to_do(repo: Path) -> None:
    git(repo, "branch", "sparkcode/taken")
    with pytest.raises(UserError, match="branch sparkcode/taken exists but no worktree"):
        open_worktree(repo, "taken")
    (repo / ".git" / "sparkcode" / "worktrees" / "stray").mkdir(parents=True)
    with pytest.raises(UserError, match="exists and is not a worktree"):
        open_worktree(repo, "stray")
    other = repo.parent / "other-tree"
    git(repo, "worktree", "add", "-q", "-b", "sparkcode/elsewhere", str(other))
    with pytest.raises(UserError, match=f"checked out in {other}"):
        open_worktree(repo, "elsewhere")
    made = open_worktree(repo, "gone")
    subprocess.run(["rm", "-rf", str(made.path)], check=True)
    with pytest.raises(UserError, match="worktree prune"):
        open_worktree(repo, "gone")


def test_exit_advice_names_the_branch_and_path_and_its_commands_work(repo: Path) -> None:
    tree = open_worktree(repo, "feature")
    (tree.path / "feature.txt").write_text("new\n")
    advice = tree.exit_advice()
    assert "uncommitted changes" in advice and "worktree remove --force" in advice
    git(tree.path, "add", "-A")
    git(tree.path, "-c", "user.name=T", "-c", "user.email=t@e", "commit", "-q", "-m", "f")
    advice = tree.exit_advice()
    assert "1 commits not in" in advice and "--force" not in advice
    lines = {
        line.split(":", 1)[0].strip(): line.split(":", 1)[1].strip()
        for line in advice.splitlines()[1:]
    }
    assert lines["merge it"] == f"git -C {tree.repo} merge sparkcode/feature"
    subprocess.run(lines["merge it"], shell=True, check=True, capture_output=True)
    assert (repo / "feature.txt").read_text() == "new\n"
    subprocess.run(lines["remove it"], shell=True, check=True, capture_output=True)
    assert not tree.path.exists() and "sparkcode" not in git(repo, "branch", "--list")


def test_discard_removes_only_a_worktree_this_start_made(repo: Path) -> None:
    made = open_worktree(repo, "tmp")
    Worktree(made.repo, made.path, made.branch, made.base, made.workspace).discard()
    assert made.path.is_dir()  # not created by that start: kept
    made.discard()
    assert not made.path.exists() and "sparkcode/tmp" not in git(repo, "branch", "--list")
