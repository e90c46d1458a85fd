"""Images waiting for the next message: ``/image PATH``, ``@shot.png`` in the prompt,
and a pasted path of an image file.

Each way reads the file through the agent (:meth:`AgentPort.load_image`), so the
checks are the agent's: vision declared by the profile, PNG/JPEG/WebP by the
bytes, the size cap. A refusal is shown as an error and changes nothing else:
the prompt keeps what was typed, the images attached before stay attached.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol
from urllib.parse import unquote, urlsplit

from sparkcode.agent.core.images import ImageAttachment, is_image_name, sniff

from .agent_port import AgentPort


class _ErrorShower(Protocol):
    async def add_error(self, text: str) -> object: ...


class Surface(Protocol):
    """What attaching needs of the screen: the agent (it reads and checks the
    image), a notice and an error line. A protocol, not the screen's class, so this
    module stays out of the screen's import circle."""

    @property
    def conversation(self) -> _ErrorShower: ...

    async def ensure_agent(self) -> AgentPort: ...

    async def say(self, text: str) -> None: ...


MENTION = re.compile(r"(?:^|(?<=\s))@(\S+)")
"""An ``@path`` mention (the completion's syntax): ``@`` at the start of a word."""
_QUOTED = re.compile(r"""^(['"])(.*)\1$""")


def image_mentions(text: str) -> list[str]:
    """The ``@path`` mentions of ``text`` naming an image file (.png .jpg .jpeg .webp)."""
    return [m.group(1) for m in MENTION.finditer(text) if is_image_name(m.group(1))]


def pasted_image(text: str, workspace: Path) -> Path | None:
    """The image file a paste names, if the paste is exactly one path of an existing
    file that has an image name or image bytes; else None (it is pasted as text).

    Terminals paste a dropped file as its path, quoted, with backslash-escaped
    spaces, or as a ``file://`` URL: all three are read."""
    candidate = text.strip()
    if not candidate or "\n" in candidate or len(candidate) > 4096:
        return None
    quoted = _QUOTED.match(candidate)
    if quoted:
        candidate = quoted.group(2)
    elif candidate.startswith("file://"):
        candidate = unquote(urlsplit(candidate).path)
    else:
        candidate = candidate.replace("\\ ", " ")
    path = Path(candidate).expanduser()
    path = path if path.is_absolute() else workspace / path
    try:
        if not path.is_file():
            return None
        if is_image_name(path.name):
            return path
        with path.open("rb") as f:
            return path if sniff(f.read(64)) is not None else None
    except OSError:
        return None


class Attachments:
    """The images attached so far, sent with the next user message."""

    def __init__(self) -> None:
        self.pending: list[ImageAttachment] = []

    async def attach(self, screen: Surface, path: Path, name: str) -> bool:
        """Read ``path`` through the agent and keep it; a refusal is shown."""
        try:
            agent = await screen.ensure_agent()
            image = agent.load_image(path, name)
        except Exception as exc:  # noqa: BLE001 - every refusal is shown, none is fatal
            await screen.conversation.add_error(str(exc) or type(exc).__name__)
            return False
        self.pending.append(image)
        await screen.say(
            f"image attached: {image.describe()}; it goes with your next message ({self.summary()})"
        )
        return True

    async def take(self, screen: Surface, text: str) -> tuple[ImageAttachment, ...] | None:
        """The attached images plus the ``@`` mentioned ones of ``text``, all read; None
        after a refusal (shown; the attached ones stay attached)."""
        mentioned = image_mentions(text)
        found: list[ImageAttachment] = list(self.pending)
        try:
            if mentioned:
                agent = await screen.ensure_agent()
                found += [agent.load_image(Path(m), f"@{m}") for m in mentioned]
        except Exception as exc:  # noqa: BLE001 - every refusal is shown, none is fatal
            await screen.conversation.add_error(
                f"{exc or type(exc).__name__}; nothing was sent, your message stays in the prompt"
            )
            return None
        self.pending.clear()
        return tuple(found)

    def summary(self) -> str:
        count = len(self.pending)
        return (
            f"{count} image{'s' if count != 1 else ''} waiting; /image clear drops "
            f"{'them' if count != 1 else 'it'}"
        )

    def clear(self) -> int:
        count = len(self.pending)
        self.pending.clear()
        return count


def image_lines(images: Sequence[ImageAttachment]) -> list[str]:
    """The transcript's lines for the images a message carries."""
    return [f"image: {image.describe()}" for image in images]
