"""Small formatting helpers shared by CLI commands."""

from __future__ import annotations

from engine.units import human_bytes

__all__ = ["human_bytes", "human_duration"]


def human_duration(seconds: float) -> str:
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"
