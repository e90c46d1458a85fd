"""The read-only rule's path check: every path must resolve inside the workspace.

Symlinks are followed, globs expanded as bash would, ``~`` as the home directory.
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass, field
from pathlib import Path

from ._words import NotReadOnly, Word


@dataclass
class Checker:
    """Checks the words of one command against the workspace."""

    workspace: Path
    root: Path = field(init=False)

    def __post_init__(self) -> None:
        self.root = self.workspace.resolve()

    def path(
        self, text: str, *, what: str = "path", tilde: bool = False, globbed: bool = False
    ) -> None:
        """``text`` (a path argument) must resolve inside the workspace."""
        if text in ("", "-"):
            return
        tilde = tilde or text.startswith("~")
        candidates = [text]
        if globbed:
            pattern = text if os.path.isabs(text) or tilde else str(self.root / text)
            if tilde:
                pattern = os.path.expanduser(pattern)
            matches = glob.glob(pattern)
            candidates = matches or [text]
        for cand in candidates:
            p = Path(os.path.expanduser(cand) if tilde else cand)
            if not p.is_absolute():
                p = self.root / p
            try:
                resolved = p.resolve()
            except (OSError, RuntimeError):
                raise NotReadOnly(f"the {what} {text!r} cannot be resolved") from None
            if resolved != self.root and not resolved.is_relative_to(self.root):
                raise NotReadOnly(
                    f"the {what} {text!r} resolves to {resolved}, outside the workspace"
                )

    def word_path(self, word: Word, what: str = "path") -> None:
        self.path(word.text, what=what, tilde=word.tilde, globbed=word.glob)
