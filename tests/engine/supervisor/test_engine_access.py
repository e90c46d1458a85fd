"""Engine access (``engine.supervisor._access``) against a stand-in engine (fast, no vLLM):
the three reuse rules, stopping only what was started, and the refusals' wording."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from engine.errors import EngineStateError
from engine.paths import Paths
from engine.profiles import LaunchSpec, Profile
from engine.supervisor import (
    Reuse,
    Supervisor,
    attach,
    ensure_idle,
    ensure_running,
    running,
    stop_started,
)
from tests.support.engine import FAKE_ENGINE, free_port, stop_leftover_engine

FAKE = FAKE_ENGINE


@pytest.fixture(autouse=True)
def _no_leftover_engine(paths: Paths) -> Iterator[None]:
    yield
    stop_leftover_engine(paths)


def _profile(name: str = "fake") -> Profile:
    return Profile(name=name, kind="vllm", description="", source=Path(f"{name}.toml"))


def _spec(name: str = "fake", *flags: str) -> LaunchSpec:
    port = free_port()
    return LaunchSpec(
        profile=name,
        argv=[sys.executable, FAKE, str(port), *flags],
        env={},
        base_url=f"http://127.0.0.1:{port}/v1",
        model=name,
        port=port,
    )


def test_starts_when_nothing_runs_then_any_reuses_it(paths: Paths) -> None:
    said: list[str] = []
    first = ensure_running(
        _profile(),
        paths,
        reuse=Reuse.ANY,
        spec=_spec(),
        prepare=False,
        timeout=30,
        progress=said.append,
    )
    assert first.started and first.status.state == "ready" and first.model == "fake"
    assert said == [f"starting engine fake on {first.base_url} ..."]
    # Any engine will do, even one of another profile: it is used as it is.
    again = ensure_running(
        _profile("other"), paths, reuse=Reuse.ANY, spec=_spec("other"), prepare=False, timeout=30
    )
    assert not again.started and again.status.pid == first.status.pid
    assert again.status.profile == "fake"


def test_same_profile_reuses_its_own_and_refuses_another(paths: Paths) -> None:
    first = ensure_running(
        _profile(), paths, reuse=Reuse.SAME_PROFILE, spec=_spec(), prepare=False, timeout=30
    )
    same = ensure_running(
        _profile(), paths, reuse=Reuse.SAME_PROFILE, spec=_spec(), prepare=False, timeout=30
    )
    assert not same.started and same.status.pid == first.status.pid
    with pytest.raises(EngineStateError) as info:
        ensure_running(
            _profile("other"),
            paths,
            reuse=Reuse.SAME_PROFILE,
            spec=_spec("other"),
            prepare=False,
            timeout=30,
            why="--profile other starts its own engine",
        )
    assert str(info.value) == (
        f"an engine is already running: pid {first.status.pid}, profile fake, "
        f"{first.base_url}; --profile other starts its own engine: stop it first with "
        "`sparkcode engine stop`, or use the running one with --profile fake"
    )


def test_never_refuses_any_running_engine_and_says_why(paths: Paths) -> None:
    first = ensure_running(
        _profile(), paths, reuse=Reuse.NEVER, spec=_spec(), prepare=False, timeout=30
    )
    assert first.started
    with pytest.raises(EngineStateError) as info:
        ensure_running(
            _profile(),
            paths,
            reuse=Reuse.NEVER,
            spec=_spec(),
            prepare=False,
            timeout=30,
            why="a rerun starts each configuration itself",
        )
    assert str(info.value) == (
        f"an engine is already running: pid {first.status.pid}, profile fake, "
        f"{first.base_url}; a rerun starts each configuration itself: stop it first with "
        "`sparkcode engine stop`"
    )
    # The supervisor's own refusal (a start that raced past the check) reads the same.
    with pytest.raises(EngineStateError) as raced:
        Supervisor(paths).start(_profile(), _spec(), timeout=30)
    assert str(raced.value) == (
        f"an engine is already running: pid {first.status.pid}, profile fake, "
        f"{first.base_url}; stop it first with `sparkcode engine stop`"
    )


def test_start_false_only_takes_what_runs(paths: Paths) -> None:
    with pytest.raises(
        EngineStateError,
        match=r"^no engine is running; start one with "
        r"`sparkcode engine start`$",
    ):
        ensure_running(_profile(), paths, reuse=Reuse.ANY, start=False, spec=_spec(), prepare=False)
    assert Supervisor(paths).record() is None  # nothing was launched


def test_a_booting_engine_is_waited_for(paths: Paths) -> None:
    # Booting for 5 s more: on a loaded CI box the stand-in was once healthy before
    # the status was read.
    launched = ensure_running(
        _profile(),
        paths,
        reuse=Reuse.NEVER,
        spec=_spec("fake", "--healthy-after", "5"),
        prepare=False,
        wait=False,
    )
    assert launched.started and launched.status.state == "booting"
    said: list[str] = []
    phases: list[str] = []
    ready = ensure_running(
        _profile(),
        paths,
        reuse=Reuse.SAME_PROFILE,
        spec=_spec(),
        prepare=False,
        timeout=30,
        progress=said.append,
        on_phase=phases.append,
    )
    assert not ready.started and ready.status.state == "ready"
    assert ready.status.pid == launched.status.pid
    assert said == ["waiting for the engine (fake) to become ready ..."]
    assert phases[-1] == "ready"


def test_a_crashed_engine_is_cleared_and_replaced(paths: Paths) -> None:
    sup = Supervisor(paths)
    with pytest.raises(EngineStateError, match="exited during boot with code 7"):
        ensure_running(
            _profile(),
            paths,
            reuse=Reuse.NEVER,
            spec=_spec("fake", "--crash-after", "0.1", "--code", "7"),
            prepare=False,
            timeout=30,
        )
    assert sup.status().state == "crashed"
    said: list[str] = []
    handle = ensure_running(
        _profile(),
        paths,
        reuse=Reuse.NEVER,
        spec=_spec(),
        prepare=False,
        timeout=30,
        progress=said.append,
    )
    assert handle.started and sup.status().state == "ready"
    assert said[0] == "the last engine crashed (exit code 7); starting a new one"


def test_running_stops_only_what_it_started(paths: Paths) -> None:
    sup = Supervisor(paths)
    with running(_profile(), paths, spec=_spec(), prepare=False, timeout=30) as mine:
        assert mine.started and sup.status().state == "ready"
        # A block that reuses the engine leaves it running at its end.
        with running(
            _profile(), paths, reuse=Reuse.SAME_PROFILE, spec=_spec(), prepare=False, timeout=30
        ) as reused:
            assert not reused.started and reused.status.pid == mine.status.pid
        assert sup.status().state == "ready"
    assert sup.status().state == "stopped"


def test_running_stops_its_engine_when_the_block_fails(paths: Paths) -> None:
    sup = Supervisor(paths)
    with (
        pytest.raises(RuntimeError, match="the block failed"),
        running(_profile(), paths, spec=_spec(), prepare=False, timeout=30),
    ):
        raise RuntimeError("the block failed")
    assert sup.status().state == "stopped" and sup.record() is None


@pytest.mark.parametrize(
    ("flags", "timeout", "error"),
    [
        (("--crash-after", "0.1"), 30, "exited during boot"),
        (("--never-healthy",), 1, "not healthy after 1s"),
    ],
)
def test_running_stops_an_engine_whose_boot_failed(
    paths: Paths, flags: tuple[str, ...], timeout: float, error: str
) -> None:
    with (
        pytest.raises(EngineStateError, match=error),
        running(_profile(), paths, spec=_spec("fake", *flags), prepare=False, timeout=timeout),
    ):
        pytest.fail("the block must not run")
    assert Supervisor(paths).record() is None


def test_running_leaves_the_engine_that_refused_it(paths: Paths) -> None:
    theirs = ensure_running(
        _profile(), paths, reuse=Reuse.NEVER, spec=_spec(), prepare=False, timeout=30
    )
    with (
        pytest.raises(EngineStateError, match="already running"),
        running(_profile(), paths, spec=_spec(), prepare=False, timeout=30),
    ):
        pytest.fail("the block must not run")
    assert Supervisor(paths).status().pid == theirs.status.pid


def test_an_endpoint_profile_has_no_engine_to_start(paths: Paths) -> None:
    hosted = Profile(
        name="hosted",
        kind="endpoint",
        description="",
        source=Path("h.toml"),
        base_url="https://api.example.com/v1",
    )
    with pytest.raises(EngineStateError) as info:
        ensure_running(hosted, paths, reuse=Reuse.ANY)
    assert str(info.value) == (
        "profile hosted is an endpoint (https://api.example.com/v1); there is no engine to start"
    )


def test_an_engine_replaced_meanwhile_is_not_stopped(paths: Paths) -> None:
    sup = Supervisor(paths)
    mine = ensure_running(
        _profile(), paths, reuse=Reuse.NEVER, spec=_spec(), prepare=False, timeout=30
    )
    sup.stop(grace=(2, 2))  # someone stopped it and started another
    theirs = ensure_running(
        _profile("theirs"),
        paths,
        reuse=Reuse.NEVER,
        spec=_spec("theirs"),
        prepare=False,
        timeout=30,
    )
    assert not stop_started(paths, mine)
    assert sup.status().state == "ready" and sup.status().pid == theirs.status.pid
    assert not stop_started(
        paths,
        ensure_running(_profile("theirs"), paths, reuse=Reuse.ANY, spec=_spec(), prepare=False),
    )  # reused
    assert stop_started(paths, theirs) and sup.status().state == "stopped"


def test_attach_takes_the_ready_engine_or_says_what_it_is(paths: Paths) -> None:
    with pytest.raises(EngineStateError) as info:
        attach(paths)
    assert str(info.value) == (
        "the managed engine is stopped; start it with `sparkcode engine start`, or name a "
        "target with --profile NAME or --endpoint URL"
    )
    handle = ensure_running(
        _profile(), paths, reuse=Reuse.NEVER, spec=_spec(), prepare=False, timeout=30
    )
    status = attach(paths)
    assert status.pid == handle.status.pid and status.base_url == handle.base_url


def test_ensure_idle_names_the_engine_in_the_way(paths: Paths) -> None:
    ensure_idle(paths, "the capture needs the machine")  # nothing runs: no error
    handle = ensure_running(
        _profile(), paths, reuse=Reuse.NEVER, spec=_spec(), prepare=False, timeout=30
    )
    with pytest.raises(EngineStateError) as info:
        ensure_idle(paths, "the capture needs the machine to itself")
    assert str(info.value) == (
        f"an engine is already running: pid {handle.status.pid}, profile fake, "
        f"{handle.base_url}; the capture needs the machine to itself: stop it first with "
        "`sparkcode engine stop`"
    )


def test_reuse_rules_are_named_as_the_docs_name_them() -> None:
    assert [rule.value for rule in Reuse] == ["any", "same-profile", "never"]


def test_engine_start_is_one_call_and_refuses_a_second(
    paths: Paths, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``sparkcode engine start`` through engine access, the stand-in engine as its launch."""
    import engine.models
    from engine.supervisor import _access
    from sparkcode.cli import app

    spec = _spec("cpu-demo")
    monkeypatch.setattr(_access, "render", lambda profile, paths, port=None: spec)
    monkeypatch.setattr(engine.models, "prepare_model", lambda *args, **kwargs: None)
    runner = CliRunner()
    first = runner.invoke(app, ["engine", "start", "--profile", "cpu-demo"])
    assert first.exit_code == 0, first.output
    status = Supervisor(paths).status()
    assert f"starting engine cpu-demo on {spec.base_url} ..." in first.output
    assert f"ready: cpu-demo at {spec.base_url} (pid {status.pid}," in first.output
    second = runner.invoke(app, ["engine", "start", "--profile", "cpu-demo"])
    assert isinstance(second.exception, EngineStateError)
    assert str(second.exception) == (
        f"an engine is already running: pid {status.pid}, profile cpu-demo, {spec.base_url}; "
        "stop it first with `sparkcode engine stop`"
    )
