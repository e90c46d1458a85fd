"""The TUI's pure parts: command parsing, completion, status figures, launch options."""

from __future__ import annotations

import subprocess
import time
from dataclasses import replace
from pathlib import Path

import pytest
from textual.app import App, ComposeResult
from textual.widgets import Static

from engine.errors import UserError
from engine.paths import Paths
from engine.profiles import load_profile
from sparkcode.agent.core.events import MetricsUpdate, UsageUpdate
from sparkcode.tui.commands import CommandError, parse_command
from sparkcode.tui.completion import WorkspaceFiles, suggest_completion, unique_command
from sparkcode.tui.engine_control import ExternalEndpoint, ManagedEngine, pagemath_line
from sparkcode.tui.launch import LaunchOptions, build_app
from sparkcode.tui.stats import LiveStats, StatsTracker, format_stats, short_count
from sparkcode.tui.widgets import StatusBar
from tests.support import ROOT


def test_parse_command_validates_arguments() -> None:
    assert parse_command("/effort max").arg == "max"
    assert parse_command("  /budget 512 ").arg == "512"
    assert parse_command("/model").arg == ""
    for bad, why in [
        ("/effort extreme", "usage: /effort"),
        ("/budget -1", "usage: /budget"),
        ("/approve yolo", "usage: /approve"),
        ("/frobnicate", "unknown command"),
    ]:
        with pytest.raises(CommandError, match=why):
            parse_command(bad)


def test_completion_of_commands_arguments_and_paths(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "module.py").write_text("")
    (tmp_path / "pkg" / "mod.py").write_text("")
    (tmp_path / "node_modules").mkdir()
    (tmp_path / "node_modules" / "pkg.js").write_text("")
    files = WorkspaceFiles(tmp_path)

    def suggest(value: str) -> str | None:
        return suggest_completion(value, files)

    assert suggest("/und") == "/undo"
    assert suggest("/effort h") == "/effort high"
    assert suggest("/approve au") == "/approve auto-edit"
    assert suggest("/effort high now") is None
    assert suggest("fix @pkg/mo") == "fix @pkg/mod.py"  # the shortest match
    assert suggest("fix @pkg/modu") == "fix @pkg/module.py"
    assert suggest("fix @node") is None  # tool caches are not offered
    assert suggest("no mention") is None
    assert suggest("line one\nfix @pkg/modu") == "line one\nfix @pkg/module.py"


def test_enter_completes_only_what_one_command_or_choice_completes() -> None:
    assert unique_command("/und") == "/undo"
    assert unique_command("/effort hi ") == "/effort high"
    assert unique_command("/c") is None  # clear, compact, context: nothing is guessed
    assert unique_command("/undo") is None and unique_command("/effort high") is None
    assert unique_command("/effort huge") is None  # left to the usage error
    assert unique_command("/budget 9") is None  # no choices
    assert unique_command("/und\nmore") is None and unique_command("und") is None


def test_workspace_files_uses_git_and_respects_ignores(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / ".gitignore").write_text("build.log\n")
    (tmp_path / "build.log").write_text("")
    (tmp_path / "app.py").write_text("")
    files = WorkspaceFiles(tmp_path)
    assert files.files == [".gitignore", "app.py"]
    (tmp_path / "new.py").write_text("")
    assert "new.py" not in files.files  # cached until invalidated
    files.invalidate()
    assert "new.py" in files.files


def _usage(completion: int, decode: float | None, *, final: bool = False) -> UsageUpdate:
    return UsageUpdate(
        prompt_tokens=400,
        completion_tokens=completion,
        reasoning_tokens=0,
        ttft_s=0.5,
        decode_tok_s=decode,
        prefill_tok_s=800.0,
        context_used=400 + completion,
        context_limit=8192,
        final=final,
    )


def test_stats_tracker_follows_a_request_and_keeps_history() -> None:
    tracker = StatsTracker(history_len=2)
    assert tracker.request_started().streaming
    live = tracker.usage(_usage(10, 20.0))
    assert live.decode_tps == 20.0 and live.decode_history == (20.0,)
    live = tracker.usage(_usage(30, 25.0, final=True))
    assert not live.streaming and live.decode_history == (25.0,)
    tracker.request_started()
    tracker.usage(_usage(5, 30.0, final=True))
    tracker.request_started()
    live = tracker.usage(_usage(5, 35.0, final=True))
    assert live.decode_history == (30.0, 35.0)  # bounded
    live = tracker.metrics(
        MetricsUpdate(acceptance_length=2.5, prefix_cache_hit_rate=None, kv_cache_usage=0.25)
    )
    assert live.accept_len == 2.5 and live.kv_use == 0.25
    assert live.prefix_hit_rate is None  # unknown stays unknown
    assert tracker.reset_context().context_used == 0


def test_the_wait_for_a_first_token_is_shown_until_it_arrives() -> None:
    tracker = StatsTracker()
    live = tracker.request_started(now=100.0)
    assert live.waiting_since == 100.0
    assert "TTFT [i]waiting 3.5 s[/i]" in format_stats(live, now=103.5)
    live = tracker.usage(_usage(1, None))  # the first token: its TTFT replaces the wait
    assert live.waiting_since is None and "TTFT 0.50 s" in format_stats(live, now=200.0)
    tracker.request_started(now=300.0)
    assert tracker.output_started().waiting_since is None  # a server without usage
    tracker.request_started(now=400.0)
    assert tracker.turn_finished().waiting_since is None  # e.g. the engine went away


async def test_the_status_bar_counts_the_wait_up_with_no_events() -> None:
    class Host(App[None]):
        def compose(self) -> ComposeResult:
            yield StatusBar()

    app = Host()
    async with app.run_test(size=(120, 3)) as pilot:
        bar = app.query_one(StatusBar)
        bar.stats = StatsTracker().request_started(now=time.monotonic() - 2.0)
        await pilot.pause()
        first = str(bar.query_one("#status-figures", Static).render())
        await pilot.pause(StatusBar.WAIT_TICK_S * 2.5)
        later = str(bar.query_one("#status-figures", Static).render())
        assert "waiting 2." in first and "waiting" in later and later != first


def test_format_stats_shows_acceptance_only_when_drafting() -> None:
    base = LiveStats(
        decode_tps=31.25,
        prefill_tps=812.4,
        ttft_s=0.5,
        prefix_hit_rate=0.75,
        kv_use=0.031,
        context_used=1234,
        context_limit=8192,
    )
    text = format_stats(base)
    assert "decode [b]31.2[/b] tok/s" in text and "prefill 812 tok/s" in text
    assert "cache 75%" in text and "KV 3%" in text and "ctx 1.2k/8.2k" in text
    assert "accept" not in text
    assert "accept 2.40" in format_stats(base.merged(accept_len=2.4))
    assert short_count(999) == "999" and short_count(2_500_000) == "2.5M"


def test_build_app_resolves_endpoint_and_profile(tmp_path: Path, paths: Paths) -> None:
    app = build_app(
        LaunchOptions(workspace=tmp_path, endpoint="http://127.0.0.1:9/v1", model="m"), paths
    )
    assert isinstance(app.engine, ExternalEndpoint) and not app.settings.auto_start
    assert app.settings.endpoint == "http://127.0.0.1:9/v1"
    app = build_app(LaunchOptions(workspace=tmp_path, profile="cpu-demo"), paths)
    assert isinstance(app.engine, ManagedEngine) and app.settings.auto_start
    assert app.settings.model == "smollm2-135m-instruct"


def test_build_app_rejects_bad_input(tmp_path: Path, paths: Paths) -> None:
    with pytest.raises(UserError, match="not a directory"):
        build_app(LaunchOptions(workspace=tmp_path / "missing"), paths)
    with pytest.raises(UserError, match="unknown profile"):
        build_app(LaunchOptions(workspace=tmp_path, profile="nope"), paths)


def test_cli_reports_bad_workspace_in_one_line(tmp_path: Path) -> None:
    result = subprocess.run(
        [str(ROOT / ".venv/bin/sparkcode"), "--workspace", str(tmp_path / "missing")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert result.stderr.strip().splitlines() == [
        f"error: workspace {tmp_path / 'missing'} is not a directory"
    ]


def test_pagemath_line_only_for_hybrid_models(paths: Paths) -> None:
    glm = pagemath_line(load_profile("glm53-flash-spark", paths), paths)
    assert glm is not None and "multiples of" in glm
    assert pagemath_line(load_profile("cpu-demo", paths), paths) is None


def test_no_thinking_budget_is_sent_to_an_engine_without_a_reasoning_parser(
    paths: Paths, tmp_path: Path
) -> None:
    from sparkcode.start import budget_to_send
    from tests.support.tiny_models import write_profile

    write_profile(paths.config_dir, "bare", tmp_path, 8555)  # no reasoning parser/config
    bare = load_profile("bare", paths)
    assert budget_to_send(bare, True, 1536) == -1
    assert budget_to_send(load_profile("cpu-demo", paths), True, 1536) == 1536  # reasoning_config
    assert budget_to_send(load_profile("glm53-flash-spark", paths), True, 1536) == 1536
    assert budget_to_send(bare, False, 1536) == 1536  # not ours: the client drops it if refused
    assert budget_to_send(None, False, 1536) == 1536


def test_split_finished_never_cuts_inside_a_code_fence() -> None:
    from sparkcode.tui.widgets.chat import split_finished

    assert split_finished("para one\n\npara two") == ("para one\n\n", "para two")
    text = "intro\n\n```python\nx = 1\n\ny = 2\n"  # fence still open: blank line inside
    assert split_finished(text) == ("intro\n\n", "```python\nx = 1\n\ny = 2\n")
    closed = text + "```\n\nafter"
    assert split_finished(closed) == (text + "```\n\n", "after")
    assert split_finished("~~~\na\n\n~~~\n\n") == ("~~~\na\n\n~~~\n\n", "")
    assert split_finished("no blank line yet") == ("", "no blank line yet")


def test_engine_log_lines_are_compacted_for_the_panel() -> None:
    from sparkcode.tui.engine_control import compact_log_line

    assert (
        compact_log_line(
            "(APIServer pid=14169) INFO 11-30 03:16:42 [api_server.py:12] Starting vLLM API server"
        )
        == "INFO Starting vLLM API server"
    )
    assert compact_log_line("INFO:     Application startup complete.") == (
        "INFO Application startup complete."
    )
    assert compact_log_line("Traceback (most recent call last):") == (
        "Traceback (most recent call last):"
    )


def test_the_bar_shows_what_the_latest_request_prefilled() -> None:
    tracker = StatsTracker()
    tracker.request_started()
    live = tracker.usage(_usage(1, None))  # a server that reports no cached tokens
    assert live.prefilled is None and "prefilled" not in format_stats(live)
    cached = replace(_usage(3, 20.0, final=True), cached_tokens=384)
    live = tracker.usage(cached)
    assert live.prefilled == 16  # 400 prompt tokens, 384 served from the cache
    assert "[dim]· 16 prefilled[/dim]" in format_stats(live)
    tracker.request_started()
    live = tracker.usage(replace(_usage(1, None), prompt_tokens=9000, cached_tokens=1792))
    assert "· 7.2k prefilled" in format_stats(live)
