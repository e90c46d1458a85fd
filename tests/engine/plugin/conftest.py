"""Fixtures for the scheduler-fix proofs: a model config dir and fix on/off."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.hybrid import write_model_config


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_model_config(tmp_path_factory.mktemp("schedfix-model"))


@pytest.fixture
def fixed() -> Iterator[None]:
    """vLLM's Scheduler with the scheduler_fix feature applied (reverted after)."""
    from engine.plugin import scheduler_fix

    result = scheduler_fix.apply()
    assert result.outcome == "applied", result.line()
    try:
        yield
    finally:
        scheduler_fix.revert()


@pytest.fixture
def unfixed() -> None:
    """vLLM's Scheduler exactly as installed."""
    from engine.plugin import scheduler_fix

    scheduler_fix.revert()
    assert not scheduler_fix.is_applied()
