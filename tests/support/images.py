"""Small real image files for the image-attachment tests (made with Pillow, which
vLLM already needs)."""

from __future__ import annotations

import io
from pathlib import Path

from PIL import Image


def image_bytes(
    fmt: str = "PNG", size: tuple[int, int] = (64, 48), color: tuple[int, int, int] = (200, 30, 30)
) -> bytes:
    """A solid-colour image in ``fmt`` (PNG, JPEG, WEBP), decodable by any reader."""
    out = io.BytesIO()
    Image.new("RGB", size, color).save(out, format=fmt)
    return out.getvalue()


def write_image(path: Path, fmt: str = "PNG", size: tuple[int, int] = (64, 48)) -> bytes:
    data = image_bytes(fmt, size)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return data
