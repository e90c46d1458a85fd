"""The read-only rule against a corpus of disguised writes and executions.

Every corpus command must ask in ``ask`` mode (and be refused in plan mode);
the ones marked with an effect are also run for real, unsandboxed, in a temp
workspace, to prove they do write or run something; the common safe forms
must still run without approval.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from sparkcode.agent.core.permissions import Permissions
from sparkcode.agent.tools import BwrapStatus, check_read_only, default_tools
from sparkcode.config import Config

BASH = default_tools().get("bash")
NO_BWRAP = BwrapStatus(None, "not needed here")

# (command, effect): the effect, when given, is a file the command creates
# when really run (OUT is a directory outside the workspace).
DISGUISED: list[tuple[str, str | None]] = [
    # programs run through a listed command's options or arguments
    ("env touch ../out/env", "out/env"),
    ("find . -maxdepth 0 -exec touch ../out/find-exec \\;", "out/find-exec"),
    ("find . -maxdepth 0 -execdir touch ../out/find-execdir {} +", "out/find-execdir"),
    ("find . -maxdepth 0 -ok touch ../out/x \\;", None),
    ("sed '1e touch ../out/sed-e' a.txt", "out/sed-e"),
    ("sed 's/.*/touch ..\\/out\\/sed-s-e/e' a.txt", "out/sed-s-e"),
    ("awk 'BEGIN { system(\"touch ../out/awk-system\") }'", "out/awk-system"),
    ("awk '{ print | \"cat > ../out/awk-pipe\" }' a.txt", "out/awk-pipe"),
    ("awk 'BEGIN { \"touch ../out/awk-getline\" | getline }'", "out/awk-getline"),
    ("sort --compress-program=gzip a.txt", None),
    ("sort --compress=gzip a.txt", None),
    ("rg --pre ./evil.sh foo .", None),
    ("git -c core.pager='touch ../out/git-c' log", None),
    ("git --exec-path=. status", None),
    ("LD_PRELOAD=./evil.so ls", None),
    ("GIT_EXTERNAL_DIFF=./evil.sh git diff", None),
    ("./ls", None),
    ("/tmp/evil/cat a.txt", None),
    ("xargs touch < a.txt", None),
    ("file -C -m magic", None),
    ("awk -f prog.awk a.txt", None),
    ("sed -f script.sed a.txt", None),
    # files written through options or arguments
    ("sort -o ../out/sort-o a.txt", "out/sort-o"),
    ("sort --outp=../out/sort-abbrev a.txt", "out/sort-abbrev"),
    ("sort -ro../out/sort-cluster a.txt", "out/sort-cluster"),
    ("sort -T ../out a.txt", None),
    ("uniq a.txt ../out/uniq", "out/uniq"),
    ("sed -n 'w ../out/sed-w' a.txt", "out/sed-w"),
    ("sed 's/a/b/w ../out/sed-s-w' a.txt", "out/sed-s-w"),
    ("sed -i s/alpha/beta/ a.txt", None),
    ("sed -ni p a.txt", None),
    ("sed --in-place=.bak s/a/b/ a.txt", None),
    ("awk '{ print > \"../out/awk-print\" }' a.txt", "out/awk-print"),
    ("find . -maxdepth 0 -fprint ../out/find-fprint", "out/find-fprint"),
    ("find . -maxdepth 0 -fls ../out/find-fls", "out/find-fls"),
    ("find . -name '*.tmp' -delete", None),
    ("git log --output=../out/git-log", "out/git-log"),
    ("git diff --output=../out/git-diff HEAD", "out/git-diff"),
    ("git log --outp=../out/x", None),
    ("git show --output ../out/git-show", "out/git-show"),
    ("git branch topic", "ws/.git/refs/heads/topic"),
    ("git branch -D main", None),
    ("git describe --dirty", None),
    ("tree -o ../out/tree", None),
    ("tree -R -H . .", None),
    ("date -s 2030-01-01", None),
    ("date 010100002030", None),
    ("echo x > ../out/redirect", "out/redirect"),
    ("echo x >> ../out/append", "out/append"),
    ("ls | tee ../out/tee", "out/tee"),
    ("ls; touch ../out/semicolon", "out/semicolon"),
    ("ls && touch ../out/and", "out/and"),
    ("false || touch ../out/or", "out/or"),
    ("ls & touch ../out/background", "out/background"),
    ("echo $(touch ../out/subst)", "out/subst"),
    ("echo `touch ../out/backquote`", "out/backquote"),
    ('echo "$(touch ../out/dq-subst)"', "out/dq-subst"),
    ("cat <(touch ../out/procsubst)", "out/procsubst"),
    ("ls\ntouch ../out/newline", "out/newline"),
    ("ls {a.txt,../out}", None),
    ("printf -v x y", None),
    # reads outside the workspace
    ("cat /etc/passwd", None),
    ("cat ../secret.txt", None),
    ("head ~/.bashrc", None),
    ("ls ..", None),
    ("grep -r root /etc", None),
    ("grep -f ../secret.txt a.txt", None),
    ("grep -e x ../secret.txt", None),
    ("cat link-out", None),
    ("cat *", None),
    ("grep -R secret .", None),
    ("find -L . -name secret.txt", None),
    ("find / -name shadow", None),
    ("du --files0-from=../list", None),
    ("wc --files0=../list", None),
    ("git diff --no-index ../secret.txt a.txt", None),
    ("diff . ../out", None),
    ("diff -r linkdir a.txt", None),
    ("tail -n1 $HOME/.profile", None),
    ("stat ~", None),
    ("ls -R -L .", None),
    ("awk '{ print ENVIRON[\"HOME\"] }' a.txt", None),
]


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A workspace (a git repository) next to an outside directory and secret."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (tmp_path / "out").mkdir()
    (tmp_path / "secret.txt").write_text("secret\n")
    (tmp_path / "list").write_text("../secret.txt\0")
    (ws / "a.txt").write_text("alpha\nbeta\n")
    (ws / "b.txt").write_text("alpha\ngamma\n")
    (ws / "src").mkdir()
    (ws / "src" / "m.py").write_text("def f():\n    return 1  # TODO\n")
    (ws / "link-out").symlink_to(tmp_path / "secret.txt")
    (ws / "linkdir").symlink_to(tmp_path)
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@e",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@e",
    }
    for args in (
        ["init", "-q", "-b", "main"],
        ["add", "a.txt", "b.txt", "src"],
        ["commit", "-q", "-m", "one"],
    ):
        subprocess.run(["git", *args], cwd=ws, check=True, env=env, capture_output=True)
    (ws / "a.txt").write_text("alpha\nbeta\ndelta\n")
    return ws


def test_the_corpus_is_large_enough() -> None:
    assert len(DISGUISED) >= 30
    assert len({c for c, _ in DISGUISED}) == len(DISGUISED)


@pytest.mark.parametrize(("command", "effect"), DISGUISED, ids=[c for c, _ in DISGUISED])
def test_every_disguised_command_asks(command: str, effect: str | None, tree: Path) -> None:
    assert BASH is not None
    reason = check_read_only(command, tree)
    assert reason, f"{command!r} was classified read-only"
    ask = Permissions(Config(), mode="ask", bwrap=NO_BWRAP)
    assert ask.decide(BASH, {"command": command}, tree).verdict == "ask"
    plan = Permissions(Config(), mode="plan", bwrap=NO_BWRAP)
    assert plan.decide(BASH, {"command": command}, tree).verdict == "deny"


def test_the_disguised_commands_really_write_or_run(tree: Path) -> None:
    """The corpus is not hypothetical: each command with an effect does it."""
    for command, effect in DISGUISED:
        if effect is None:
            continue
        target = tree.parent / effect
        assert not target.exists()
        subprocess.run(["bash", "-c", command], cwd=tree, capture_output=True, timeout=20)
        assert target.exists(), f"{command!r} did not create {effect}"


SAFE = [
    "ls",
    "ls -la",
    "ls -la src",
    "cat a.txt",
    "cat src/m.py | head -n 5",
    "head -20 a.txt",
    "tail -n 3 a.txt",
    "wc -l a.txt src/*.py",
    "grep -rn TODO .",
    "grep -n 'def ' src/*.py",
    "grep -e alpha -e beta a.txt",
    "grep -rn alpha . 2>/dev/null | head",
    "rg -n alpha src",
    "find . -name '*.py' -type f",
    "find src -maxdepth 1",
    "sed -n '1,20p' a.txt",
    "sed 's/alpha/beta/g' a.txt",
    "sed -n '/alpha/p' a.txt",
    "sed -e 's/a/b/' -e '2q' a.txt",
    "awk '{print $1}' a.txt",
    "awk -F: '{print $2}' a.txt",
    "awk 'NR < 3' a.txt",
    "sort a.txt | uniq -c | sort -rn",
    "cut -d, -f1 a.txt",
    "diff a.txt b.txt",
    "git status",
    "git status --short",
    "git diff",
    "git diff HEAD -- src",
    "git log --oneline -5",
    "git --no-pager log -3",
    "git show HEAD:a.txt",
    "git branch",
    "git branch -a",
    "git branch --list 'ma*'",
    "git blame a.txt",
    "git ls-files",
    "git rev-parse HEAD",
    "git describe --always",
    "git log -p -1 -- a.txt",
    "pwd",
    "echo hello",
    "date +%Y-%m-%d",
    "which python3",
    "basename src/m.py",
    "du -sh .",
    "stat a.txt",
    "file a.txt",
    "cat a.txt | tr a-z A-Z",
    "nl a.txt",
    "realpath a.txt",
    "ls 2>/dev/null",
    "cat a.txt > /dev/null",
    "grep -c alpha a.txt b.txt || true",
    "head -n 5 a.txt && wc -c a.txt",
]


@pytest.mark.parametrize("command", SAFE)
def test_common_safe_forms_still_run_without_approval(command: str, tree: Path) -> None:
    assert BASH is not None
    assert check_read_only(command, tree) is None
    ask = Permissions(Config(), mode="ask", bwrap=NO_BWRAP)
    assert ask.decide(BASH, {"command": command}, tree).verdict == "allow"


def test_reasons_name_the_problem(tree: Path) -> None:
    assert check_read_only("sort -o x a.txt", tree) == "sort -o writes its output to a file"
    assert check_read_only("sed 's/a/b/w f' a.txt", tree) == "sed: the s flag 'w' writes a file"
    why = check_read_only("cat link-out", tree)
    assert why is not None and "outside the workspace" in why and "secret.txt" in why
    assert check_read_only("env ls", tree) == "'env' is not on the read-only list"
