"""Send a recorded session's requests to a live engine again, in order.

Order matters: which prefixes the engine has cached when a request arrives
depends on the requests before it, so requests go one at a time in the
recorded order. Each request body is the recorded one, byte for byte, except
where noted in :func:`prepare_body` (a different served model name, and a
``cache_salt`` that keeps this rerun's prefix-cache entries apart from
everything the engine served before).
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from engine.errors import UserError
from sparkcode.agent import ChatError, api_key_headers
from sparkcode.sessions import (
    Exchange,
    Session,
    TurnOutput,
    exchange_output,
    is_model_call,
    parse_output,
)
from sparkcode.target import Target

from ._compare import TurnComparison, compare_turn

BodyEdit = Callable[[int, dict[str, Any]], dict[str, Any]]
Progress = Callable[[str], None]


@dataclass
class SentTurn:
    """One request of a rerun and what came back."""

    request: int
    body: bytes
    status: int | None
    headers: list[tuple[str, str]]
    chunks: list[tuple[int, bytes]]
    output: TurnOutput
    wall_s: float


@dataclass
class RerunResult:
    """A whole rerun against one configuration."""

    target: str
    turns: list[TurnComparison]
    wall_s: float
    isolated: bool
    sent: list[SentTurn] = field(default_factory=list)

    @property
    def flagged(self) -> list[TurnComparison]:
        return [t for t in self.turns if t.flagged]

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "wall_s": self.wall_s,
            "isolated": self.isolated,
            "turns": [t.to_json() for t in self.turns],
        }


def model_turns(session: Session) -> list[Exchange]:
    """The session's generation requests that the server accepted, in order.

    A request the server refused (HTTP 4xx/5xx, e.g. a field the client then
    dropped and retried without) generated nothing and touched no cache, so it
    is not re-sent.
    """
    return [
        e
        for e in session.exchanges
        if is_model_call(e) and e.body_json is not None and e.status is not None and e.status < 400
    ]


def seed_note(session: Session) -> str | None:
    """Why a rerun of ``session`` cannot be exact, or None when every request was seeded.

    A request without ``seed`` was sampled from the engine's own random state:
    at a temperature above 0 no rerun can draw the same tokens.
    """
    turns = model_turns(session)
    unseeded = [e for e in turns if "seed" not in (e.body_json or {})]
    if not unseeded:
        return None
    greedy = all((e.body_json or {}).get("temperature") == 0 for e in unseeded)
    why = (
        "it was recorded before sparkcode sent a sampling seed"
        if session.header.get("format", 1) == 1
        else 'it was recorded with seed = "off"'
    )
    if greedy:
        return (
            f"{len(unseeded)} of {len(turns)} requests carry no seed ({why}); they were "
            "sampled greedily (temperature 0), so a rerun can still match"
        )
    return (
        f"this rerun cannot be exact: {len(unseeded)} of {len(turns)} requests carry no "
        f"seed ({why}), so the engine sampled them from its own random state; "
        "differences there are expected, not a bug"
    )


def prepare_body(
    exchange: Exchange, *, model: str | None, salt: str | None, edit: BodyEdit | None = None
) -> bytes:
    """The bytes to send: the recorded body, changed only where it must be."""
    body = exchange.body_json
    if body is None:
        raise UserError(f"request {exchange.index} has no JSON body; it cannot be re-sent")
    changed = False
    if model is not None and body.get("model") != model:
        body["model"] = model
        changed = True
    if salt is not None:
        body["cache_salt"] = salt
        changed = True
    if edit is not None:
        body = edit(exchange.index, body)
        changed = True
    return json.dumps(body).encode("utf-8") if changed else exchange.body


def _headers(target: Target) -> dict[str, str]:
    try:
        key = api_key_headers(target.api_key_env)
    except ChatError as exc:
        raise UserError(str(exc)) from None
    return {"Content-Type": "application/json", "Accept": "text/event-stream", **key}


async def send_turn(
    http: httpx.AsyncClient, target: Target, exchange: Exchange, body: bytes
) -> SentTurn:
    """POST one recorded request and read its whole response, chunk by chunk."""
    url = target.base_url.rstrip("/") + exchange.path
    began = time.perf_counter()
    chunks: list[tuple[int, bytes]] = []
    try:
        async with http.stream("POST", url, content=body, headers=_headers(target)) as response:
            async for data in response.aiter_raw():
                chunks.append((time.monotonic_ns(), data))
            status = response.status_code
            headers = list(response.headers.items())
            content_type = response.headers.get("content-type", "")
    except httpx.TransportError as exc:
        raise UserError(
            f"cannot reach {target.label} at {url}: {type(exc).__name__}: {exc}"
        ) from None
    raw = b"".join(d for _, d in chunks)
    output = parse_output(raw, streamed="event-stream" in content_type)
    if status >= 400 and output.error is None:
        output.error = f"HTTP {status}: {raw[:300].decode('utf-8', 'replace')}"
    return SentTurn(
        exchange.index, body, status, headers, chunks, output, time.perf_counter() - began
    )


async def rerun(
    session: Session,
    target: Target,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
    isolate: bool = True,
    only: Sequence[int] | None = None,
    edit: BodyEdit | None = None,
    detect: bool = True,
    progress: Progress | None = None,
    timeout: float = 600.0,
) -> RerunResult:
    """Re-send the session's model requests to ``target`` and compare every turn.

    Args:
        only: request indices to send (in session order); default all.
        isolate: add one fresh ``cache_salt`` to every request of this rerun, so
            it starts from a cold prefix cache however often it is repeated,
            while its turns still share cache entries with each other.
        edit: changes a request body before sending (used by ``--minimize``).
    """
    turns = model_turns(session)
    if not turns:
        raise UserError(f"session {session.id} has no model requests to re-send")
    numbering = {e.index: n for n, e in enumerate(turns, start=1)}
    if only is not None:
        wanted = set(only)
        turns = [e for e in turns if e.index in wanted]
    salt = f"sparkcode-rerun-{secrets.token_hex(8)}" if isolate else None
    result = RerunResult(target=target.label, turns=[], wall_s=0.0, isolated=isolate)
    began = time.perf_counter()
    async with httpx.AsyncClient(transport=transport, timeout=timeout) as http:
        for exchange in turns:
            body = prepare_body(exchange, model=target.model, salt=salt, edit=edit)
            sent = await send_turn(http, target, exchange, body)
            result.sent.append(sent)
            comparison = compare_turn(
                numbering[exchange.index],
                exchange.index,
                exchange_output(exchange),
                sent.output,
                wall_s=sent.wall_s,
                detect=detect,
            )
            result.turns.append(comparison)
            if progress is not None:
                progress(f"turn {comparison.turn}: {comparison.cell()}")
    result.wall_s = time.perf_counter() - began
    return result
