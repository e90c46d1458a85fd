"""What the agent talks to: an explicit endpoint, an endpoint profile, or a
managed local engine (started here when it is not running).

:func:`connect` reaches a start's :class:`~sparkcode.target.Target` (from
:func:`~sparkcode.start.resolve_target`) and returns a :class:`Connection` with the
base URL, the model (asked from ``/v1/models`` when not given), the name of the
environment variable holding the API key (the key itself is read at request time and
never stored), the engine's ``max_model_len`` and the loaded profile. The agent's
settings are not here: the session builder lays the profile, ``config.toml`` and the
start over the defaults once (:func:`~sparkcode.start.session_settings`).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import httpx

from engine.errors import UserError
from engine.paths import Paths
from engine.profiles import Profile

from ..agent.wire.client import ChatClient, ChatError
from ..target import Progress, Target


class EndpointError(UserError):
    """The server cannot be reached, or serves no (such) model."""


@dataclass(frozen=True)
class Connection:
    """A resolved OpenAI-compatible server and the agent's defaults for it."""

    base_url: str
    """Ends in ``/v1``."""
    model: str
    api_key_env: str | None
    max_model_len: int | None
    profile: str | None = None
    """The profile used, None for ``--endpoint``."""
    managed: bool = False
    """True when sparkcode supervises the engine (a local vllm profile)."""
    profile_spec: Profile | None = None
    """The loaded profile (its agent defaults: sampling, thinking history)."""

    def client(self, transport: httpx.AsyncBaseTransport | None = None) -> ChatClient:
        return ChatClient(self.base_url, self.model, self.api_key_env, transport=transport)


async def connect(
    target: Target,
    paths: Paths,
    *,
    start_engine: bool = True,
    progress: Progress | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
) -> Connection:
    """Reach ``target`` (booting its managed engine when allowed) and ask ``/v1/models``."""
    say = progress or (lambda _msg: None)
    reached = target
    if not target.base_url:
        reached = await asyncio.to_thread(
            target.reach, paths, start=start_engine, progress=say, on_phase=lambda p: say(f"  {p}")
        )
    return await _finish(
        reached.base_url,
        reached.model,
        reached.api_key_env,
        reached.profile,
        reached.managed,
        transport,
    )


def budget_to_send(prof: Profile | None, managed: bool, budget: int) -> int:
    """The thinking budget to send; -1 (not sent) when our own engine cannot honour it.

    vLLM rejects ``thinking_token_budget`` mid-stream when it runs without a
    reasoning parser or config, and every turn would fail; an endpoint we do
    not run is left to the client's drop-and-retry.
    """
    if (
        managed
        and prof is not None
        and prof.reasoning_parser is None
        and prof.reasoning_config is None
    ):
        return -1
    return budget


async def _finish(
    base: str,
    model: str | None,
    api_key_env: str | None,
    prof: Profile | None,
    managed: bool,
    transport: httpx.AsyncBaseTransport | None,
) -> Connection:
    client = ChatClient(base, model or "", api_key_env, transport=transport)
    try:
        cards = await client.list_models()
    except ChatError as exc:
        raise EndpointError(f"cannot list the models at {base}: {exc}") from None
    finally:
        await client.aclose()
    if not cards:
        raise EndpointError(f"{base} serves no model")
    if model is None:
        card = cards[0]
    else:
        found = [c for c in cards if c.id == model]
        if not found:
            known = ", ".join(c.id for c in cards)
            raise EndpointError(f"{base} does not serve model {model!r} (it serves: {known})")
        card = found[0]
    return Connection(
        base_url=base,
        model=card.id,
        api_key_env=api_key_env,
        max_model_len=card.max_model_len,
        profile=prof.name if prof is not None else None,
        managed=managed,
        profile_spec=prof,
    )


__all__ = ["Connection", "EndpointError", "budget_to_send", "connect"]
