"""A :class:`~._transcript.Transcript` as one self-contained HTML page.

Everything from the session is escaped: the model's answers and the user's
messages go through markdown-it with raw HTML off (an HTML tag in them shows
as text, and links keep only safe schemes); thinking, arguments, results and
diffs are escaped into ``<pre>``. A ``<script>`` in a tool result is shown,
never run. Thinking and long results are collapsed ``<details>`` blocks. The
page loads nothing (no scripts, no remote styles).
"""

from __future__ import annotations

from html import escape

from markdown_it import MarkdownIt

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

_MD = MarkdownIt("commonmark", {"html": False}).enable(["table", "strikethrough"])

STYLE = """
body { font-family: system-ui, sans-serif; max-width: 60rem; margin: 2rem auto;
       padding: 0 1rem; line-height: 1.45; color: #1d1d1f; }
pre { background: #f4f4f6; padding: .6rem; overflow-x: auto; white-space: pre-wrap; }
.figures { color: #666; font-size: .9em; }
.user { border-left: 4px solid #3b82f6; padding-left: .8rem; }
.call { border: 1px solid #ddd; border-radius: 6px; padding: .2rem .8rem; margin: .6rem 0; }
.note { color: #8a4b00; }
.add { color: #116329; } .del { color: #a40e26; }
table.meta td { padding: 0 .8rem 0 0; }
"""


def _e(text: str) -> str:
    return escape(text, quote=True)


def _markdown(text: str) -> str:
    return str(_MD.render(text))


def _pre(text: str, cls: str = "") -> str:
    attr = f' class="{cls}"' if cls else ""
    return f"<pre{attr}>{_e(text.rstrip(chr(10)))}</pre>"


def _diff(text: str) -> str:
    lines = []
    for line in text.rstrip("\n").split("\n"):
        cls = (
            "add"
            if line.startswith("+") and not line.startswith("+++")
            else "del"
            if line.startswith("-") and not line.startswith("---")
            else ""
        )
        lines.append(f'<span class="{cls}">{_e(line)}</span>' if cls else _e(line))
    return '<pre class="diff">' + "\n".join(lines) + "</pre>"


def _details(summary: str, body: str) -> str:
    return f"<details><summary>{_e(summary)}</summary>{body}</details>"


def _request(request: Request, level: int) -> list[str]:
    out = [f"<h{level}>Assistant (request {request.number})</h{level}>"]
    figures = request_figures(request)
    if figures:
        out.append(f'<p class="figures">{_e(figures)}</p>')
    if request.thinking.strip():
        tokens = f" ({request.reasoning_tokens} tokens)" if request.reasoning_tokens else ""
        out.append(_details(f"Thinking{tokens}", _pre(request.thinking, "thinking")))
    if request.answer.strip():
        out.append(f'<div class="answer">{_markdown(request.answer)}</div>')
    return out


def _call(call: ToolCall, level: int) -> list[str]:
    out = ['<div class="call">', f"<h{level}>Tool call: <code>{_e(call.name)}</code></h{level}>"]
    facts = [
        f"{call.duration_s:.2f} s" if call.duration_s is not None else "",
        call.approval or "",
        "" if call.result is not None else "no result recorded",
    ]
    shown = " · ".join(f for f in facts if f)
    if shown:
        out.append(f'<p class="figures">{_e(shown)}</p>')
    if call.arguments.strip():
        out += ["<p>Arguments:</p>", _pre(call.arguments, "arguments")]
    if call.diff:
        out += ["<p>Diff:</p>", _diff(call.diff)]
    label = "Result"
    if call.error and call.result is not None and call.error.strip() in call.result:
        label = "Error"  # the result is the error's text: shown once, in its block
    elif call.error:
        out.append(f'<p class="note"><strong>Error:</strong> {_e(call.error)}</p>')
    if call.result is not None:
        lines = call.result.count("\n") + 1
        block = _pre(call.result, "result")
        out.append(
            _details(f"{label} ({lines} lines)", block)
            if lines > LONG_RESULT_LINES
            else f"<p>{label}:</p>" + block
        )
    if call.nested:
        out.append(f"<p><em>{_e(call.name)}'s own conversation:</em></p>")
        out += _steps(call.nested, min(level + 1, 6))
    return out + ["</div>"]


def _steps(steps: list[Step], level: int) -> list[str]:
    out: list[str] = []
    for step in steps:
        if isinstance(step, Request):
            out += _request(step, level)
        elif isinstance(step, ToolCall):
            out += _call(step, level)
        elif isinstance(step, Note):
            out.append(f'<p class="note"><strong>{_e(step.kind)}:</strong> {_e(step.text)}</p>')
    return out


def _turn(turn: Turn) -> list[str]:
    title = f"Turn {turn.number}" if turn.number else "Before the first turn"
    out = [
        f'<section class="turn"><h2>{title}</h2>',
        f'<p class="figures">{_e(turn_figures(turn))}</p>',
    ]
    if turn.number:
        out += ["<h3>User</h3>", f'<div class="user">{_markdown(turn.user_text)}</div>']
    if turn.images:
        out.append(
            "<p>Images attached:</p><ul>"
            + "".join(f"<li>{_e(i)}</li>" for i in turn.images)
            + "</ul>"
        )
    return out + _steps(turn.steps, 3) + ["</section>"]


def render_html(transcript: Transcript) -> str:
    title = _e(f"Session {transcript.session_id}")
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{title}</title><style>{STYLE}</style></head><body>",
        f"<h1>{title}</h1>",
        '<table class="meta">',
    ]
    out += [f"<tr><td>{_e(k)}</td><td>{_e(v)}</td></tr>" for k, v in transcript.meta]
    out.append("</table>")
    if transcript.problems:
        out.append(
            "<p>Damaged lines left out:</p><ul>"
            + "".join(f"<li>{_e(p)}</li>" for p in transcript.problems)
            + "</ul>"
        )
    if not transcript.turns:
        out.append("<p><em>The session has no turns.</em></p>")
    for turn in transcript.turns:
        out += _turn(turn)
    out.append("</body></html>")
    return "\n".join(out) + "\n"
