"""What a benchmark talks to: a profile (its own engine started and stopped through
engine access, or the engine already running it), an OpenAI-compatible endpoint, or the
running managed engine when nothing is named; each reached as a
:class:`sparkcode.target.Target`."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import httpx

from engine.errors import UserError
from engine.paths import Paths
from engine.profiles import AgentKnobs
from engine.supervisor import Reuse
from sparkcode.agent import ChatError, api_key_headers
from sparkcode.agent.core.settings import AgentSettings, settings_from
from sparkcode.sessions import engine_fingerprint
from sparkcode.target import Target

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
        return cls(
            kind=data["kind"],
            name=data["name"],
            model=data.get("model"),
            api_key_env=data.get("api_key_env"),
        )

    def target(self, paths: Paths, *, label: str | None = None) -> Target:
        """What this names, as every front names it (:mod:`sparkcode.target`); the
        running engine is taken as it is now."""
        if self.kind == "endpoint":
            return Target.for_endpoint(
                self.name, self.model, self.api_key_env, label=label or self.name
            )
        if self.kind == "running":
            return Target.running_engine(paths, label=label)
        return Target.for_profile(
            self.name, paths, reuse=Reuse.SAME_PROFILE, label=label or self.name
        )


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


def build_specs(
    profiles: list[str], endpoints: list[str], models: list[str], api_key_envs: list[str]
) -> list[TargetSpec]:
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
            raise UserError(
                f"{option} was given {len(values)} times for {len(endpoints)} "
                "endpoints: give it once (for all) or once per --endpoint"
            )
        return list(values)

    if models and not endpoints:
        raise UserError("--model names the model of an --endpoint; a profile names its own")
    specs = [TargetSpec("profile", p) for p in profiles]
    for url, model, key in zip(
        endpoints,
        per_endpoint(models, "--model"),
        per_endpoint(api_key_envs, "--api-key-env"),
        strict=True,
    ):
        if not url.startswith(("http://", "https://")):
            raise UserError(f"--endpoint must be an http(s) URL, got {url!r}")
        specs.append(TargetSpec("endpoint", url, model, key))
    return specs or [TargetSpec("running", "running")]


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


def _live(
    label: str,
    base_url: str,
    model: str | None,
    api_key_env: str | None,
    agent: AgentKnobs,
    paths: Paths,
) -> LiveTarget:
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
        version = httpx.get(base_url.removesuffix("/v1") + "/version", headers=headers, timeout=5.0)
        if version.status_code == 200:
            fingerprint["server_version"] = version.json().get("version")
    except (httpx.HTTPError, ValueError):
        pass
    return LiveTarget(
        label=label,
        base_url=base_url,
        model=chosen,
        api_key_env=api_key_env,
        agent=settings_from(agent),
        max_model_len=max_len if isinstance(max_len, int) else None,
        fingerprint=fingerprint,
    )


@contextlib.contextmanager
def open_target(
    spec: TargetSpec,
    paths: Paths,
    *,
    label: str | None = None,
    on_phase: Callable[[str], None] | None = None,
    boot_timeout: float = 900.0,
) -> Iterator[LiveTarget]:
    """Bring ``spec`` up (starting its engine if needed), yield it, stop what was started.

    A profile's engine that already runs is measured as it is and left running
    (:attr:`Reuse.SAME_PROFILE`); an engine of another profile is refused.
    """
    target = spec.target(paths, label=label)
    with target.opened(
        paths,
        progress=on_phase,
        on_phase=on_phase,
        timeout=boot_timeout,
        why=f"--profile {spec.name} starts its own engine",
    ) as up:
        agent = up.profile.agent if up.profile is not None else AgentKnobs()
        yield _live(up.label, up.base_url, up.model, up.api_key_env, agent, paths)


def unique_labels(specs: list[TargetSpec]) -> list[str]:
    """One label per target; a target named twice gets ``#2``, ``#3``..."""
    seen: dict[str, int] = {}
    out = []
    for spec in specs:
        base = (
            spec.name
            if spec.kind != "endpoint" or not spec.model
            else f"{spec.name} ({spec.model})"
        )
        seen[base] = seen.get(base, 0) + 1
        out.append(base if seen[base] == 1 else f"{base}#{seen[base]}")
    return out
