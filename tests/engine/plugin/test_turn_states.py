"""The ``turn_states`` feature installs only over the vLLM source it was checked on."""

from __future__ import annotations

import pytest

from engine.plugin import turn_states
from engine.plugin._registry import FEATURE_MARK


def _method() -> object:
    from vllm.v1.core.single_type_kv_cache_manager import MambaManager

    return MambaManager.__dict__[turn_states.METHOD]


def test_it_wraps_the_known_method_and_reverts() -> None:
    original = _method()
    try:
        result = turn_states.apply()
        assert result.outcome == "applied", result.detail
        assert getattr(_method(), FEATURE_MARK, None) == turn_states.NAME
        assert turn_states.apply().detail == "already in place"
    finally:
        turn_states.revert()
    assert _method() is original


def test_an_unknown_source_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(turn_states, "KNOWN", {})
    original = _method()
    result = turn_states.apply()
    assert result.outcome == "not applied"
    assert "matches no known one" in result.detail and "not bounded" in result.detail
    assert _method() is original


@pytest.mark.parametrize(("raw", "limit"), [("", 8), ("3", 3), ("0", 1), ("x", 8)])
def test_the_limit_comes_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, raw: str, limit: int
) -> None:
    monkeypatch.setenv(turn_states.ENV, raw)
    assert turn_states.kept_limit() == limit
