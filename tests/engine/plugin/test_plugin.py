"""The sparkcode vLLM plugin: loading, version guard, idempotency, registry."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import entry_points

import pytest

import engine.plugin as plugin
from engine.plugin import _registry, scheduler_fix
from engine.plugin._fingerprint import fingerprint, fingerprint_source
from engine.profiles._schema import PLUGIN_FEATURES


@pytest.fixture(autouse=True)
def clean_plugin_state() -> object:
    """Each test starts with vLLM untouched and no memoised feature runs."""
    plugin._DONE.clear()
    scheduler_fix.revert()
    yield
    plugin._DONE.clear()
    scheduler_fix.revert()


def vllm_method() -> object:
    from vllm.v1.core.sched.scheduler import Scheduler

    return Scheduler.__dict__["_mamba_block_aligned_split"]


def test_entry_point_is_installed() -> None:
    (ep,) = [e for e in entry_points(group="vllm.general_plugins") if e.name == "sparkcode"]
    assert ep.value == "engine.plugin:register"
    assert ep.load() is plugin.register


def test_every_registered_feature_is_a_profile_feature() -> None:
    assert set(plugin.FEATURES) <= set(PLUGIN_FEATURES)


def test_installed_vllm_has_a_known_fingerprint() -> None:
    assert fingerprint(vllm_method()) in scheduler_fix.KNOWN_UNFIXED  # type: ignore[arg-type]


def test_empty_feature_list_patches_nothing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    before = vllm_method()
    for value in ("", " , ,"):
        monkeypatch.setenv(plugin.ENV_FEATURES, value)
        plugin.register()
    monkeypatch.delenv(plugin.ENV_FEATURES)
    plugin.register()
    assert vllm_method() is before
    assert "[sparkcode-plugin]" not in capsys.readouterr().err


def test_register_applies_and_logs_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(plugin.ENV_FEATURES, "scheduler_fix")
    plugin.register()
    assert scheduler_fix.is_applied()
    lines = [x for x in capsys.readouterr().err.splitlines() if x.startswith("[sparkcode-plugin]")]
    assert lines == [
        "[sparkcode-plugin] scheduler_fix: applied (vLLM 0.32.0: prefill chunks align to "
        "the Mamba group's block, fingerprint 5d9573a0a1278ae1)"
    ]


def test_loading_twice_is_harmless(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(plugin.ENV_FEATURES, "scheduler_fix,scheduler_fix")
    original = vllm_method()
    plugin.register()
    patched = vllm_method()
    plugin.register()
    assert vllm_method() is patched is not original
    # A direct second apply() sees its own function and leaves it alone.
    again = scheduler_fix.apply()
    assert again.outcome == "applied" and "already in place" in again.detail
    assert vllm_method() is patched
    from vllm.v1.core.sched.scheduler import Scheduler

    inner = getattr(Scheduler.__init__, "__wrapped__", None)
    assert inner is not None
    assert getattr(inner, "__wrapped__", None) is None  # wrapped once only
    err = capsys.readouterr().err
    assert err.count("[sparkcode-plugin] scheduler_fix: applied") == 1
    scheduler_fix.revert()
    assert vllm_method() is original


def test_unknown_fingerprint_refuses_loudly_and_leaves_vllm_untouched(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from vllm.v1.core.sched.scheduler import Scheduler

    monkeypatch.setattr(scheduler_fix, "KNOWN_UNFIXED", {"0000000000000000": "9.9.9"})
    original, init = vllm_method(), Scheduler.__init__
    monkeypatch.setenv(plugin.ENV_FEATURES, "scheduler_fix")
    plugin.register()
    assert vllm_method() is original and Scheduler.__init__ is init
    err = capsys.readouterr().err
    assert (
        "[sparkcode-plugin] scheduler_fix: not applied (unknown vLLM 0.32.0: source "
        "fingerprint 5d9573a0a1278ae1 of Scheduler._mamba_block_aligned_split matches no known"
    ) in err


def test_already_fixed_source_is_not_patched(monkeypatch: pytest.MonkeyPatch) -> None:
    current = fingerprint(vllm_method())  # type: ignore[arg-type]
    monkeypatch.setattr(scheduler_fix, "KNOWN_FIXED", {current: "upstream"})
    result = scheduler_fix.apply()
    assert result.outcome == "not needed" and result.ok
    assert not scheduler_fix.is_applied()


def test_unknown_and_unimplemented_features_are_reported_not_raised(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(_registry.FEATURES, "exploding", "engine.plugin._no_such_module:apply")
    lines: list[str] = []
    results = plugin.run_features(("kv_offload", "exploding", "scheduler_fix"), emit=lines.append)
    assert [r.outcome for r in results] == ["not available", "failed", "applied"]
    assert lines[0] == (
        "[sparkcode-plugin] kv_offload: not available (this sparkcode build has no such feature)"
    )
    assert lines[1].startswith("[sparkcode-plugin] exploding: failed (ModuleNotFoundError")
    assert scheduler_fix.is_applied()  # a broken feature does not stop the others


def test_a_feature_that_raises_never_reaches_vllm(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom() -> None:
        raise RuntimeError("kaput")

    monkeypatch.setattr(scheduler_fix, "apply", boom)
    (result,) = plugin.run_features(("scheduler_fix",), emit=lambda line: None)
    assert result.outcome == "failed" and "RuntimeError: kaput" in result.detail


def test_register_feature_rejects_a_bad_target() -> None:
    with pytest.raises(ValueError, match="module:function"):
        plugin.register_feature("fp4_pool", "engine.plugin.fp4_pool")


def test_scheduler_report_for_a_model_without_mamba_layers() -> None:
    from types import SimpleNamespace

    result = scheduler_fix.describe_scheduler(SimpleNamespace(need_mamba_block_aligned_split=False))
    assert result.outcome == "inactive" and "nothing to fix" in result.line()


# -- fingerprints ---------------------------------------------------------------------------

SOURCE = '''
def f(a, b):
    """Doc."""
    # a comment
    c = a + b
    return c
'''


def test_fingerprint_ignores_comments_docstring_and_wrapping() -> None:
    reformatted = "def f(a,\n      b):\n    c = a + b  # why\n\n\n    return c\n"
    decorated = "@something\n" + SOURCE.strip() + "\n"
    assert fingerprint_source(SOURCE) == fingerprint_source(reformatted)
    assert fingerprint_source(SOURCE) == fingerprint_source(decorated)


def test_fingerprint_sees_code_changes() -> None:
    assert fingerprint_source(SOURCE) != fingerprint_source(SOURCE.replace("a + b", "a - b"))
    assert fingerprint_source(SOURCE) != fingerprint_source(SOURCE.replace("c = a", "d = a"))


# -- the real loading path --------------------------------------------------------------------


def test_vllm_loads_the_plugin_through_its_entry_point() -> None:
    """vLLM's own load_general_plugins() in a fresh process, as the engine core runs it."""
    code = (
        "from vllm.plugins import load_general_plugins\n"
        "load_general_plugins()\n"
        "from engine.plugin import scheduler_fix\n"
        "print('APPLIED', scheduler_fix.is_applied())\n"
    )
    env = {**os.environ, "VLLM_PLUGINS": "sparkcode", "SPARKCODE_PLUGIN_FEATURES": "scheduler_fix"}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "APPLIED True" in done.stdout
    assert "[sparkcode-plugin] scheduler_fix: applied (vLLM 0.32.0" in done.stderr


def test_async_scheduler_inherits_the_fix() -> None:
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler

    assert "_mamba_block_aligned_split" not in AsyncScheduler.__dict__
    scheduler_fix.apply()
    assert getattr(AsyncScheduler._mamba_block_aligned_split, "__sparkcode_feature__", None) == (
        "scheduler_fix"
    )
