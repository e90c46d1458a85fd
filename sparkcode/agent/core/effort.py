"""Where a request says its reasoning effort, so that changing it keeps the prompt prefix.

vLLM hands a request's ``reasoning_effort`` to the chat template as a variable and
sets ``enable_thinking`` to ``effort != "none"`` (``ChatCompletionRequest.
build_chat_params``). What the template does with them decides whether a change
mid-conversation breaks the prefix the engine has cached:

* most templates (Qwen2.5, Qwen3, the tiny test models) render the effort nowhere,
  and thinking on/off only in the generation prompt: sending the effort in every
  request is free (placement ``request``);
* GLM-5.x renders ``<|system|>Reasoning Effort: Low|High|Max`` right after
  ``[gMASK]<sop>``, before the tools and the history (``shared/notes/glm53-flash.md``
  §9), so one ``/effort`` changes token 3 and the whole conversation is prefilled
  again (a public report: 0% of ~26k tokens cached). Placement ``glm`` keeps the
  request's ``reasoning_effort`` at the conversation's first value (:attr:`Agent.
  effort_pinned <.loop.Agent.effort_pinned>`), says a change as a system message
  with the template's own words after the history, and turns thinking off with
  ``chat_template_kwargs.enable_thinking`` instead of effort ``none`` (which GLM
  would render as ``Max`` at the top).

The note is part of the history, so later requests, a resumed session (its bodies
hold it) and undo (it belongs to the turn it precedes) see the same effort; the
effort in effect is read back from the history, never kept beside it.
docs/agent.md, "Prefix stability", has the audit of every setting.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, get_args

from engine.profiles import EffortPlacement

from .context import Message


@dataclass(frozen=True)
class Placement:
    """How one chat-template family takes the effort."""

    pinned: bool
    """The template renders the effort before the history: the request's value stays
    the conversation's first and a change is a note after the history."""
    lines: Mapping[str, str] = field(default_factory=dict)
    """Effort -> the words the template renders for it (pinned placements)."""
    other: str = ""
    """The words for an effort not in :attr:`lines`."""

    def line(self, effort: str) -> str:
        return self.lines.get(effort, self.other)


PLACEMENTS: dict[str, Placement] = {
    "request": Placement(pinned=False),
    # GLM-5.3-Flash honours low and high only; anything else (none, medium, max,
    # unset) renders as Max (shared/notes/glm53-flash.md §9).
    "glm": Placement(
        pinned=True,
        lines={"low": "Reasoning Effort: Low", "high": "Reasoning Effort: High"},
        other="Reasoning Effort: Max",
    ),
}
"""The one table of placements; the knob's values (``engine.profiles.EffortPlacement``)
are its keys (a test holds them equal)."""


def placement(name: str) -> Placement:
    """The placement a knob value names (``request`` for a value not known)."""
    return PLACEMENTS.get(name, PLACEMENTS["request"])


def placement_names() -> tuple[str, ...]:
    """The knob's values, from its type."""
    return get_args(EffortPlacement)


def effort_in_effect(history: list[Message], place: Placement, pinned: str) -> str:
    """The words of the effort the history says last: its newest effort note, else
    what the template renders for ``pinned``."""
    notes = set(place.lines.values()) | {place.other}
    for msg in reversed(history[1:]):
        if msg.get("role") == "system" and msg.get("content") in notes:
            return str(msg["content"])
    return place.line(pinned)


def effort_note(
    history: list[Message], place: Placement, pinned: str | None, wanted: str
) -> Message | None:
    """The system message that changes the effort to ``wanted``, or None when the
    history already says it (or the placement needs none)."""
    if not place.pinned or pinned is None:
        return None
    line = place.line(wanted)
    if effort_in_effect(history, place, pinned) == line:
        return None
    return {"role": "system", "content": line}


def effort_params(
    place: Placement, pinned: str | None, wanted: str, *, thinking_closed: bool
) -> dict[str, Any]:
    """The request fields that say the effort and whether the model thinks."""
    if not place.pinned:
        return {"reasoning_effort": "none" if thinking_closed else wanted}
    return {
        "reasoning_effort": pinned if pinned is not None else wanted,
        "chat_template_kwargs": {"enable_thinking": not thinking_closed and wanted != "none"},
    }


__all__ = [
    "PLACEMENTS",
    "Placement",
    "effort_in_effect",
    "effort_note",
    "effort_params",
    "placement",
    "placement_names",
]
