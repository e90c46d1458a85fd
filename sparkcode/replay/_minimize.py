"""Shrink a session to the least that still reproduces a flagged turn.

A candidate is an ordered subset of the turns before the flagged one, plus the
flagged turn, with some tool outputs trimmed. Each candidate runs on a cold
prefix cache of its own (one fresh ``cache_salt`` per candidate) so candidates
cannot warm the cache for each other.

"Still reproduces" depends on why the turn was flagged:

* degenerate: the flagged turn's output trips the degeneration detector;
* diverged: the flagged turn's output differs from its reference, which is the
  recorded output while the turn's request is unchanged, and otherwise (once
  tool outputs are trimmed) the output of that request sent alone on a cold
  cache.

Search: drop earlier turns one at a time, earliest first, keeping each drop
that still reproduces (fewest turns first); then, per tool output in the
flagged request (longest first), binary-search the shortest prefix that still
reproduces. Every run is bounded by ``max_runs``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

from engine.errors import UserError
from sparkcode.sessions import Session, TurnOutput, exchange_output
from sparkcode.target import Target

from ._compare import first_divergence
from ._detect import detector_verdict
from ._rerun import SentTurn, model_turns, rerun

FlagKind = Literal["degenerate", "diverged"]
TRIM_MARK = "\n[... trimmed by sparkcode replay --minimize]"


@dataclass
class MinimizeResult:
    """The smallest reproducing candidate found."""

    flagged_request: int
    flagged_turn: int
    kind: FlagKind
    kept_requests: list[int]
    """Request indices kept, in order; the last one is the flagged turn."""
    trims: dict[str, int]
    """Tool message key -> characters kept."""
    runs: int
    sent: list[SentTurn] = field(default_factory=list)
    """The requests and responses of the final reproducing run."""
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "flagged_request": self.flagged_request,
            "flagged_turn": self.flagged_turn,
            "kind": self.kind,
            "kept_requests": self.kept_requests,
            "trims": self.trims,
            "runs": self.runs,
            "reason": self.reason,
        }


def _tool_key(message: dict[str, Any], position: int) -> str:
    call_id = message.get("tool_call_id")
    return f"id:{call_id}" if isinstance(call_id, str) and call_id else f"pos:{position}"


def tool_outputs(body: dict[str, Any]) -> dict[str, str]:
    """The tool results in a request's messages, by a key stable across requests."""
    out: dict[str, str] = {}
    for position, message in enumerate(body.get("messages") or []):
        if isinstance(message, dict) and message.get("role") == "tool":
            content = message.get("content")
            if isinstance(content, str):
                out[_tool_key(message, position)] = content
    return out


def apply_trims(body: dict[str, Any], trims: dict[str, int]) -> dict[str, Any]:
    if not trims:
        return body
    body = copy.deepcopy(body)
    for position, message in enumerate(body.get("messages") or []):
        if not (isinstance(message, dict) and message.get("role") == "tool"):
            continue
        keep = trims.get(_tool_key(message, position))
        content = message.get("content")
        if keep is not None and isinstance(content, str) and keep < len(content):
            message["content"] = content[:keep] + TRIM_MARK
    return body


class Minimizer:
    """Runs candidates against one target and remembers the best."""

    def __init__(
        self,
        session: Session,
        target: Target,
        flagged_request: int,
        kind: FlagKind,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        max_runs: int = 60,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        self.session = session
        self.target = target
        self.flagged = flagged_request
        self.kind = kind
        self.transport = transport
        self.max_runs = max_runs
        self.runs = 0
        self.progress = progress or (lambda _msg: None)
        turns = model_turns(session)
        by_index = {e.index: e for e in turns}
        if flagged_request not in by_index:
            raise UserError(
                f"request {flagged_request} is not a model turn of session {session.id}"
            )
        self.exchange = by_index[flagged_request]
        self.turn_number = [e.index for e in turns].index(flagged_request) + 1
        self.before = [e.index for e in turns if e.index < flagged_request]
        self.last_sent: list[SentTurn] = []
        self._references: dict[tuple[tuple[str, int], ...], TurnOutput] = {}

    def _budget(self) -> None:
        if self.runs >= self.max_runs:
            raise _OutOfRuns

    async def _run(self, kept: list[int], trims: dict[str, int]) -> list[SentTurn]:
        self._budget()
        self.runs += 1

        def edit(_index: int, body: dict[str, Any]) -> dict[str, Any]:
            return apply_trims(body, trims)

        result = await rerun(
            self.session,
            self.target,
            transport=self.transport,
            isolate=True,
            only=[*kept, self.flagged],
            edit=edit if trims else None,
            detect=False,
        )
        return result.sent

    async def _reference(self, trims: dict[str, int]) -> TurnOutput:
        if not trims:
            return exchange_output(self.exchange)
        key = tuple(sorted(trims.items()))
        if key not in self._references:
            sent = await self._run([], trims)
            self._references[key] = sent[-1].output
        return self._references[key]

    async def reproduces(self, kept: list[int], trims: dict[str, int]) -> bool:
        sent = await self._run(kept, trims)
        output = sent[-1].output
        if output.error is not None:
            return False
        if self.kind == "degenerate":
            hit = detector_verdict(output) is not None
        else:
            hit = first_divergence(await self._reference(trims), output) is not None
        if hit:
            self.last_sent = sent
        self.progress(
            f"run {self.runs}: turns {[*kept, self.flagged]} trims {trims or '-'}: "
            f"{'reproduces' if hit else 'does not reproduce'}"
        )
        return hit

    async def minimize(self) -> MinimizeResult:
        kept = list(self.before)
        trims: dict[str, int] = {}
        reason = ""
        try:
            if not await self.reproduces(kept, trims):
                raise UserError(
                    f"turn {self.turn_number} (request {self.flagged}) is not {self.kind} when "
                    f"the session is rerun against {self.target.label}; nothing to minimize"
                )
            for index in list(kept):
                candidate = [i for i in kept if i != index]
                if await self.reproduces(candidate, trims):
                    kept = candidate
            body = self.exchange.body_json or {}
            outputs = sorted(tool_outputs(body).items(), key=lambda kv: -len(kv[1]))
            for key, content in outputs:
                trims = await self._trim(kept, trims, key, len(content))
        except _OutOfRuns:
            reason = f"stopped after {self.max_runs} runs (--max-runs); the result is not minimal"
        if not self.last_sent:
            raise UserError("no reproducing run was found")
        return MinimizeResult(
            flagged_request=self.flagged,
            flagged_turn=self.turn_number,
            kind=self.kind,
            kept_requests=[*kept, self.flagged],
            trims=trims,
            runs=self.runs,
            sent=self.last_sent,
            reason=reason,
        )

    async def _trim(
        self, kept: list[int], trims: dict[str, int], key: str, length: int
    ) -> dict[str, int]:
        """The shortest kept prefix of one tool output that still reproduces."""
        if await self.reproduces(kept, {**trims, key: 0}):
            return {**trims, key: 0}
        low, high = 0, length  # low fails, high (the whole output) reproduces
        while high - low > max(32, length // 32):
            middle = (low + high) // 2
            if await self.reproduces(kept, {**trims, key: middle}):
                high = middle
            else:
                low = middle
        if high < length:
            # Re-run the winner so last_sent holds the run the bundle describes.
            await self.reproduces(kept, {**trims, key: high})
            return {**trims, key: high}
        await self.reproduces(kept, trims)
        return trims


class _OutOfRuns(Exception):
    pass


async def minimize(
    session: Session,
    target: Target,
    flagged_request: int,
    kind: FlagKind,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
    max_runs: int = 60,
    progress: Callable[[str], None] | None = None,
) -> MinimizeResult:
    """Find the shortest leading part of ``session`` that reproduces the flagged turn."""
    return await Minimizer(
        session,
        target,
        flagged_request,
        kind,
        transport=transport,
        max_runs=max_runs,
        progress=progress,
    ).minimize()
