"""What a benchmark talks to: a profile (started and stopped by the supervisor, or
the engine already running it), an OpenAI-compatible endpoint, or the running
managed engine when nothing is named."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import httpx

from engine.errors import EngineStateError, UserError
from engine.paths import Paths
from engine.profiles import AgentKnobs, load_profile, render
from engine.supervisor import Supervisor
from sparkcode.agent._chat_types import ChatError, api_key_headers
from sparkcode.agent.settings import AgentSettings, settings_from
from sparkcode.sessions import engine_fingerprint

TargetKind = Literal["profile", "endpoint", "running"]


@dataclass(frozen=True)
class TargetSpec:
    """A target as the user named it (saved in the results, so ``--resume`` can
    reach it again)."""

    kind: TargetKind
    name: str
    """Profile name, endpoint URL, or ``running``."""
    model: str | None = None
    api_key_env: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TargetSpec:
        return cls(kind=data["kind"], name=data["name"], model=data.get("model"),
                   api_key_env=data.get("api_key_env"))


@dataclass
class LiveTarget:
    """A target that is up: where to send requests and what serves them."""

    label: str
    base_url: str
    """The API root, ending in ``/v1``."""
    model: str
    api_key_env: str | None
    agent: AgentSettings
    """The agent's settings the profile gives (its knobs over the defaults)."""
    max_model_len: int | None
    fingerprint: dict[str, Any] = field(default_factory=dict)

    @property
    def root_url(self) -> str:
        return self.base_url.removesuffix("/v1")

    def headers(self) -> dict[str, str]:
        try:
            return api_key_headers(self.api_key_env)
        except ChatError as exc:
            raise UserError(str(exc)) from None


def build_specs(profiles: list[str], endpoints: list[str], models: list[str],
                api_key_envs: list[str]) -> list[TargetSpec]:
    """Targets from the CLI options: profiles first, then endpoints.

    ``--model`` and ``--api-key-env`` pair with ``--endpoint`` by position; one
    value applies to every endpoint.
    """
    def per_endpoint(values: list[str], option: str) -> list[str | None]:
        if not values:
            return [None] * len(endpoints)
        if len(values) == 1:
            return [values[0]] * len(endpoints)
        if len(values) != len(endpoints):
            raise UserError(f"{option} was given {len(values)} times for {len(endpoints)} "
                            "endpoints: give it once (for all) or once per --endpoint")
        return list(values)

    if models and not endpoints:
        raise UserError("--model names the model of an --endpoint; a profile names its own")
    specs = [TargetSpec("profile", p) for p in profiles]
    for url, model, key in zip(endpoints, per_endpoint(models, "--model"),
                               per_endpoint(api_key_envs, "--api-key-env"), strict=True):
        if not url.startswith(("http://", "https://")):
            raise UserError(f"--endpoint must be an http(s) URL, got {url!r}")
        specs.append(TargetSpec("endpoint", url, model, key))
    return specs or [TargetSpec("running", "running")]


def _api_base(url: str) -> str:
    base = url.rstrip("/")
    return base if base.endswith("/v1") else base + "/v1"


def _models(base_url: str, headers: dict[str, str]) -> list[dict[str, Any]]:
    url = f"{base_url}/models"
    try:
        response = httpx.get(url, headers=headers, timeout=10.0)
    except httpx.TransportError as exc:
        raise UserError(f"cannot reach {base_url}: {type(exc).__name__}: {exc}") from None
    if response.status_code >= 400:
        raise UserError(f"{url} answered HTTP {response.status_code}: {response.text[:200]}")
    try:
        data = response.json()["data"]
        return [dict(m) for m in data]
    except (ValueError, KeyError, TypeError):
        raise UserError(f"{url} did not return an OpenAI model list") from None


def _live(label: str, base_url: str, model: str | None, api_key_env: str | None,
          agent: AgentKnobs, paths: Paths) -> LiveTarget:
    if api_key_env and not os.environ.get(api_key_env):
        raise UserError(f"environment variable {api_key_env} (the API key) is not set")
    headers = api_key_headers(api_key_env)
    cards = _models(base_url, headers)
    if not cards and model is None:
        raise UserError(f"{base_url}/models lists no model; pass --model")
    card = next((c for c in cards if c.get("id") == model), cards[0] if cards else {})
    chosen = model or str(card["id"])
    max_len = card.get("max_model_len")
    fingerprint = engine_fingerprint(base_url, paths, model=chosen)
    fingerprint["served_models"] = [c.get("id") for c in cards]
    try:
        version = httpx.get(base_url.removesuffix("/v1") + "/version", headers=headers,
                            timeout=5.0)
        if version.status_code == 200:
            fingerprint["server_version"] = version.json().get("version")
    except (httpx.HTTPError, ValueError):
        pass
    return LiveTarget(label=label, base_url=base_url, model=chosen, api_key_env=api_key_env,
                      agent=settings_from(agent),
                      max_model_len=max_len if isinstance(max_len, int) else None,
                      fingerprint=fingerprint)


@contextlib.contextmanager
def open_target(spec: TargetSpec, paths: Paths, *, label: str | None = None,
                on_phase: Callable[[str], None] | None = None,
                boot_timeout: float = 900.0) -> Iterator[LiveTarget]:
    """Bring ``spec`` up (starting its engine if needed), yield it, stop what was started."""
    supervisor = Supervisor(paths)
    if spec.kind == "endpoint":
        yield _live(label or spec.name, _api_base(spec.name), spec.model, spec.api_key_env,
                    AgentKnobs(), paths)
        return
    if spec.kind == "running":
        status = supervisor.status()
        if status.state != "ready" or status.base_url is None:
            raise EngineStateError(
                f"the managed engine is {status.state}: start it with `sparkcode engine start`, "
                "or name a target with --profile NAME or --endpoint URL")
        agent = AgentKnobs()
        if status.profile:
            with contextlib.suppress(UserError):
                agent = load_profile(status.profile, paths).agent
        yield _live(label or status.profile or status.base_url, status.base_url, status.model,
                    None, agent, paths)
        return
    profile = load_profile(spec.name, paths)
    lspec = render(profile, paths)
    if profile.kind == "endpoint":
        yield _live(label or spec.name, _api_base(lspec.base_url or ""), lspec.model,
                    lspec.api_key_env, profile.agent, paths)
        return
    status = supervisor.status()
    if status.state == "ready" and status.profile == profile.name and status.base_url:
        # The engine already runs this profile: measure it as it is and leave it running.
        yield _live(label or spec.name, status.base_url, status.model, None, profile.agent,
                    paths)
        return
    if status.state not in ("stopped", "crashed"):
        raise EngineStateError(
            f"an engine is already running profile {status.profile}; --profile {spec.name} "
            "starts its own engine: stop it first with `sparkcode engine stop`, or benchmark "
            "the running one by naming its profile")
    from engine.models import prepare_model

    prepare_model(profile, paths, progress=on_phase or (lambda _msg: None))
    started = supervisor.start(profile, lspec, timeout=boot_timeout, on_phase=on_phase)
    try:
        assert started.base_url is not None
        yield _live(label or spec.name, started.base_url, started.model, None, profile.agent,
                    paths)
    finally:
        with contextlib.suppress(EngineStateError):
            supervisor.stop()


def unique_labels(specs: list[TargetSpec]) -> list[str]:
    """One label per target; a target named twice gets ``#2``, ``#3``..."""
    seen: dict[str, int] = {}
    out = []
    for spec in specs:
        base = spec.name if spec.kind != "endpoint" or not spec.model \
            else f"{spec.name} ({spec.model})"
        seen[base] = seen.get(base, 0) + 1
        out.append(base if seen[base] == 1 else f"{base}#{seen[base]}")
    return out
