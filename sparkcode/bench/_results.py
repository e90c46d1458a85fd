"""A benchmark's result directory: ``results.json`` (every raw number, the exact
settings, each target's engine fingerprint), written again after every finished
unit of work so an interrupted run keeps what it finished and ``--resume``
carries on from there; ``table.md`` and the PNG plots are derived from it."""

from __future__ import annotations

import datetime as dt
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.errors import UserError
from sparkcode import __version__

FORMAT = 1
RESULTS = "results.json"
KINDS = ("humaneval", "throughput", "loops", "kld", "agent")


def default_dir(kind: str) -> Path:
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path.cwd() / f"bench-{kind}-{stamp}"


@dataclass
class ResultDir:
    """The results of one ``sparkcode bench KIND`` invocation, on disk."""

    path: Path
    data: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def create(
        cls, path: Path, kind: str, settings: dict[str, Any], targets: list[dict[str, Any]]
    ) -> ResultDir:
        if (path / RESULTS).exists():
            raise UserError(
                f"{path} already holds results; pass --resume {path} to carry "
                "on, or choose another --out"
            )
        path.mkdir(parents=True, exist_ok=True)
        data = {
            "format": FORMAT,
            "kind": kind,
            "sparkcode_version": __version__,
            "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "settings": settings,
            "targets": targets,
            "units": {},
            "complete": False,
        }
        result = cls(path, data)
        result.save()
        return result

    @classmethod
    def load(cls, path: Path, kind: str | None = None) -> ResultDir:
        file = path / RESULTS if path.is_dir() else path
        if not file.is_file():
            raise UserError(f"{path} holds no {RESULTS}: not a sparkcode bench result")
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise UserError(f"cannot read {file}: {exc}") from None
        if (
            not isinstance(data, dict)
            or data.get("format") != FORMAT
            or data.get("kind") not in KINDS
        ):
            raise UserError(f"{file} is not a sparkcode bench result (format {FORMAT})")
        if kind is not None and data["kind"] != kind:
            raise UserError(
                f"{path} holds {data['kind']} results, not {kind}: resume it "
                f"with `sparkcode bench {data['kind']} --resume {path}`"
            )
        return cls(file.parent, data)

    @property
    def kind(self) -> str:
        return str(self.data["kind"])

    @property
    def settings(self) -> dict[str, Any]:
        return dict(self.data["settings"])

    def units(self, label: str) -> dict[str, Any]:
        units: dict[str, Any] = self.data["units"].setdefault(label, {})
        return units

    def done(self, label: str, key: str) -> bool:
        return key in self.data["units"].get(label, {})

    def put(self, label: str, key: str, value: Any) -> None:
        """Record one finished unit and save at once (a later crash keeps it)."""
        self.units(label)[key] = value
        self.save()

    def target(self, label: str) -> dict[str, Any]:
        for target in self.data["targets"]:
            if target["label"] == label:
                return dict(target)
        raise KeyError(label)

    def set_target(self, label: str, **fields: Any) -> None:
        for target in self.data["targets"]:
            if target["label"] == label:
                target.update(fields)
        self.save()

    def save(self) -> None:
        tmp = self.path / (RESULTS + ".tmp")
        # Whole-file replace: a kill leaves the previous or the new version, never half.
        # (No fsync per unit: it would dominate short units; power loss is not the risk.)
        tmp.write_text(json.dumps(self.data, indent=1), encoding="utf-8")
        os.replace(tmp, self.path / RESULTS)

    def write_text(self, name: str, text: str) -> Path:
        out = self.path / name
        out.write_text(text, encoding="utf-8")
        return out
