"""The degeneration detector, as replay uses it: on a whole turn's output."""

from __future__ import annotations

from typing import Any

from sparkcode.sessions import TurnOutput


def verdict_json(verdict: Any) -> dict[str, Any]:
    """A detector verdict as plain JSON (whatever fields the verdict carries)."""
    import dataclasses

    if dataclasses.is_dataclass(verdict) and not isinstance(verdict, type):
        data = dataclasses.asdict(verdict)
    elif hasattr(verdict, "to_json"):
        data = dict(verdict.to_json())
    else:
        data = {k: v for k, v in vars(verdict).items() if not k.startswith("_")}
    return {k: v for k, v in data.items() if isinstance(v, str | int | float | bool | None)}


def detector_verdict(output: TurnOutput) -> dict[str, Any] | None:
    """The detector's verdict when it fires on the turn (answer or thinking), else None."""
    try:
        from sparkcode.detect import detect_text
    except ImportError:  # the detector is optional at import time of replay
        return None
    for channel in ("content", "reasoning"):
        text = output.text(channel)
        if not text:
            continue
        verdict = detect_text(text)
        if getattr(verdict, "degenerate", False):
            data = verdict_json(verdict)
            data["channel"] = channel
            return data
    return None
