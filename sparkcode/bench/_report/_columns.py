"""A column of a bench report: one target of one result directory."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Column:
    """One target of one result directory."""

    name: str
    data: dict[str, Any]
    label: str

    @property
    def units(self) -> dict[str, Any]:
        units: dict[str, Any] = self.data["units"].get(self.label, {})
        return units


def columns(results: list[dict[str, Any]], dirs: list[Path] | None = None) -> list[Column]:
    out: list[Column] = []
    labels = [t["label"] for data in results for t in data["targets"]]
    for n, data in enumerate(results):
        for target in data["targets"]:
            label = target["label"]
            name = label if labels.count(label) == 1 or dirs is None else f"{dirs[n].name}/{label}"
            out.append(Column(name, data, label))
    return out
