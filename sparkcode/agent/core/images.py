"""Images attached to a user message: read, checked, and sent as OpenAI content parts.

An attachment is read whole when it is attached (a file changed or deleted later
does not change what is sent), its type is told by its first bytes (PNG, JPEG,
WebP; the extension is never trusted), and its width and height are read from the
header bytes only (no image library). The user message then carries
``[{"type": "text", ...}, {"type": "image_url", "image_url": {"url": "data:..."}}]``.

Every refusal is an :class:`ImageError` (a :class:`~engine.errors.UserError`)
naming the file and the problem, raised before anything is sent or cleared.
"""

from __future__ import annotations

import base64
import hashlib
import math
import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.errors import UserError

DEFAULT_MAX_MIB = 5.0
"""The default size cap per image (``config.toml`` ``[agent] image_max_mib``): a
4K screenshot as PNG is 1-4 MiB, so 5 MiB takes any screenshot; a bigger file is
a photo worth downscaling first. The image is re-sent with every request of the
conversation, base64 adds a third (5 MiB -> 6.7 MiB per request), and the
recording keeps it once."""
IMAGE_SUFFIXES: tuple[str, ...] = (".png", ".jpg", ".jpeg", ".webp")
"""Names an ``@path`` or a pasted path attaches instead of mentioning (the type
itself is still judged by the bytes)."""
MIME_NAMES: dict[str, str] = {"image/png": "PNG", "image/jpeg": "JPEG", "image/webp": "WebP"}
PIXELS_PER_TOKEN = 28 * 28
"""Vision towers of the Qwen2-VL / GLM-4V family cut 14x14-pixel patches and
merge 2x2 of them into one token: one token per 28x28 pixels."""
IMAGE_TOKENS_MIN, IMAGE_TOKENS_MAX = 64, 16384
"""The estimate's clamp: vLLM's processors resize into 4 to 16384 merged patches
(Qwen2-VL's ``max_pixels`` 12845056 = 16384 x 784); 64 is a thumbnail's floor."""
IMAGE_TOKENS_UNKNOWN = 1024
"""The estimate when the header gives no size (a 896x896 image)."""
DATA_URL = re.compile(r"data:(image/(?:png|jpeg|webp));base64,([A-Za-z0-9+/]*={0,2})")
"""An image data URL as it appears in a message or a JSON request body."""


class ImageError(UserError):
    """An image that cannot be attached; the message names the file and why."""


@dataclass(frozen=True)
class ImageAttachment:
    """One image, read and checked, ready to go with the next user message."""

    name: str
    """How the user named it (shown in the transcript)."""
    mime: str
    data: bytes
    width: int | None = None
    height: int | None = None

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    @property
    def data_url(self) -> str:
        return f"data:{self.mime};base64,{base64.b64encode(self.data).decode('ascii')}"

    def part(self) -> dict[str, Any]:
        """The OpenAI ``image_url`` content part."""
        return {"type": "image_url", "image_url": {"url": self.data_url}}

    def describe(self) -> str:
        """``shot.png (PNG, 1280x800, 211.4 KiB)``: the transcript's line."""
        size = f", {self.width}x{self.height}" if self.width and self.height else ""
        return f"{self.name} ({MIME_NAMES[self.mime]}{size}, {_size(len(self.data))})"


def sniff(data: bytes) -> tuple[str, int | None, int | None] | None:
    """(MIME type, width, height) from the first bytes; None when not PNG/JPEG/WebP.

    Width and height are None when the header is cut or unusual."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        if len(data) >= 24 and data[12:16] == b"IHDR":
            w, h = struct.unpack(">II", data[16:24])
            return "image/png", w, h
        return "image/png", None, None
    if data.startswith(b"\xff\xd8\xff"):
        return ("image/jpeg", *_jpeg_size(data))
    if len(data) >= 12 and data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return ("image/webp", *_webp_size(data))
    return None


def _jpeg_size(data: bytes) -> tuple[int | None, int | None]:
    """Walk the segments to the first start-of-frame marker (it holds the size)."""
    i = 2
    while i + 9 < len(data):
        if data[i] != 0xFF:
            return None, None
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            h, w = struct.unpack(">HH", data[i + 5 : i + 9])
            return w, h
        if marker in (0x01, *range(0xD0, 0xD8)):  # markers without a length
            i += 2
            continue
        i += 2 + struct.unpack(">H", data[i + 2 : i + 4])[0]
    return None, None


def _webp_size(data: bytes) -> tuple[int | None, int | None]:
    chunk = data[12:16]
    if chunk == b"VP8X" and len(data) >= 30:
        w = int.from_bytes(data[24:27], "little") + 1
        h = int.from_bytes(data[27:30], "little") + 1
        return w, h
    if chunk == b"VP8L" and len(data) >= 25:
        bits = int.from_bytes(data[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8 " and len(data) >= 30:
        w, h = struct.unpack("<HH", data[26:30])
        return w & 0x3FFF, h & 0x3FFF
    return None, None


def load_image(path: Path, *, max_bytes: int, name: str | None = None) -> ImageAttachment:
    """Read and check ``path``; :class:`ImageError` says what is wrong with it."""
    shown = name or str(path)
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise ImageError(f"cannot attach {shown}: no such file") from None
    except OSError as exc:
        raise ImageError(f"cannot attach {shown}: {exc.strerror}") from None
    if path.is_dir():
        raise ImageError(f"cannot attach {shown}: it is a directory, not an image file")
    if size > max_bytes:
        raise ImageError(
            f"cannot attach {shown}: it is {_size(size)}, over the "
            f"{_size(max_bytes)} cap per image (config.toml [agent] "
            "image_max_mib); downscale it or raise the cap"
        )
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ImageError(f"cannot attach {shown}: cannot read it ({exc.strerror})") from None
    return image_from_bytes(data, shown, max_bytes=max_bytes)


def image_from_bytes(data: bytes, name: str, *, max_bytes: int) -> ImageAttachment:
    """Check bytes already read (the size again: the file may have grown)."""
    if len(data) > max_bytes:
        raise ImageError(
            f"cannot attach {name}: it is {_size(len(data))}, over the "
            f"{_size(max_bytes)} cap per image"
        )
    found = sniff(data)
    if found is None:
        start = data[:8].hex(" ") if data else "nothing (the file is empty)"
        raise ImageError(
            f"cannot attach {name}: it is not a PNG, JPEG or WebP image (it starts with {start})"
        )
    mime, width, height = found
    return ImageAttachment(name=name, mime=mime, data=data, width=width, height=height)


def refuse_text_only(model: str) -> ImageError:
    """The error for a model whose profile does not declare vision."""
    return ImageError(
        f"model {model} is text-only here: its profile does not declare vision "
        "([model] vision = true; --vision for an --endpoint), so images "
        "cannot be sent to it"
    )


def user_content(text: str, images: Sequence[ImageAttachment]) -> str | list[dict[str, Any]]:
    """A user message's ``content``: the text alone, or a text part and image parts."""
    if not images:
        return text
    return [{"type": "text", "text": text}, *(image.part() for image in images)]


def is_image_name(text: str) -> bool:
    return text.lower().endswith(IMAGE_SUFFIXES)


def content_text(content: Any) -> str:
    """A message's text for summaries and transcripts: list content as its text
    parts, each image as ``[image: PNG 1280x800]``."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return "" if content is None else str(content)
    pieces: list[str] = []
    for part in content:
        if not isinstance(part, dict):
            continue
        if part.get("type") == "text":
            pieces.append(str(part.get("text", "")))
        elif part.get("type") == "image_url":
            pieces.append(f"[image: {url_label(_part_url(part))}]")
    return "\n".join(pieces)


def image_urls(content: Any) -> list[str]:
    """The image data URLs in a message's content."""
    if not isinstance(content, list):
        return []
    return [_part_url(p) for p in content if isinstance(p, dict) and p.get("type") == "image_url"]


def _part_url(part: dict[str, Any]) -> str:
    inner = part.get("image_url")
    return str(inner.get("url", "")) if isinstance(inner, dict) else str(inner or "")


def _header(url: str) -> tuple[str, int | None, int | None] | None:
    """Sniff a data URL from its first base64 characters only (4 KiB of bytes is
    enough for PNG and WebP headers and most JPEG ones)."""
    match = DATA_URL.match(url[:5600])
    if match is None:
        return None
    b64 = match.group(2)
    b64 = b64[: len(b64) - len(b64) % 4]
    try:
        return sniff(base64.b64decode(b64))
    except ValueError:
        return None


def url_label(url: str) -> str:
    found = _header(url)
    if found is None:
        return "image"
    mime, w, h = found
    return f"{MIME_NAMES[mime]} {w}x{h}" if w and h else MIME_NAMES[mime]


def image_tokens(url: str) -> int:
    """An estimate of the prompt tokens one image costs: one per 28x28 pixels,
    clamped to [64, 16384]; 1024 when the size is unknown. It is an estimate: the
    engine's processor decides (and says so in the response's usage)."""
    found = _header(url)
    if found is None or not found[1] or not found[2]:
        return IMAGE_TOKENS_UNKNOWN
    _, w, h = found
    assert w is not None and h is not None
    tokens = math.ceil(w * h / PIXELS_PER_TOKEN)
    return max(IMAGE_TOKENS_MIN, min(tokens, IMAGE_TOKENS_MAX))


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    if n < 1024 * 1024:
        return f"{n / 1024:.1f} KiB"
    return f"{n / 1024 / 1024:.1f} MiB"
