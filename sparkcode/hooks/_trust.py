"""Which projects the user trusts to run their own hooks, remembered per path.

A project's hooks (``.sparkcode/hooks.toml``, ``.claude/settings.json``) are
commands from whoever wrote the repository; a freshly cloned repository must
not run them just because sparkcode was started in it. So they run only once
the user said yes for that project: asked once (the TUI's ``/trust``, a
question at ``sparkcode run`` on a terminal, or ``run --trust-project``),
remembered in ``<state dir>/trusted-projects.json`` keyed by the project's
resolved path. A file that cannot be read is an empty list (nothing trusted).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

FILE_NAME = "trusted-projects.json"


class TrustStore:
    """The remembered answers (one JSON object: path -> when it was trusted)."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / FILE_NAME

    def _read(self) -> dict[str, float]:
        try:
            doc = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        if not isinstance(doc, dict):
            return {}
        return {k: float(v) for k, v in doc.items() if isinstance(v, int | float)}

    def is_trusted(self, project: Path) -> bool:
        return str(project.resolve()) in self._read()

    def trust(self, project: Path) -> None:
        """Remember ``project`` as trusted (written atomically)."""
        doc = self._read()
        doc[str(project.resolve())] = time.time()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        tmp.replace(self.path)


__all__ = ["FILE_NAME", "TrustStore"]
