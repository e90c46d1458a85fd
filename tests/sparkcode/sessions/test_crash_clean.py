"""Session files of killed writers are plain JSONL once sparkcode opens the directory."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from engine.paths import Paths
from sparkcode.sessions import SessionStore, load_session
from sparkcode.sessions._appendlog import AppendLog, repair
from tests.support import ROOT

from .test_loading import RECORD_SCRIPT


def assert_plain_jsonl(path: Path) -> list[dict[str, object]]:
    raw = path.read_bytes()
    assert b"\x00" not in raw
    assert raw == b"" or raw.endswith(b"\n")
    records = [json.loads(line) for line in raw.split(b"\n")[:-1]]
    assert all(isinstance(r, dict) for r in records)
    return records


def test_files_killed_at_any_moment_are_mended_when_the_directory_is_opened(
    paths: Paths, tmp_path: Path
) -> None:
    """Real SIGKILLs of a recording process, from before its first chunk to mid-stream:
    each file has zero padding on disk, and none once the store lists the directory."""
    root = str(ROOT)
    script = tmp_path / "record.py"
    script.write_text(RECORD_SCRIPT.format(root=root))
    env = {**os.environ, "SPARKCODE_HOME": str(paths.config_dir.parent)}
    killed: list[tuple[Path, int]] = []
    padded = 0
    for chunks_before_kill in (0, 3, 57, 180):
        proc = subprocess.Popen(
            [sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env
        )
        try:
            assert proc.stdout is not None
            path = Path(proc.stdout.readline().strip())
            deadline = time.monotonic() + 60
            while (
                not path.exists() or path.read_bytes().count(b'"kind":"chunk"') < chunks_before_kill
            ):
                assert time.monotonic() < deadline, "the recorder wrote no chunks"
                time.sleep(0.002)
            proc.send_signal(signal.SIGKILL)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=30)
        assert proc.returncode == -signal.SIGKILL
        raw = path.read_bytes()
        padded += raw.endswith(b"\x00")
        killed.append((path, raw.count(b'"kind":"chunk"')))
    # Each kill left padding (the next recording process mended the earlier files).
    assert padded >= len(killed) - 1  # a kill right after creating the file may beat it
    files = SessionStore(paths.sessions_dir).files()
    # A writer killed before its header was whole saved nothing: its file is removed.
    assert sorted(files) == sorted(p for p, _ in killed if p.exists())
    assert len(files) >= 3
    for path, chunks in killed:
        if not path.exists():
            assert chunks == 0
            continue
        records = assert_plain_jsonl(path)
        assert records[0]["kind"] == "header"
        kept = sum(1 for r in records if r["kind"] == "chunk")
        assert chunks - 1 <= kept <= chunks  # at most the record being copied is gone
        session = load_session(path)
        assert not session.problems and not session.truncated_tail


def test_a_live_writers_file_is_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "live.jsonl"
    log = AppendLog(path)
    log.append(b'{"kind":"header"}\n')
    size = path.stat().st_size
    assert size > 100  # reserved ahead, zero-filled
    assert repair(path) is False
    assert path.stat().st_size == size
    log.append(b'{"kind":"event"}\n')  # still writable: nothing moved under it
    log.close()
    assert path.read_bytes() == b'{"kind":"header"}\n{"kind":"event"}\n'
    assert repair(path) is False  # a clean file is not touched


def test_repair_drops_a_cut_record_and_finishes_a_whole_one(tmp_path: Path) -> None:
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(b'{"kind":"header"}\n{"kind":"chunk","da' + b"\x00" * 5000)
    assert repair(cut) is True
    assert cut.read_bytes() == b'{"kind":"header"}\n'
    whole = tmp_path / "whole.jsonl"
    whole.write_bytes(b'{"kind":"header"}\n{"kind":"event"}' + b"\x00" * 70_000)
    assert repair(whole) is True
    assert whole.read_bytes() == b'{"kind":"header"}\n{"kind":"event"}\n'
    zeros = tmp_path / "zeros.jsonl"
    zeros.write_bytes(b"\x00" * 200_000)
    assert repair(zeros) is True and not zeros.exists()
    long_line = tmp_path / "long.jsonl"
    body = b'{"kind":"header"}\n{"kind":"chunk","data":"' + b"x" * 200_000
    long_line.write_bytes(body + b"\x00" * 10)
    assert repair(long_line) is True and long_line.read_bytes() == b'{"kind":"header"}\n'
