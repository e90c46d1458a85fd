"""The conversion manifest: what is done, with a checksum per output tensor.

``manifest.json`` lives in the staging directory during a conversion and is
rewritten atomically after every finished shard, so an interrupted run can be
resumed from the last finished shard; a shard whose output file no longer
matches its recorded checksums is redone. After publishing it stays in the
output directory, where ``sparkcode quantize inspect`` reads the per-tensor
statistics recorded in it.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from engine.errors import UserError

MANIFEST_NAME = "manifest.json"
MANIFEST_VERSION = 1


class ManifestError(UserError):
    """The manifest is unreadable or belongs to a different conversion."""


def tensor_digest(t: torch.Tensor) -> str:
    """sha256 of a tensor's raw bytes (any dtype, including FP8)."""
    if t.numel() == 0:
        return hashlib.sha256(b"").hexdigest()
    data = t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy()
    return hashlib.sha256(data.data).hexdigest()


@dataclass
class ShardRecord:
    """One finished output shard."""

    output: str
    tensors: dict[str, dict[str, Any]]  # output tensor name -> {"sha256", "dtype", "shape"}
    stats: dict[str, dict[str, Any]]  # source tensor name -> conversion statistics

    def to_json(self) -> dict[str, Any]:
        return {"output": self.output, "tensors": self.tensors, "stats": self.stats}


@dataclass
class Manifest:
    """State of one conversion (see module docstring)."""

    source: dict[str, Any]
    options: dict[str, Any]
    pool: dict[str, Any] = field(default_factory=dict)
    shards: dict[str, ShardRecord] = field(default_factory=dict)
    complete: bool = False
    summary: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "manifest_version": MANIFEST_VERSION,
            "source": self.source,
            "options": self.options,
            "pool": self.pool,
            "complete": self.complete,
            "summary": self.summary,
            "shards": {name: rec.to_json() for name, rec in self.shards.items()},
        }

    def save(self, directory: Path) -> None:
        """Write atomically: a crash leaves either the old or the new manifest."""
        path = directory / MANIFEST_NAME
        tmp = directory / f".{MANIFEST_NAME}.tmp"
        with tmp.open("w", encoding="utf-8") as fh:
            json.dump(self.to_json(), fh, indent=1, sort_keys=True)
            fh.flush()
            os.fsync(fh.fileno())
        tmp.replace(path)

    @classmethod
    def load(cls, directory: Path) -> Manifest:
        path = directory / MANIFEST_NAME
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if data.get("manifest_version") != MANIFEST_VERSION:
                raise ValueError(f"manifest version {data.get('manifest_version')!r}")
            shards = {
                name: ShardRecord(str(rec["output"]), dict(rec["tensors"]), dict(rec["stats"]))
                for name, rec in data["shards"].items()
            }
            return cls(
                dict(data["source"]),
                dict(data["options"]),
                dict(data.get("pool", {})),
                shards,
                bool(data.get("complete", False)),
                dict(data.get("summary", {})),
            )
        except FileNotFoundError as exc:
            raise ManifestError(f"{directory} has no {MANIFEST_NAME}") from exc
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ManifestError(f"{path} is corrupt: {exc}") from exc

    def all_stats(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for rec in self.shards.values():
            out.update(rec.stats)
        return out


def verify_shard(directory: Path, record: ShardRecord) -> str | None:
    """Re-hash a finished shard's output; None if intact, else what is wrong."""
    from safetensors import safe_open

    path = directory / record.output
    if not path.is_file():
        return f"{record.output} is missing"
    try:
        with safe_open(str(path), framework="pt") as handle:
            names = set(handle.keys())
            for name, meta in record.tensors.items():
                if name not in names:
                    return f"{record.output} lacks {name}"
                if tensor_digest(handle.get_tensor(name)) != meta["sha256"]:
                    return f"{name} in {record.output} does not match its checksum"
    except Exception as exc:  # a damaged file raises safetensors' own errors
        return f"{record.output} is unreadable: {exc}"
    return None
