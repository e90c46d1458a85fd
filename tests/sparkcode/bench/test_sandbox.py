"""The sandbox contains samples that loop, allocate, write outside, open sockets."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest

from sparkcode.bench import Limits, isolation, run_program

FAST = Limits(cpu_s=1, wall_s=3.0)


def test_a_passing_and_a_failing_program() -> None:
    ok = run_program("print('hello')")
    assert ok.status == "passed" and ok.stdout == "hello\n"
    bad = run_program("assert 1 == 2, 'nope'")
    assert bad.status == "failed" and "AssertionError: nope" in bad.stderr


def test_an_endless_loop_is_stopped_by_the_cpu_limit() -> None:
    # A wall limit far beyond the CPU limit, so that on a loaded machine (the loop gets
    # half a core or less) it is still the CPU limit that stops it: an exit status
    # (SIGXCPU or the hard limit's SIGKILL), where the wall clock leaves none.
    began = time.monotonic()
    out = run_program("while True:\n    pass", Limits(cpu_s=1, wall_s=60))
    assert out.status == "timeout" and out.returncode is not None
    assert time.monotonic() - began < 30


def test_a_sleeping_sample_is_stopped_by_the_wall_timeout() -> None:
    # A sleeper spends no CPU, so only the wall clock can stop it. The bound is far below
    # the sleep and far above the 1.5 s limit: a clean-clone run with two engines spinning
    # both cores once took over 5 s to start and reap the sandbox.
    out = run_program("import time\ntime.sleep(600)", Limits(cpu_s=2, wall_s=1.5))
    assert out.status == "timeout" and out.returncode is None  # the wall clock, not SIGXCPU
    assert 1.5 <= out.wall_s < 60


def test_a_huge_allocation_fails_inside_the_sample() -> None:
    out = run_program("x = bytearray(8 << 30)\nprint('allocated')", FAST)
    assert out.status == "failed" and "MemoryError" in out.stderr
    assert "allocated" not in out.stdout


def test_writes_outside_the_sample_directory_are_refused(tmp_path: Path) -> None:
    tmp_path.chmod(0o777)  # even a world-writable directory
    outside = tmp_path / "escaped.txt"
    for code in (
        f"open({str(outside)!r}, 'w').write('x')",
        f"import os\nos.open({str(outside)!r}, os.O_CREAT | os.O_WRONLY)",
        f"import shutil\nshutil.rmtree({str(tmp_path)!r})",
        f"import pathlib\npathlib.Path({str(outside)!r}).write_text('x')",
        "import ctypes\nctypes.CDLL(None).fopen(b'/tmp/escaped-ctypes', b'w')",
    ):
        out = run_program(code, FAST)
        assert out.status == "failed", code
        assert "sandbox" in out.stderr, out.stderr
    assert not outside.exists() and tmp_path.exists()
    assert not Path("/tmp/escaped-ctypes").exists()
    inside = run_program("open('mine.txt', 'w').write('ok')\nprint(open('mine.txt').read())")
    assert inside.status == "passed" and inside.stdout == "ok\n"


def test_sockets_are_refused_and_reach_nothing() -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(3.0)
    port = listener.getsockname()[1]
    accepted: list[object] = []

    def accept() -> None:
        try:
            accepted.append(listener.accept())
        except OSError:
            pass

    thread = threading.Thread(target=accept)
    thread.start()
    out = run_program(
        f"import socket\ns = socket.create_connection(('127.0.0.1', {port}))\ns.sendall(b'leak')",
        FAST,
    )
    thread.join()
    listener.close()
    assert out.status == "failed" and "sandbox: socket" in out.stderr
    assert accepted == []


@pytest.mark.skipif(not isolation()["netns"], reason="no network namespaces here")
def test_the_sample_has_a_network_namespace_of_its_own() -> None:
    # Native code can get past an audit hook; the namespace has nothing but loopback.
    host = Path("/proc/self/net/dev").read_text()
    out = run_program("print(open('/proc/self/net/dev').read())", FAST)
    interfaces = [line.split(":")[0].strip() for line in out.stdout.splitlines() if ":" in line]
    assert out.status == "passed" and interfaces == ["lo"], out.stdout
    assert len(host.splitlines()) > 3  # the host has more than loopback


def test_endless_output_is_capped() -> None:
    out = run_program("while True:\n    print('y' * 1000)", FAST)
    assert out.status in ("failed", "timeout")
    assert len(out.stdout) <= 16_384


def test_isolation_says_what_holds() -> None:
    layers = isolation()
    assert layers["audit_hook"] and layers["rlimits"]
    if not layers["netns"]:
        assert any("unshare" in note for note in layers["notes"])
