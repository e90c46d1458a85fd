"""sparkcode: a local coding agent and engine supervisor for one DGX Spark."""

from __future__ import annotations

__version__ = "0.1.0"
