"""Image bytes of recorded requests, kept once per image next to the session file.

Every request of a conversation re-sends its whole history, so an image attached
at turn 1 is in the body of every later request: 10 requests with a 2 MiB
screenshot would put 27 MiB of base64 into the session file. Instead each image
data URL's base64 payload is cut out of the recorded body and its decoded bytes
are stored once in ``<session id>.blobs/<sha256>``; the request record lists
where each payload was cut (``"blobs": [[offset, sha256], ...]``, byte offsets
into the recorded body, in order). Loading puts the base64 text back at those
offsets, so the body is byte for byte what was sent (replay stays exact).

A payload whose base64 is not canonical (re-encoding its bytes would not give
the same text) is left in the body: exactness wins over size.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
from pathlib import Path
from typing import Any

BLOBS_SUFFIX = ".blobs"
_PAYLOAD = re.compile(rb"data:image/(?:png|jpeg|webp);base64,([A-Za-z0-9+/]*={0,2})")
_MARK = b"data:image/"
"""A cheap test before the regular expression: most bodies carry no image."""


class BlobError(ValueError):
    """A recorded body refers to an image the blob directory does not hold intact."""


def blobs_dir(session_file: Path) -> Path:
    """``<id>.jsonl`` -> ``<id>.blobs``."""
    return session_file.with_suffix(BLOBS_SUFFIX)


class BlobStore:
    """Content-addressed image bytes of one session (files created 0600, like the
    session file: screenshots show code)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._stored: set[str] = set()

    def put(self, data: bytes) -> str:
        """Store ``data`` unless it is there already; returns its sha256 (hex)."""
        digest = hashlib.sha256(data).hexdigest()
        if digest in self._stored:
            return digest
        path = self.directory / digest
        if not path.exists():
            self.directory.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            tmp.replace(path)  # whole or absent, never half a file
        self._stored.add(digest)
        return digest


def cut_images(body: bytes, store: BlobStore) -> tuple[bytes, list[list[Any]]]:
    """``body`` without its image payloads, and ``[[offset, sha256], ...]``.

    OSError from the store propagates (the caller then records the body whole)."""
    if _MARK not in body:
        return body, []
    out = bytearray()
    refs: list[list[Any]] = []
    last = 0
    for match in _PAYLOAD.finditer(body):
        payload = match.group(1)
        try:
            raw = base64.b64decode(payload, validate=True)
        except ValueError:
            continue
        if not raw or base64.b64encode(raw) != payload:
            continue  # not canonical: kept inline so the body stays exact
        out += body[last : match.start(1)]
        refs.append([len(out), store.put(raw)])
        last = match.end(1)
    if not refs:
        return body, []
    out += body[last:]
    return bytes(out), refs


def restore_images(body: bytes, refs: Any, directory: Path) -> bytes:
    """Put the payloads listed in ``refs`` back into ``body`` (see the module doc)."""
    if not isinstance(refs, list):
        raise BlobError("'blobs' must be a list of [offset, sha256] pairs")
    pieces: list[bytes] = []
    last = 0
    for ref in refs:
        if not (
            isinstance(ref, list)
            and len(ref) == 2
            and isinstance(ref[0], int)
            and isinstance(ref[1], str)
            and last <= ref[0] <= len(body)
        ):
            raise BlobError(f"bad blob reference {ref!r}")
        offset, digest = ref
        path = directory / digest
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise BlobError(
                f"image {digest[:12]} of this request is missing from "
                f"{directory} ({exc.strerror}); the body keeps an empty "
                "image"
            ) from None
        if hashlib.sha256(raw).hexdigest() != digest:
            raise BlobError(
                f"image file {path} does not match its sha256 (changed after "
                "recording); the body keeps an empty image"
            )
        pieces += [body[last:offset], base64.b64encode(raw)]
        last = offset
    pieces.append(body[last:])
    return b"".join(pieces)


def copy_blobs(session_file: Path, copy: Path) -> int:
    """Give a copy of a session file its images (``sessions export``); how many."""
    source = blobs_dir(session_file)
    if not source.is_dir():
        return 0
    store = BlobStore(blobs_dir(copy))
    count = 0
    for path in sorted(source.iterdir()):
        if len(path.name) == 64 and path.is_file():
            store.put(path.read_bytes())
            count += 1
    return count
