"""Connection resolution without an engine (MockTransport endpoints)."""

from __future__ import annotations

import httpx
import pytest

from engine.errors import UserError
from engine.paths import Paths
from sparkcode.agent import AgentSettings
from sparkcode.config import Config, load_config
from sparkcode.start import (
    Connection,
    EndpointError,
    SessionOptions,
    connect,
    resolve_target,
    session_settings,
)
from sparkcode.target import normalise_base_url


async def resolve_connection(
    *,
    endpoint: str | None = None,
    model: str | None = None,
    profile: str | None = None,
    config: Config | None = None,
    start_engine: bool = True,
    transport: httpx.AsyncBaseTransport | None = None,
) -> Connection:
    """What a front does: the start's one Target (``resolve_target``), then ``connect``."""
    conn, _ = await resolve_session(
        endpoint=endpoint,
        model=model,
        profile=profile,
        config=config,
        start_engine=start_engine,
        transport=transport,
    )
    return conn


async def resolve_session(
    *,
    endpoint: str | None = None,
    model: str | None = None,
    profile: str | None = None,
    config: Config | None = None,
    start_engine: bool = True,
    transport: httpx.AsyncBaseTransport | None = None,
) -> tuple[Connection, AgentSettings]:
    """The connection and the settings a session built on it gets (the builder's one
    overlay of the profile and ``config.toml``, with no choice of the start's own)."""
    paths = Paths.from_env()
    workspace = paths.data_dir
    workspace.mkdir(parents=True, exist_ok=True)
    config = config if config is not None else load_config(paths)
    start = resolve_target(
        workspace, paths, profile=profile, endpoint=endpoint, model=model, config=config
    )
    conn = await connect(start.target, paths, start_engine=start_engine, transport=transport)
    return conn, session_settings(start.config, conn, SessionOptions())


def models(*cards: tuple[str, int]) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v1/models"
        return httpx.Response(200, json={"data": [{"id": i, "max_model_len": n} for i, n in cards]})

    return httpx.MockTransport(handler)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("http://h:8000", "http://h:8000/v1"),
        ("http://h:8000/v1/", "http://h:8000/v1"),
        ("https://api.example.com/v1", "https://api.example.com/v1"),
    ],
)
def test_normalise_base_url(given: str, expected: str) -> None:
    assert normalise_base_url(given) == expected


def test_endpoint_must_be_http() -> None:
    with pytest.raises(UserError, match="must be an http"):
        normalise_base_url("localhost:8000")


async def test_endpoint_asks_models_for_name_and_context() -> None:
    conn, said = await resolve_session(
        endpoint="http://h:1", transport=models(("a", 4096), ("b", 8192))
    )
    assert (conn.base_url, conn.model, conn.max_model_len) == ("http://h:1/v1", "a", 4096)
    assert said.reasoning_effort == "low" and said.thinking_token_budget == 1536
    assert not conn.managed and conn.profile is None


async def test_named_model_must_exist() -> None:
    conn = await resolve_connection(
        endpoint="http://h:1", model="b", transport=models(("a", 1), ("b", 2))
    )
    assert conn.max_model_len == 2
    with pytest.raises(EndpointError, match="does not serve model 'c' .*a, b"):
        await resolve_connection(
            endpoint="http://h:1", model="c", transport=models(("a", 1), ("b", 2))
        )


async def test_config_overrides_profile_defaults() -> None:
    config = Config(reasoning_effort="high", thinking_token_budget=-1)
    _, said = await resolve_session(
        endpoint="http://h:1", config=config, transport=models(("a", 1))
    )
    assert said.reasoning_effort == "high" and said.thinking_token_budget == -1


async def test_endpoint_profile_uses_its_url_and_key_variable() -> None:
    paths = Paths.from_env()
    paths.profiles_dir.mkdir(parents=True)
    (paths.profiles_dir / "hosted.toml").write_text(
        '[profile]\nname = "hosted"\nkind = "endpoint"\n'
        '[endpoint]\nbase_url = "https://api.example.com/v1"\nmodel = "m"\n'
        'api_key_env = "EXAMPLE_KEY"\n[agent]\nthinking_token_budget = 512\n'
    )
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"data": [{"id": "m"}]})

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EXAMPLE_KEY", "secret")
        conn, said = await resolve_session(profile="hosted", transport=httpx.MockTransport(handler))
    assert conn.base_url == "https://api.example.com/v1" and conn.model == "m"
    assert conn.api_key_env == "EXAMPLE_KEY" and said.thinking_token_budget == 512
    assert seen[0].headers["authorization"] == "Bearer secret"
    assert "secret" not in repr(conn)


async def test_unreachable_endpoint() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused")

    with pytest.raises(EndpointError, match="cannot list the models at http://h:1/v1"):
        await resolve_connection(endpoint="http://h:1", transport=httpx.MockTransport(refuse))


async def test_stopped_engine_is_not_started_when_not_allowed() -> None:
    with pytest.raises(UserError, match="no engine is running"):
        await resolve_connection(profile="cpu-demo", start_engine=False)
