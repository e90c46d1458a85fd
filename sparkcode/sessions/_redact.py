"""Keep secrets out of session files.

Two kinds of secret are removed before anything is written: credential
headers (``Authorization`` and friends, and any header whose name looks like a
secret) and the *values* of secret-named environment variables (names
containing KEY, TOKEN, SECRET or PASSWORD, as :func:`engine.profiles.is_secret_name`
decides), wherever such a value shows up in a recorded string.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

from engine.profiles import is_secret_name

REDACTED = "<redacted>"

CREDENTIAL_HEADERS: frozenset[str] = frozenset(
    {"authorization", "proxy-authorization", "cookie", "set-cookie", "x-api-key", "api-key"}
)

MIN_SECRET_LEN = 6
"""Shorter values (``1``, ``true``) would redact unrelated text and protect nothing."""


def secret_values_from_env(env: Mapping[str, str] | None = None) -> list[str]:
    """The values of secret-named variables in ``env`` (default: this process)."""
    source = os.environ if env is None else env
    return [v for k, v in source.items() if is_secret_name(k) and len(v) >= MIN_SECRET_LEN]


class Redactor:
    """Replaces known secret values and credential headers with ``<redacted>``."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        # Longest first, so a secret containing another is removed whole.
        unique = {s for s in secrets if len(s) >= MIN_SECRET_LEN}
        self._secrets: list[str] = sorted(unique, key=len, reverse=True)

    @classmethod
    def from_env(cls, extra: Iterable[str] = ()) -> Redactor:
        return cls([*secret_values_from_env(), *extra])

    def add(self, secret: str) -> None:
        if len(secret) >= MIN_SECRET_LEN and secret not in self._secrets:
            self._secrets.append(secret)
            self._secrets.sort(key=len, reverse=True)

    @property
    def active(self) -> bool:
        return bool(self._secrets)

    @property
    def secrets(self) -> list[str]:
        """The live list of secrets (it grows as credentials are seen; do not modify)."""
        return self._secrets

    def text(self, value: str) -> str:
        """``value`` with every known secret replaced."""
        for secret in self._secrets:
            if secret in value:
                value = value.replace(secret, REDACTED)
        return value

    def headers(self, pairs: Iterable[tuple[str, str]]) -> list[list[str]]:
        """Header pairs, in order, with credentials and secret values removed."""
        out: list[list[str]] = []
        for name, value in pairs:
            lower = name.lower()
            if lower in CREDENTIAL_HEADERS or is_secret_name(name):
                # Keep the scheme ("Bearer") so a reader knows what kind of auth was sent.
                scheme = value.split(" ", 1)[0] if " " in value else ""
                out.append([name, f"{scheme} {REDACTED}".strip()])
                # A bearer token seen once is redacted everywhere else too.
                token = value.split(" ", 1)[-1]
                self.add(token)
            else:
                out.append([name, self.text(value)])
        return out

    def env(self, env: Mapping[str, str]) -> dict[str, str]:
        """An environment with secret-named variables and secret values removed."""
        return {k: (REDACTED if is_secret_name(k) else self.text(v)) for k, v in env.items()}
