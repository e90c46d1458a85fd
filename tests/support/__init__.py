"""Helpers shared by the test packages (not tests themselves)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
"""The repository root."""
