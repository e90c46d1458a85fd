"""The on-disk record of the managed engine: who runs, where, since when."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from engine.errors import EngineStateError


@dataclass
class EngineRecord:
    """Written when an engine is started, removed when it is stopped."""

    pid: int
    """The runner's pid; it leads the engine's process group."""
    create_time: float
    """The runner's start time, to tell it from a later process with its pid."""
    port: int
    host: str
    profile: str
    model: str | None
    model_path: str | None
    base_url: str
    log_path: str
    argv: list[str]
    env: dict[str, str]
    """Redacted: secrets never reach the disk."""
    started_at: float
    vllm_version: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def read_record(path: Path) -> EngineRecord | None:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, json.JSONDecodeError) as exc:
        raise EngineStateError(
            f"engine record {path} is unreadable ({exc}); remove it if no engine runs"
        ) from None
    try:
        return EngineRecord(**raw)
    except TypeError as exc:
        raise EngineStateError(f"engine record {path} is malformed ({exc})") from None


def write_json(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2), encoding="utf-8")
    os.replace(tmp, path)


def write_record(path: Path, record: EngineRecord) -> None:
    write_json(path, asdict(record))


def read_exit(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None
