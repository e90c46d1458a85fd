"""Reproducible sampling: one seed per session, a derived seed per request.

Every request carries an explicit ``seed`` (vLLM seeds that request's sampler
with it), derived from the session seed and the request's number in the
session. The bodies are recorded byte for byte, so ``sparkcode replay --rerun``
sends the same seeds again and, on the same engine, gets the same tokens at
any temperature. The session seed is in the recording's header too.
"""

from __future__ import annotations

import hashlib
import secrets

SEED_BITS = 31
"""Derived seeds fit a signed 32-bit integer (what most servers accept)."""


def new_session_seed() -> int:
    return secrets.randbelow(1 << SEED_BITS)


def request_seed(session_seed: int, request: int) -> int:
    """The seed of the ``request``-th model request (0-based) of a session."""
    digest = hashlib.sha256(f"sparkcode:{session_seed}:{request}".encode()).digest()
    value: int = int.from_bytes(digest[:4], "big")
    return value & ((1 << SEED_BITS) - 1)
