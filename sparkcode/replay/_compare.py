"""Compare what a turn said in the recording with what it says on a rerun.

Method: both outputs are flattened into one string per turn in which every
channel (answer, reasoning, each tool call's name and arguments) is tagged,
and the first differing character is found. That character lies in one
streamed piece of the recording; the divergence is reported at that piece's
token index. The token index comes from the server's running usage count
(``continuous_usage_stats``, which the agent always asks for), so it is exact
even when one frame carries several tokens; without usage it falls back to the
piece index, which vLLM makes equal to the token index without speculative
decoding. Comparing text rather than re-tokenizing it keeps the method
independent of the server (no ``/tokenize`` needed) and never reports a
difference that only exists in how identical text was split into frames.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from sparkcode.sessions import Piece, TurnOutput

from ._detect import detector_verdict

TurnStatus = Literal["identical", "diverged", "error"]
CONTEXT_CHARS = 160


@dataclass
class Divergence:
    """Where two outputs of the same turn part ways."""

    token: int
    """Token index (0-based) of the first differing token in the recording."""
    piece: int
    """Index of the recorded streamed piece holding it."""
    char: int
    """Offset of the first differing character in the turn's output."""
    channel: str
    recorded: str
    """The recording's continuation from the divergence on (clipped)."""
    rerun: str
    """The rerun's continuation from the same point (clipped)."""
    common: str
    """The last characters both agree on, for context."""


@dataclass
class TurnComparison:
    """One model turn of a rerun, next to its recording."""

    turn: int
    """1-based number among the session's model requests."""
    request: int
    """The request's index in the session file."""
    status: TurnStatus
    divergence: Divergence | None = None
    recorded_tokens: int | None = None
    rerun_tokens: int | None = None
    recorded_finish: str | None = None
    rerun_finish: str | None = None
    exact_tokens: bool | None = None
    """True when token positions are exact (usage on every frame matched the pieces)."""
    recorded_detector: dict[str, Any] | None = None
    """The degeneration detector's verdict on the recording when it fired, else None."""
    rerun_detector: dict[str, Any] | None = None
    error: str | None = None
    wall_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def flagged(self) -> bool:
        return self.status != "identical" or self.rerun_detector is not None

    def cell(self) -> str:
        """A short table cell: ``=``, ``≠@N``, ``DEGEN``, ``ERR``."""
        parts: list[str] = []
        if self.status == "identical":
            parts.append("=")
        elif self.status == "diverged" and self.divergence is not None:
            parts.append(f"≠@{self.divergence.token}")
        else:
            parts.append("ERR")
        if self.rerun_detector is not None:
            parts.append("DEGEN")
        return " ".join(parts)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["flagged"] = self.flagged
        return data


def _tagged(pieces: list[Piece]) -> tuple[str, list[tuple[int, int, Piece]]]:
    """The tagged flat string and, per piece, (start, piece index, piece)."""
    parts: list[str] = []
    spans: list[tuple[int, int, Piece]] = []
    offset = 0
    channel: str | None = None
    for index, piece in enumerate(pieces):
        if piece.channel != channel:
            channel = piece.channel
            tag = f"\x00{channel}\x00"
            parts.append(tag)
            offset += len(tag)
        spans.append((offset, index, piece))
        parts.append(piece.text)
        offset += len(piece.text)
    return "".join(parts), spans


def _piece_at(spans: list[tuple[int, int, Piece]], char: int) -> tuple[int, Piece | None]:
    """The piece holding offset ``char``; a channel tag belongs to the piece after it."""
    found: tuple[int, Piece | None] = (len(spans), None)
    end = 0
    for start, index, piece in spans:
        if start > char:
            # Past the previous piece's text means inside the tag before this one.
            return found if found[1] is not None and char < end else (index, piece)
        found = (index, piece)
        end = start + len(piece.text)
    return found if char < end else (len(spans), None)


def _visible(tagged: str) -> str:
    """Tagged text for people: channel tags shown as ``[channel]``."""
    out: list[str] = []
    for n, part in enumerate(tagged.split("\x00")):
        out.append(f"[{part}] " if n % 2 == 1 else part)
    return "".join(out)


def first_divergence(recorded: TurnOutput, rerun: TurnOutput) -> Divergence | None:
    """None when both outputs say exactly the same thing, else where they part."""
    a, spans_a = _tagged(recorded.pieces)
    b, _ = _tagged(rerun.pieces)
    if a == b:
        if recorded.finish_reason == rerun.finish_reason or None in (
            recorded.finish_reason,
            rerun.finish_reason,
        ):
            return None
    limit = min(len(a), len(b))
    char = next((i for i in range(limit) if a[i] != b[i]), limit)
    # Never start inside a channel tag: back up to the tag's start.
    tag_start = a.rfind("\x00", 0, char + 1)
    if tag_start >= 0 and a.count("\x00", 0, char + 1) % 2 == 1:
        char = tag_start
    piece_index, piece = _piece_at(spans_a, char)
    if piece is None and spans_a:
        last = spans_a[-1][2]
        token = last.token + 1 if last.token >= 0 else len(spans_a)
        channel = last.channel
    elif piece is None:
        token, channel = 0, "content"
    else:
        token = piece.token if piece.token >= 0 else piece_index
        channel = piece.channel
    visible_char = len(_visible(a[:char]))
    recorded_tail = _visible(a[char : char + CONTEXT_CHARS]) or f"<end: {recorded.finish_reason}>"
    rerun_tail = _visible(b[char : char + CONTEXT_CHARS]) or f"<end: {rerun.finish_reason}>"
    return Divergence(
        token=token,
        piece=piece_index,
        char=visible_char,
        channel=channel,
        recorded=recorded_tail,
        rerun=rerun_tail,
        common=_visible(a[max(0, char - 60) : char]),
    )


def compare_turn(
    turn: int,
    request: int,
    recorded: TurnOutput,
    rerun: TurnOutput,
    *,
    wall_s: float = 0.0,
    detect: bool = True,
) -> TurnComparison:
    """Compare one turn and run the degeneration detector on both sides."""
    result = TurnComparison(
        turn=turn,
        request=request,
        status="identical",
        recorded_tokens=recorded.completion_tokens,
        rerun_tokens=rerun.completion_tokens,
        recorded_finish=recorded.finish_reason,
        rerun_finish=rerun.finish_reason,
        wall_s=wall_s,
    )
    exact = [o.pieces_are_tokens for o in (recorded, rerun)]
    result.exact_tokens = None if None in exact else all(exact)
    if detect:
        result.recorded_detector = detector_verdict(recorded)
        result.rerun_detector = detector_verdict(rerun)
    if rerun.error is not None:
        result.status = "error"
        result.error = rerun.error
        return result
    divergence = first_divergence(recorded, rerun)
    if divergence is not None:
        result.status = "diverged"
        result.divergence = divergence
    return result
