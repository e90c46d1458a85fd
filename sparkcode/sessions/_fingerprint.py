"""What served a session: enough to start the same engine again."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from engine.errors import UserError
from engine.paths import Paths
from engine.supervisor import EngineRecord, Supervisor, plugin_lines, tail_lines

from ._redact import Redactor

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt")


def model_revision(model_path: Path) -> str | None:
    """A cheap identity of a model directory.

    The hub revision when the directory records one, else a hash of its
    ``config.json`` and of the names, sizes and mtimes of its weight files
    (hashing the weights themselves would take minutes for a large model).
    """
    for name in ("revision.txt", ".revision"):
        marker = model_path / name
        if marker.is_file():
            return marker.read_text(encoding="utf-8").strip() or None
    config = model_path / "config.json"
    if not config.is_file():
        return None
    digest = hashlib.sha256(config.read_bytes())
    for weight in sorted(model_path.iterdir()):
        if weight.suffix in WEIGHT_SUFFIXES:
            stat = weight.stat()
            digest.update(f"{weight.name}:{stat.st_size}:{int(stat.st_mtime)}".encode())
    return "sha256:" + digest.hexdigest()[:16]


def _same_endpoint(a: str, b: str) -> bool:
    pa, pb = urlsplit(a), urlsplit(b)
    local = {"127.0.0.1", "localhost", "0.0.0.0", "::1"}
    host_a = "local" if pa.hostname in local else pa.hostname
    host_b = "local" if pb.hostname in local else pb.hostname
    return host_a == host_b and pa.port == pb.port


def _prefix_caching(argv: list[str]) -> bool | None:
    if "--enable-prefix-caching" in argv:
        return True
    if "--no-enable-prefix-caching" in argv:
        return False
    return None


def record_fingerprint(record: EngineRecord, redactor: Redactor) -> dict[str, Any]:
    """The fingerprint of the engine the supervisor started."""
    env = redactor.env(record.env)
    features = env.get("SPARKCODE_PLUGIN_FEATURES", "")
    lines = tail_lines(Path(record.log_path), 2000)
    model_path = Path(record.model_path) if record.model_path else None
    return {
        "managed": True,
        "base_url": record.base_url,
        "profile": record.profile,
        "argv": [redactor.text(a) for a in record.argv],
        "env": env,
        "vllm_version": record.vllm_version,
        "model": record.model,
        "model_path": record.model_path,
        "model_revision": model_revision(model_path) if model_path else None,
        "plugin_features": [f for f in features.split(",") if f],
        "plugin_log": plugin_lines(lines),
        "patches": [f for f in env.get("SPARKCODE_PATCHES", "").split(",") if f],
        "prefix_caching": _prefix_caching(record.argv),
        "pid": record.pid,
        "started_at": record.started_at,
    }


def engine_fingerprint(
    base_url: str, paths: Paths, *, model: str | None = None, redactor: Redactor | None = None
) -> dict[str, Any]:
    """The managed engine's fingerprint if it serves ``base_url``, else the URL alone."""
    redactor = redactor or Redactor.from_env()
    try:
        record = Supervisor(paths).record()
    except UserError:
        record = None
    if record is not None and _same_endpoint(record.base_url, base_url):
        fingerprint = record_fingerprint(record, redactor)
        fingerprint["base_url"] = base_url
        return fingerprint
    return {"managed": False, "base_url": base_url, "model": model}
