"""The sparkcode terminal UI (Textual)."""

from __future__ import annotations

from .app import SparkcodeApp, TuiSettings

__all__ = ["SparkcodeApp", "TuiSettings"]
