"""Human-readable sizes, for the engine's reports and the CLI alike."""

from __future__ import annotations


def human_bytes(n: float, digits: int = 1) -> str:
    """``n`` bytes in binary units: ``512 B``, ``1.5 KiB``, ... up to TiB."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.{digits}f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")
