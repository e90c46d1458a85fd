"""A :class:`~._transcript.Transcript` as Markdown (GitHub's flavour).

The model's answers are Markdown and stay so; everything else it or a tool
wrote (thinking, arguments, results, diffs) goes in a code fence longer than
any run of backticks inside it, so nothing in it can end the block or turn
into markup. Thinking is a collapsed ``<details>`` block, which GitHub renders
closed; a long tool result is collapsed the same way.
"""

from __future__ import annotations

import re
from html import escape

from ._transcript import (
    Note,
    Request,
    Step,
    ToolCall,
    Transcript,
    Turn,
    request_figures,
    turn_figures,
)

LONG_RESULT_LINES = 20
"""A tool result longer than this is collapsed."""


def fence(text: str, lang: str = "") -> str:
    """``text`` in a code fence no backtick run inside it can close."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{lang}\n{text.rstrip(chr(10))}\n{ticks}"


def _inline(text: str) -> str:
    """One line of plain text that Markdown shows as written."""
    flat = " ".join(text.split())
    return re.sub(r"([\\`*_\[\]<>|~])", r"\\\1", flat)


def _quote(text: str) -> str:
    return "\n".join(f"> {line}".rstrip() for line in text.splitlines() or [""])


def _details(summary: str, body: str) -> str:
    # The <summary> line is raw HTML to Markdown: escaped as HTML, not as Markdown.
    return f"<details>\n<summary>{escape(summary)}</summary>\n\n{body}\n\n</details>"


def _request(request: Request, level: int) -> list[str]:
    out = [f"{'#' * level} Assistant (request {request.number})", ""]
    figures = request_figures(request)
    if figures:
        out += [f"*{figures}*", ""]
    if request.thinking.strip():
        tokens = f" ({request.reasoning_tokens} tokens)" if request.reasoning_tokens else ""
        out += [_details(f"Thinking{tokens}", fence(request.thinking, "text")), ""]
    if request.answer.strip():
        out += [request.answer.strip(), ""]
    return out


def _call(call: ToolCall, level: int) -> list[str]:
    title = f"{'#' * level} Tool call: `{call.name}`"
    facts = [
        f"{call.duration_s:.2f} s" if call.duration_s is not None else "",
        call.approval or "",
        "" if call.result is not None else "no result recorded",
    ]
    out = [title, ""]
    shown = [f for f in facts if f]
    if shown:
        out += [f"*{_inline(' · '.join(shown))}*", ""]
    if call.arguments.strip():
        out += ["Arguments:", "", fence(call.arguments, "json"), ""]
    if call.diff:
        out += ["Diff:", "", fence(call.diff, "diff"), ""]
    label = "Result"
    if call.error and call.result is not None and call.error.strip() in call.result:
        label = "Error"  # the result is the error's text: shown once, in its block
    elif call.error:
        out += [f"**Error:** {_inline(call.error)}", ""]
    if call.result is not None:
        block = fence(call.result, "text")
        lines = call.result.count("\n") + 1
        out += [
            _details(f"{label} ({lines} lines)", block)
            if lines > LONG_RESULT_LINES
            else f"{label}:\n\n" + block,
            "",
        ]
    if call.nested:
        out += [f"*{call.name}'s own conversation:*", ""]
        out += _steps(call.nested, min(level + 1, 6))
    return out


def _steps(steps: list[Step], level: int) -> list[str]:
    out: list[str] = []
    for step in steps:
        if isinstance(step, Request):
            out += _request(step, level)
        elif isinstance(step, ToolCall):
            out += _call(step, level)
        elif isinstance(step, Note):
            out += [f"> **{step.kind}:** {_inline(step.text)}", ""]
    return out


def _turn(turn: Turn) -> list[str]:
    out = [f"## Turn {turn.number}" if turn.number else "## Before the first turn", ""]
    out += [f"*{turn_figures(turn)}*", ""]
    if turn.number:
        out += ["### User", "", _quote(turn.user_text), ""]
    if turn.images:
        out += ["Images attached:", ""] + [f"- {_inline(i)}" for i in turn.images] + [""]
    return out + _steps(turn.steps, 3)


def render_markdown(transcript: Transcript) -> str:
    out = [f"# Session {transcript.session_id}", "", "| | |", "|---|---|"]
    out += [f"| {label} | {_inline(value)} |" for label, value in transcript.meta]
    out.append("")
    if transcript.problems:
        out += ["Damaged lines left out:", ""]
        out += [f"- {_inline(p)}" for p in transcript.problems] + [""]
    if not transcript.turns:
        out += ["*The session has no turns.*", ""]
    for turn in transcript.turns:
        out += _turn(turn)
    return "\n".join(out).rstrip("\n") + "\n"
