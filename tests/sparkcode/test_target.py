"""The product's one :class:`~sparkcode.target.Target`: endpoints, endpoint profiles,
and managed profiles reached through engine access (a stand-in engine, no vLLM)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.errors import EngineStateError, UserError
from engine.paths import Paths
from engine.profiles import LaunchSpec, load_profile
from engine.supervisor import Reuse, Supervisor
from sparkcode.start import resolve_target
from sparkcode.target import Target
from tests.support.engine import FAKE_ENGINE, free_port, stop_leftover_engine

FAKE = FAKE_ENGINE


@pytest.fixture(autouse=True)
def _no_leftover_engine(paths: Paths) -> Iterator[None]:
    yield
    stop_leftover_engine(paths)


@pytest.fixture
def fake_cpu_demo(paths: Paths) -> str:
    """A stand-in engine recorded as profile cpu-demo; its URL."""
    port = free_port()
    spec = LaunchSpec(
        profile="cpu-demo",
        argv=[sys.executable, FAKE, str(port)],
        env={},
        base_url=f"http://127.0.0.1:{port}/v1",
        model="served-demo",
        port=port,
    )
    Supervisor(paths).start(load_profile("cpu-demo", paths), spec, timeout=30)
    return spec.base_url


def test_an_endpoint_is_reached_as_it_is() -> None:
    target = Target.for_endpoint("http://h:8000/", "m", "KEY")
    assert (target.label, target.base_url, target.model, target.api_key_env) == (
        "http://h:8000/v1",
        "http://h:8000/v1",
        "m",
        "KEY",
    )
    assert not target.managed and target.reach(Paths.from_env()) is target
    with pytest.raises(UserError, match="--endpoint must be an http"):
        Target.for_endpoint("h:8000")


def test_an_endpoint_profile_is_rendered_not_started(paths: Paths) -> None:
    paths.profiles_dir.mkdir(parents=True)
    (paths.profiles_dir / "hosted.toml").write_text(
        '[profile]\nname = "hosted"\nkind = "endpoint"\n'
        '[endpoint]\nbase_url = "https://api.example.com/v1"\nmodel = "m"\n'
        'api_key_env = "EXAMPLE_KEY"\n'
    )
    target = Target.for_profile("hosted", paths, reuse=Reuse.NEVER)
    assert not target.managed
    assert target.base_url == ""  # not reached yet
    with target.opened(paths) as reached:
        assert (reached.label, reached.base_url, reached.model, reached.api_key_env) == (
            "hosted",
            "https://api.example.com/v1",
            "m",
            "EXAMPLE_KEY",
        )
        assert not reached.started
    assert Supervisor(paths).record() is None


def test_the_start_target_names_its_reuse_rule(tmp_path: Path, paths: Paths) -> None:
    named = resolve_target(tmp_path, paths, profile="cpu-demo").target
    assert named.managed and named.reuse is Reuse.SAME_PROFILE and named.label == "cpu-demo"
    default = resolve_target(tmp_path, paths).target
    assert default.reuse is Reuse.ANY
    endpoint = resolve_target(tmp_path, paths, endpoint="http://h:1", model="m").target
    assert (endpoint.base_url, endpoint.model, endpoint.profile) == ("http://h:1/v1", "m", None)


def test_a_managed_profile_takes_its_running_engine_and_leaves_it(
    paths: Paths, fake_cpu_demo: str
) -> None:
    target = Target.for_profile("cpu-demo", paths, reuse=Reuse.SAME_PROFILE)
    with target.opened(paths) as reached:
        assert reached.base_url == fake_cpu_demo and reached.model == "served-demo"
        assert reached.managed and not reached.started
    assert Supervisor(paths).status().state == "ready"  # reused, so left running
    with pytest.raises(
        EngineStateError,
        match=r"already running: pid \d+, profile cpu-demo, "
        r".*a rerun starts its own: stop it first",
    ):
        Target.for_profile("cpu-demo", paths, reuse=Reuse.NEVER).reach(
            paths, why="a rerun starts its own"
        )


def test_the_running_engine_is_taken_as_it_is(paths: Paths) -> None:
    with pytest.raises(EngineStateError, match="the managed engine is stopped"):
        Target.running_engine(paths)
    with pytest.raises(EngineStateError, match="no engine is running"):
        Target.for_profile("cpu-demo", paths, reuse=Reuse.ANY).reach(paths, start=False)
    assert Supervisor(paths).record() is None


def test_the_running_engine_brings_its_profile(paths: Paths, fake_cpu_demo: str) -> None:
    target = Target.running_engine(paths)
    assert (target.label, target.base_url, target.model) == (
        "cpu-demo",
        fake_cpu_demo,
        "served-demo",
    )
    assert target.profile is not None and target.profile.name == "cpu-demo"
