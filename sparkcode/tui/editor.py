"""Ctrl+G: the prompt's text in the user's own editor (``$VISUAL``, else ``$EDITOR``).

The text goes to a temporary file, the editor runs on it (the app suspended while it
does), and what the file holds after it exits becomes the prompt. An editor that exits
non-zero, or a file gone or unreadable afterwards, leaves the prompt as it was: the
:class:`Edited` says why, naming the editor. Neither variable set: no guess (``vi``
is not on every machine, and an unexpected modal editor traps people); the notice
says how to set one.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from textual.app import App, SuspendNotSupported

from .widgets.prompt import PromptInput

NO_EDITOR = (
    "no editor to open: set $VISUAL or $EDITOR (for example "
    "export EDITOR=nano) and press Ctrl+G again"
)


@dataclass(frozen=True)
class Edited:
    """How an edit ended: ``text`` is the new prompt, or None with ``problem``."""

    text: str | None
    problem: str | None = None


def editor_command(env: Mapping[str, str] | None = None) -> list[str] | None:
    """``$VISUAL`` or ``$EDITOR`` split like a shell would (``code --wait``); None when
    neither is set (or both are blank). ``ValueError`` for one that cannot be split."""
    env = os.environ if env is None else env
    for name in ("VISUAL", "EDITOR"):
        value = env.get(name, "").strip()
        if value:
            try:
                return shlex.split(value)
            except ValueError as exc:
                raise ValueError(
                    f"${name} ({value!r}) cannot be read as a command: {exc}"
                ) from None
    return None


def edit_text(text: str, command: list[str], *, cwd: Path | None = None) -> Edited:
    """Run ``command`` on a temporary file holding ``text`` and read it back.

    The one line break an editor adds at the end is dropped; the file is removed
    afterwards. Blocks until the editor exits (the caller suspends the app)."""
    shown = shlex.join(command)
    fd, name = tempfile.mkstemp(prefix="sparkcode-prompt-", suffix=".md")
    path = Path(name)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        try:
            done = subprocess.run([*command, str(path)], cwd=cwd, check=False)
        except OSError as exc:
            return Edited(
                None,
                f"the editor {shown} could not start: "
                f"{exc.strerror or exc}; the prompt is unchanged",
            )
        if done.returncode != 0:
            return Edited(
                None,
                f"the editor {shown} exited with code {done.returncode}; the prompt is unchanged",
            )
        try:
            edited = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return Edited(
                None, f"the editor {shown} removed the file it was given; the prompt is unchanged"
            )
        except (OSError, UnicodeDecodeError) as exc:
            return Edited(
                None,
                f"the file the editor {shown} left cannot be read ({exc}); the prompt is unchanged",
            )
    finally:
        path.unlink(missing_ok=True)
    if edited.endswith("\n") and not text.endswith("\n"):
        edited = edited[:-1]
    return Edited(edited)


def edit_prompt(app: App[object], prompt: PromptInput, cwd: Path) -> str | None:
    """Ctrl+G: the prompt's message (pastes whole) in the user's editor with the app
    suspended; the edited text becomes the prompt, the cursor at its end. Returns
    what went wrong (the prompt untouched), None when the prompt holds the edit.

    Headless (tests under Pilot) there is no terminal to hand over, so the editor
    runs without suspending; a real terminal that cannot suspend is refused."""
    try:
        command = editor_command()
    except ValueError as exc:
        return str(exc)
    if command is None:
        return NO_EDITOR
    text = prompt.message
    try:
        with app.suspend():
            edited = edit_text(text, command, cwd=cwd)
    except SuspendNotSupported:
        if not app.is_headless:
            return (
                "this terminal cannot hand the screen to an editor (the app cannot "
                "suspend here); the prompt is unchanged"
            )
        edited = edit_text(text, command, cwd=cwd)
    if edited.text is None:
        return edited.problem
    prompt.value = edited.text
    prompt.focus()
    return None
