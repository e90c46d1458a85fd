"""Bad targets are named before anything is measured, and nothing saved is lost."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from sparkcode.cli import app
from tests.sparkcode.bench.server import serve, url
from tests.support.engine import free_port


def test_a_dead_endpoint_is_named(tmp_path: Path) -> None:
    port = free_port()
    result = CliRunner().invoke(
        app,
        [
            "bench",
            "throughput",
            "--endpoint",
            f"http://127.0.0.1:{port}",
            "-o",
            str(tmp_path / "x"),
        ],
    )
    assert result.exit_code == 1
    assert f"cannot reach http://127.0.0.1:{port}/v1" in str(result.exception)


def test_a_server_without_prompt_logprobs_is_refused(tmp_path: Path) -> None:
    with serve(lambda body: "hi") as server:
        result = CliRunner().invoke(
            app,
            [
                "bench",
                "kld",
                "--endpoint",
                url(server),
                "--chunks",
                "1",
                "--chunk-tokens",
                "16",
                "--text",
                "code",
                "-o",
                str(tmp_path / "k"),
            ],
        )
    assert result.exit_code == 1
    assert "returned no prompt log-probabilities" in str(result.exception)


def test_a_missing_text_file_is_refused_before_any_request(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        ["bench", "kld", "--endpoint", "http://127.0.0.1:9", "--text", str(tmp_path / "gone.txt")],
    )
    assert result.exit_code == 1 and "gone.txt: no such file" in str(result.exception)


def test_model_options_must_match_the_endpoints() -> None:
    result = CliRunner().invoke(
        app,
        [
            "bench",
            "loops",
            "--endpoint",
            "http://a:1",
            "--endpoint",
            "http://b:1",
            "--model",
            "x",
            "--model",
            "y",
            "--model",
            "z",
        ],
    )
    assert "--model was given 3 times for 2 endpoints" in str(result.exception)


def test_a_negative_turn_is_refused_before_any_request() -> None:
    result = CliRunner().invoke(
        app, ["bench", "throughput", "--endpoint", "http://127.0.0.1:9", "--turn-tokens", "-5"]
    )
    assert result.exit_code == 1
    assert "--turn-tokens must be >= 0 (0: no turns), got -5" in str(result.exception)
