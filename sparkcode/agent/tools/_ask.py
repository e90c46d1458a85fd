"""``ask_user``: the model asks the person a question and gets the answer as the result.

The tool checks the arguments and hands the question to :attr:`ToolContext.asker`
(:mod:`sparkcode.agent.core.asking`, supplied by the front); a declined question, and
a front with nobody to ask, are results that tell the model to go on by itself.
"""

from __future__ import annotations

from typing import Any

from ..core.asking import DECIDE, Question
from ._base import Tool, ToolContext, ToolError, ToolOutput

ASK_TOOL = "ask_user"
MAX_OPTIONS = 8
MAX_OPTION_CHARS = 200
MAX_QUESTION_CHARS = 2000
DECLINED = (
    "the user declined to answer; do not ask again: decide yourself, state the "
    "assumption you make, and go on"
)


class AskUser(Tool):
    """``ask_user(question, options?)``: the person's answer, typed or picked."""

    def __init__(self) -> None:
        super().__init__(
            name=ASK_TOOL,
            description="Ask the user one question when you cannot go on without their "
            "decision (which of two ways they want, a missing name or value). "
            "Do not ask what you can find out with the other tools. Give "
            "options when the answer is one of a few choices; the user may "
            "also type their own answer.",
            parameters={
                "question": {"type": "string", "description": "The question, complete and short."},
                "options": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": f"Up to {MAX_OPTIONS} answers to pick from (optional).",
                },
            },
            kind="state",
            required=("question",),
        )

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        question = args.get("question")
        if not isinstance(question, str) or not question.strip():
            raise ToolError("question must be a non-empty string: what to ask the user")
        if len(question) > MAX_QUESTION_CHARS:
            raise ToolError(
                f"question has {len(question)} characters; ask in at most {MAX_QUESTION_CHARS}"
            )
        options = _options(args.get("options"))
        if ctx.asker is None:
            raise ToolError(f"ask_user is not available: nobody can be asked here; {DECIDE}")
        answer = await ctx.asker(Question(question.strip(), options, ctx.call_id))
        if answer.kind == "unavailable":
            raise ToolError(f"ask_user is not available: {answer.text}; {answer.then}")
        if answer.kind == "declined" or not answer.text.strip():
            return ToolOutput(DECLINED)
        text = answer.text.strip()
        if text in options:
            return ToolOutput(f"the user picked option {options.index(text) + 1}: {text}")
        return ToolOutput(f"the user answered: {text}")


def _options(raw: object) -> tuple[str, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(o, str) and o.strip() for o in raw):
        raise ToolError(
            "options must be a list of non-empty strings (or left out for a typed answer)"
        )
    if len(raw) > MAX_OPTIONS:
        raise ToolError(f"options has {len(raw)} entries; give at most {MAX_OPTIONS}")
    long = [o for o in raw if len(o) > MAX_OPTION_CHARS]
    if long:
        raise ToolError(
            f"an option has {len(long[0])} characters; keep each under {MAX_OPTION_CHARS}"
        )
    out = tuple(dict.fromkeys(o.strip() for o in raw))  # in order, once each
    return out


__all__ = ["ASK_TOOL", "DECLINED", "AskUser"]
