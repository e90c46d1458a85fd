"""``patches/``: the manifest, the Python dry run and ``sparkcode engine patches``."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from engine import patches
from engine.patches import PATCHES_DIR, PatchError, apply_text, check_all, dry_run, load_manifest
from engine.plugin import scheduler_fix
from engine.plugin._fingerprint import fingerprint_source, function_source

TARGET = "vllm/v1/core/sched/scheduler.py"


@pytest.fixture(scope="module")
def installed_source() -> str:
    root = patches.vllm_root()
    assert root is not None
    return (root / TARGET).read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def patch_text() -> str:
    (entry,) = load_manifest()
    return (PATCHES_DIR / entry.file).read_text(encoding="utf-8")


def fake_root(tmp_path: Path, text: str) -> Path:
    target = tmp_path / "site" / TARGET
    target.parent.mkdir(parents=True)
    target.write_text(text, encoding="utf-8")
    return tmp_path / "site"


def test_manifest_describes_the_scheduler_patch() -> None:
    (entry,) = load_manifest()
    assert entry.number == 1 and entry.file.startswith("0001-")
    assert entry.target == TARGET and entry.vllm_version == "0.32.0"
    assert "54076" in entry.upstream and entry.plugin_feature == "scheduler_fix"
    assert (PATCHES_DIR / entry.file).is_file()


def test_installed_vllm_takes_the_patch(installed_source: str, patch_text: str) -> None:
    assert dry_run(patch_text, installed_source) == "appliable"
    (result,) = check_all()
    assert result.state == "appliable" and "installed vLLM 0.32.0" in result.detail


def test_patched_source_is_reported_applied(
    tmp_path: Path, installed_source: str, patch_text: str
) -> None:
    patched = apply_text(patch_text, installed_source)
    assert "isinstance(group.kv_cache_spec, MambaSpec)" in patched
    (result,) = check_all(root=fake_root(tmp_path, patched))
    assert result.state == "applied"


def test_patch_and_plugin_are_the_same_fix(installed_source: str, patch_text: str) -> None:
    """The plugin treats a source carrying patch 0001 as already fixed."""
    qualname = "Scheduler._mamba_block_aligned_split"
    before = function_source(installed_source, qualname)
    after = function_source(apply_text(patch_text, installed_source), qualname)
    assert before is not None and after is not None
    assert fingerprint_source(before) in scheduler_fix.KNOWN_UNFIXED
    assert fingerprint_source(after) in scheduler_fix.KNOWN_FIXED


def test_changed_source_is_a_conflict(tmp_path: Path, installed_source: str) -> None:
    changed = installed_source.replace(
        "        block_size = self.cache_config.block_size\n",
        "        block_size = self.cache_config.block_size * 1\n",
    )
    assert changed != installed_source
    (result,) = check_all(root=fake_root(tmp_path, changed))
    assert result.state == "conflict" and "does not apply" in result.detail


def test_missing_target_is_a_conflict(tmp_path: Path) -> None:
    (result,) = check_all(root=tmp_path)
    assert result.state == "conflict" and "not found" in result.detail


@pytest.mark.skipif(shutil.which("patch") is None, reason="no patch binary")
def test_gnu_patch_agrees(tmp_path: Path, installed_source: str) -> None:
    root = fake_root(tmp_path, installed_source)
    (entry,) = load_manifest()
    cmd = ["patch", "-p1", "--dry-run", "--batch", "--fuzz=0", "-i", str(PATCHES_DIR / entry.file)]
    assert subprocess.run(cmd, cwd=root, capture_output=True).returncode == 0
    subprocess.run([c for c in cmd if c != "--dry-run"], cwd=root, check=True, capture_output=True)
    assert dry_run((PATCHES_DIR / entry.file).read_text(), (root / TARGET).read_text()) == "applied"


def test_malformed_manifest_and_patch_are_clear_errors(tmp_path: Path) -> None:
    (tmp_path / "manifest.toml").write_text("[[patch]]\nnumber = 1\n")
    with pytest.raises(PatchError, match=r"\[\[patch\]\] #1 is incomplete"):
        load_manifest(tmp_path)
    (tmp_path / "manifest.toml").write_text("[[patch\n")
    with pytest.raises(PatchError, match="malformed TOML"):
        load_manifest(tmp_path)
    with pytest.raises(PatchError, match="cannot read patch manifest"):
        load_manifest(tmp_path / "nowhere")
    with pytest.raises(PatchError, match="not a unified diff"):
        dry_run("just text\n", "x\n")


def test_cli_check_reports_and_fails_on_conflict(
    tmp_path: Path, installed_source: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sparkcode.cli import app

    runner = CliRunner()
    ok = runner.invoke(app, ["engine", "patches", "check"])
    assert ok.exit_code == 0, ok.output
    assert "0001 appliable 0001-scheduler-mamba-block-aligned-split-grid.patch" in ok.output
    default = runner.invoke(app, ["engine", "patches"])
    assert default.exit_code == 0 and "appliable" in default.output

    changed = installed_source.replace("        block_size = self.cache_config.block_size\n", "")
    monkeypatch.setattr(patches, "vllm_root", lambda: fake_root(tmp_path, changed))
    bad = runner.invoke(app, ["engine", "patches", "check", "--json"])
    assert bad.exit_code == 1
    assert '"state": "conflict"' in bad.output
