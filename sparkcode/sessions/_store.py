"""The directory of session files: list them, find one by ID prefix."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from engine.errors import UserError

from ._appendlog import repair
from ._load import load_session
from ._records import SUFFIX, Session


@dataclass
class SessionSummary:
    """One row of ``sessions list``."""

    id: str
    path: str
    created: str
    origin: str
    workspace: str
    model: str | None
    engine: str
    """The profile name, or the endpoint URL for unmanaged engines."""
    requests: int
    events: int
    completion_tokens: int
    duration_s: float
    problems: int
    truncated: bool
    worktree: str | None = None
    """The git worktree the session worked in (``--worktree``), None outside one."""
    branch: str | None = None
    """That worktree's branch (``sparkcode/NAME``)."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def summarize(session: Session) -> SessionSummary:
    engine = session.engine
    tokens = 0
    for exchange in session.exchanges:
        if exchange.usage and isinstance(exchange.usage.get("completion_tokens"), int):
            tokens += exchange.usage["completion_tokens"]
    model = engine.get("model")
    if model is None and session.exchanges:
        body = session.exchanges[0].body_json
        model = body.get("model") if body else None
    ends = [e.end_t_ns or e.t_ns for e in session.exchanges] + [e.t_ns for e in session.events]
    duration = (max(ends) - session.t0_ns) / 1e9 if ends else 0.0
    return SessionSummary(
        id=session.id,
        path=str(session.path),
        created=str(session.header.get("created", "")),
        origin=str(session.header.get("origin", "")),
        workspace=str(session.header.get("workspace", "")),
        model=model if isinstance(model, str) else None,
        engine=str(engine.get("profile") or engine.get("base_url") or "?"),
        requests=len(session.exchanges),
        events=len(session.events),
        completion_tokens=tokens,
        duration_s=max(duration, 0.0),
        problems=len(session.problems),
        truncated=session.truncated_tail,
        **_worktree(session.header),
    )


def _worktree(header: dict[str, Any]) -> dict[str, str | None]:
    """The header's ``worktree`` record as the summary's two fields."""
    record = header.get("worktree")
    if not isinstance(record, dict):
        return {"worktree": None, "branch": None}
    path, branch = record.get("path"), record.get("branch")
    return {
        "worktree": path if isinstance(path, str) else None,
        "branch": branch if isinstance(branch, str) else None,
    }


_CHUNK_PREFIX = b'{"kind":"chunk"'


def quick_summary(path: Path) -> SessionSummary:
    """:func:`summarize` without building the session: chunk lines (nearly all of
    a file) are skipped unparsed, so listing many long sessions stays fast."""
    try:
        raw = path.read_bytes().rstrip(b"\x00")
    except OSError as exc:
        raise UserError(f"cannot read session file {path}: {exc.strerror}") from None
    header: dict[str, Any] = {}
    requests = events = tokens = problems = 0
    model: str | None = None
    last_t = 0
    lines = raw.split(b"\n")
    truncated = lines[-1] != b""
    for number, line in enumerate(lines, start=1):
        if not line or line.startswith(_CHUNK_PREFIX):
            continue
        try:
            record = json.loads(line)
            kind = record.get("kind")
        except (ValueError, AttributeError):
            if not (truncated and number == len(lines)):
                problems += 1
            continue
        t_ns = record.get("t_ns")
        if isinstance(t_ns, int):
            last_t = max(last_t, t_ns)
        if kind == "header":
            header = record
        elif kind == "request":
            requests += 1
            if model is None and isinstance(record.get("body"), str):
                try:
                    body = json.loads(record["body"])
                except ValueError:
                    body = None
                if isinstance(body, dict) and isinstance(body.get("model"), str):
                    model = body["model"]
        elif kind == "end":
            usage = record.get("usage")
            if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
                tokens += usage["completion_tokens"]
        elif kind == "event":
            events += 1
    if not header:
        raise UserError(f"{path} is not a sparkcode session file (no header record)")
    engine = header.get("engine") if isinstance(header.get("engine"), dict) else {}
    assert isinstance(engine, dict)
    engine_model = engine.get("model")
    t0_value = header.get("t0_ns")
    t0 = t0_value if isinstance(t0_value, int) else last_t
    return SessionSummary(
        id=str(header.get("session_id") or path.stem),
        path=str(path),
        created=str(header.get("created", "")),
        origin=str(header.get("origin", "")),
        workspace=str(header.get("workspace", "")),
        model=engine_model if isinstance(engine_model, str) else model,
        engine=str(engine.get("profile") or engine.get("base_url") or "?"),
        requests=requests,
        events=events,
        completion_tokens=tokens,
        duration_s=max((last_t - t0) / 1e9, 0.0),
        problems=problems,
        truncated=truncated,
        **_worktree(header),
    )


class SessionStore:
    """Session files under one directory (``Paths.sessions_dir``)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def files(self) -> list[Path]:
        """The session files, each made plain JSONL first if its writer died."""
        if not self.directory.is_dir():
            return []
        files = sorted(self.directory.glob(f"*{SUFFIX}"))
        for path in files:
            repair(path)
        return files

    def ids(self) -> list[str]:
        return [p.stem for p in self.files()]

    def resolve(self, prefix: str) -> Path:
        """The file of the session whose ID starts with ``prefix`` (a unique prefix)."""
        prefix = prefix.strip()
        if not prefix:
            raise UserError("empty session ID")
        direct = Path(prefix)
        if direct.suffix == SUFFIX and direct.is_file():
            repair(direct)
            return direct  # a path to a session file works too
        matches = [p for p in self.files() if p.stem.startswith(prefix)]
        if not matches:
            raise UserError(
                f"no session with ID {prefix!r} in {self.directory} (see `sparkcode sessions list`)"
            )
        if len(matches) > 1:
            shown = ", ".join(p.stem for p in matches[:5])
            raise UserError(
                f"session ID {prefix!r} is ambiguous: {shown}{' ...' if len(matches) > 5 else ''}"
            )
        return matches[0]

    def load(self, prefix: str) -> Session:
        return load_session(self.resolve(prefix))

    def summaries(self) -> list[SessionSummary]:
        """Every session, oldest first; unreadable files are skipped."""
        out: list[SessionSummary] = []
        for path in self.files():
            try:
                out.append(quick_summary(path))
            except UserError:
                continue
        out.sort(key=lambda s: (s.created, s.id))
        return out

    @property
    def results_dir(self) -> Path:
        """Replay results (``<id>.json``), shown by the TUI's sessions screen."""
        return self.directory / "results"

    def save_result(self, session_id: str, result: dict[str, Any]) -> Path:
        self.results_dir.mkdir(parents=True, exist_ok=True)
        path = self.results_dir / f"{session_id}.json"
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(result, indent=2), encoding="utf-8")
        tmp.replace(path)
        return path

    def load_result(self, session_id: str) -> dict[str, Any] | None:
        path = self.results_dir / f"{session_id}.json"
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None
