"""What sparkcode talks to: one :class:`Target` for every front.

A target is an OpenAI-compatible endpoint, a profile (the managed engine it runs, or the
endpoint it names), or the managed engine as it runs now. ``run``/``acp``/the TUI (via
:func:`sparkcode.start.resolve_target`), replay's ``--rerun`` and ``sparkcode bench``
all describe what they talk to with it, and reach it with :meth:`Target.reach` (the
engine keeps running) or :meth:`Target.opened` (an engine started here is stopped
afterwards). Both go through the engine side's one access module,
:mod:`engine.supervisor._access`, with the target's :class:`~engine.supervisor.Reuse`
rule; nothing here starts or stops an engine itself.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from engine.errors import UserError
from engine.paths import Paths
from engine.profiles import Profile, load_profile, render
from engine.supervisor import EngineHandle, Reuse, attach, ensure_running, stop_started

Progress = Callable[[str], None]


def normalise_base_url(url: str) -> str:
    """``http://host:8000`` and ``http://host:8000/v1/`` both become ``.../v1``."""
    url = url.strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise UserError(f"--endpoint must be an http(s) URL, got {url!r}")
    return url if url.endswith("/v1") else f"{url}/v1"


@dataclass(frozen=True)
class Target:
    """A server to send chat requests to, or the profile whose engine will be it."""

    label: str
    """What tables and messages call it: the profile name or the URL."""
    base_url: str = ""
    """The API root (ends in ``/v1``): given for an endpoint, known for a profile once
    :meth:`reach` has brought it up (empty until then)."""
    profile: Profile | None = None
    """The profile (its agent defaults apply); None for a bare endpoint."""
    model: str | None = None
    """The model name to send; None: the profile's served name or the server's first."""
    api_key_env: str | None = None
    """The environment variable holding the API key (read at request time)."""
    reuse: Reuse = Reuse.ANY
    """What an engine that already runs means to this target (managed profiles)."""
    engine: EngineHandle | None = None
    """The managed engine behind a reached target, and whether it was started here."""

    @classmethod
    def for_endpoint(
        cls,
        url: str,
        model: str | None = None,
        api_key_env: str | None = None,
        *,
        label: str | None = None,
    ) -> Target:
        base = normalise_base_url(url)
        return cls(label=label or base, base_url=base, model=model, api_key_env=api_key_env)

    @classmethod
    def for_profile(
        cls,
        profile: Profile | str,
        paths: Paths,
        *,
        reuse: Reuse,
        model: str | None = None,
        api_key_env: str | None = None,
        label: str | None = None,
    ) -> Target:
        """A profile (a name is loaded here); ``reuse`` says what a running engine means."""
        prof = profile if isinstance(profile, Profile) else load_profile(profile, paths)
        return cls(
            label=label or prof.name,
            profile=prof,
            model=model,
            api_key_env=api_key_env,
            reuse=reuse,
        )

    @classmethod
    def running_engine(cls, paths: Paths, *, label: str | None = None) -> Target:
        """The managed engine as it runs now (ready; not started, not waited for).

        Its profile is loaded for its agent defaults when the file is still there.
        """
        status = attach(paths)
        assert status.base_url is not None  # attach refuses an engine without one
        profile = None
        if status.profile:
            with contextlib.suppress(UserError):
                profile = load_profile(status.profile, paths)
        return cls(
            label=label or status.profile or status.base_url,
            base_url=status.base_url,
            profile=profile,
            model=status.model,
        )

    @property
    def managed(self) -> bool:
        """True when sparkcode supervises the engine (a local vllm profile)."""
        return self.profile is not None and self.profile.kind != "endpoint"

    @property
    def started(self) -> bool:
        """True when :meth:`reach` launched the engine behind this target."""
        return self.engine is not None and self.engine.started

    def reach(
        self,
        paths: Paths,
        *,
        start: bool = True,
        wait: bool = True,
        progress: Progress | None = None,
        on_phase: Progress | None = None,
        timeout: float = 900.0,
        why: str | None = None,
    ) -> Target:
        """This target with its URL and model known, its engine up if it is managed.

        Blocking (process checks, model preparation, the boot): call it from a thread.
        ``start=False`` only takes an engine that runs; ``why`` says in a refusal why
        this caller starts its own engine (see :func:`engine.supervisor.ensure_running`).
        """
        if self.base_url:
            return self
        assert self.profile is not None  # a target is an endpoint or a profile
        if self.profile.kind == "endpoint":
            spec = render(self.profile, paths)
            return replace(
                self,
                base_url=spec.base_url,
                model=self.model or spec.model,
                api_key_env=self.api_key_env or spec.api_key_env,
            )
        handle = ensure_running(
            self.profile,
            paths,
            reuse=self.reuse,
            start=start,
            wait=wait,
            progress=progress,
            on_phase=on_phase,
            timeout=timeout,
            why=why,
        )
        return replace(
            self, base_url=handle.base_url, model=self.model or handle.model, engine=handle
        )

    @contextlib.contextmanager
    def opened(
        self,
        paths: Paths,
        *,
        progress: Progress | None = None,
        on_phase: Progress | None = None,
        timeout: float = 900.0,
        why: str | None = None,
    ) -> Iterator[Target]:
        """:meth:`reach` for a block; an engine started by it is stopped at the end."""
        reached = self.reach(paths, progress=progress, on_phase=on_phase, timeout=timeout, why=why)
        try:
            yield reached
        finally:
            if reached.engine is not None:
                stop_started(paths, reached.engine)


__all__ = ["Progress", "Reuse", "Target", "normalise_base_url"]
