"""A session's language servers: one per language, started at the first edit (or
navigation call) of one of its files, kept for the session, and what each edit's
result learns from them.

An edit never fails because of a server: a server that is missing, will not start,
crashes or is slow costs the edit at most its wait and gives the user a notice; the
model's result then simply has no diagnostics. A navigation call (:meth:`Diagnostics.
navigate`, the tools of ``_nav_tools``) has nothing to fall back on: the same cases
are its error, after at most :data:`NAVIGATION_S` (plus :data:`STARTUP_S` once).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from ...config import DiagnosticsConfig, LanguageServerConfig
from ..tools import EditFeedback, ToolError, walk_files
from ._launch import confined, find_program, server_settings
from ._report import Diagnostic, introduced, moved_lines, render
from ._rpc import RpcError, ServerGone
from ._server import LanguageServer

log = logging.getLogger(__name__)

STARTUP_S = 20.0
"""The longest the first edit waits for a server to start, once per start: Node,
the interpreter's search paths and the builtins stubs took basedpyright 2 s on an
idle machine and 8-12 s at load 10 here before its first diagnostics. Without this
allowance the session's first edit would never carry any."""
MAX_STARTS = 3
"""Starts per server and session; a server that keeps dying is then left off."""
MAX_TIMEOUTS = 3
"""Edits (or navigation calls) in a row a server may leave unanswered before it is
stopped for the session."""
NAVIGATION_S = 15.0
"""The longest a navigation call waits for a running server's answer: a warm
basedpyright answered definition, references and rename in a two-file project in
0.1 s here (2 cores, load 5); a large project's references take longer, and a hung
server costs the call no more than this."""
SCAN_FILES = 20_000
"""Files of the workspace looked at, at most, for the source files whose size and
time are compared before a navigation call (this repository's 1,000 files, 618 of
them Python, took 13-18 ms)."""

Stats = dict[Path, tuple[int, int]]
"""Source files by path: (mtime_ns, size)."""
T = TypeVar("T")


class _Unavailable(Exception):
    """The server cannot be used now; the message is the user's notice."""


@dataclass
class _Slot:
    spec: LanguageServerConfig
    server: LanguageServer | None = None
    starting: asyncio.Task[LanguageServer] | None = None
    answered: bool = False
    """The current process has answered an edit (it is warm)."""
    waited_cold: bool = False
    """An edit already gave the current process the startup allowance."""
    starts: int = 0
    timeouts: int = 0
    off: str | None = None
    """Why the server is not used for the rest of the session."""
    seen: Stats = field(default_factory=dict)
    """The workspace's source files as they were when the server read them (at its
    start, or when sent since): a file that differs now is sent before a navigation
    call, since a server does not see changes on disk by itself (basedpyright answered
    references without a file written after its start)."""


class Diagnostics:
    """The :class:`~..tools.EditChecker` of a session: problems an edit introduced."""

    def __init__(self, config: DiagnosticsConfig, workspace: Path) -> None:
        self.config = config
        self.workspace = workspace.resolve()
        self._slots = {spec.name: _Slot(spec) for spec in config.servers}

    def server_for(self, path: Path) -> LanguageServerConfig | None:
        """The server of ``path``'s language (a configured one before the built-in)."""
        name = path.name
        for spec in reversed(self.config.servers):
            if any(name.endswith(ext) for ext in spec.extensions):
                return spec
        return None

    async def check(self, path: Path, shown: str, before: str, after: str) -> EditFeedback:
        if not self.config.enabled:
            return EditFeedback()
        spec = self.server_for(path)
        if spec is None:
            return EditFeedback()
        slot = self._slots[spec.name]
        if slot.off is not None:
            return EditFeedback()
        notices: list[str] = []
        try:
            await self._ensure_started(slot, notices)
            # A fresh server's first answer includes its start (STARTUP_S), once.
            budget = self.config.timeout_s
            if not slot.answered and not slot.waited_cold:
                slot.waited_cold = True
                budget = max(STARTUP_S, budget)
            old: list[Diagnostic] = []
            async with asyncio.timeout(budget):
                server = await self._server(slot)
                if before:
                    old = await server.diagnostics(path, before)
                new = await server.diagnostics(path, after)
        except _Unavailable as exc:
            notices.append(str(exc))
            return EditFeedback(notice="; ".join(notices))
        except TimeoutError:
            return EditFeedback(notice=self._timed_out(slot, notices) or None)
        except (ServerGone, RpcError, OSError) as exc:
            notices.append(await self._lost(slot, exc))
            return EditFeedback(notice="; ".join(notices))
        except Exception as exc:  # noqa: BLE001 - a client bug must not fail a written edit
            log.exception("diagnostics for %s failed", shown)
            notices.append(f"diagnostics after edits failed: {type(exc).__name__}: {exc}")
            return EditFeedback(notice="; ".join(notices))
        slot.timeouts = 0
        slot.answered = True
        moved = moved_lines(before, after) if old else None
        text = render(
            introduced(old, new, self.config.severity, moved),
            shown,
            _program(spec),
            max_items=self.config.max_items,
            max_chars=self.config.max_chars,
        )
        return EditFeedback(text=text, notice="; ".join(notices) or None)

    def navigable(self) -> list[LanguageServerConfig]:
        """The servers a navigation tool can use: enabled, installed, not left off."""
        if not self.config.enabled:
            return []
        return [
            slot.spec
            for slot in self._slots.values()
            if slot.off is None and find_program(slot.spec.command) is not None
        ]

    async def navigate(
        self, path: Path, what: str, work: Callable[[LanguageServer, Stats], Awaitable[T]]
    ) -> T:
        """``work``'s result with the server of ``path``'s language (started if need
        be) and the files it has seen; every failure is a :class:`ToolError` that
        names the server and says ``what`` could not be done."""
        spec = self.server_for(path) if self.config.enabled else None
        if spec is None:
            known = ", ".join(e for s in self.navigable() for e in s.extensions)
            raise ToolError(
                f"no language server is configured for {path.name}; {what} "
                f"works in {known or 'no'} files"
            )
        slot = self._slots[spec.name]
        name = _program(spec)
        notices: list[str] = []
        budget = NAVIGATION_S
        try:
            await self._ensure_started(slot, notices)
            if slot.server is None:
                budget += STARTUP_S
            async with asyncio.timeout(budget):
                result = await work(await self._server(slot), slot.seen)
        except _Unavailable as exc:
            raise ToolError(f"cannot {what}: {_plain(str(exc))}") from None
        except TimeoutError:
            slot.timeouts += 1
            if slot.timeouts >= MAX_TIMEOUTS:
                slot.off = (
                    f"diagnostics after edits: {name} left {slot.timeouts} "
                    "requests in a row unanswered; it is stopped for the rest "
                    "of this session"
                )
                self._stop(slot)
            raise ToolError(
                f"cannot {what}: {name} did not answer within {budget:g} s "
                "(use grep and read_file instead)"
            ) from None
        except RpcError as exc:
            if slot.server is not None and slot.server.alive:
                raise ToolError(f"cannot {what}: {name} refused: {exc}") from None
            raise ToolError(await self._nav_lost(slot, exc, what)) from None
        except (ServerGone, OSError) as exc:
            raise ToolError(await self._nav_lost(slot, exc, what)) from None
        slot.timeouts = 0
        return result

    async def written(self, texts: list[tuple[Path, str]]) -> None:
        """Tell the running servers the new texts of files a navigation tool wrote, so
        the checks of each see the others' (best effort: within the edits' wait)."""
        with contextlib.suppress(Exception):
            async with asyncio.timeout(self.config.timeout_s):
                for path, text in texts:
                    spec = self.server_for(path)
                    slot = self._slots[spec.name] if spec is not None else None
                    if slot is None or slot.server is None or not slot.server.alive:
                        continue
                    await slot.server.sync(path, text)
                    with contextlib.suppress(OSError):
                        st = path.stat()
                        slot.seen[path] = (st.st_mtime_ns, st.st_size)

    async def _nav_lost(self, slot: _Slot, exc: Exception, what: str) -> str:
        """The error of a navigation call whose server failed (it is dropped)."""
        started = slot.server is not None
        why = await self._gone(slot, exc)
        if not started and not isinstance(exc, OSError):
            why = f"did not start ({why})"
        name = _program(slot.spec)
        if slot.starts >= MAX_STARTS:
            slot.off = (
                f"diagnostics after edits: {name} {why}; after {slot.starts} starts "
                f"{slot.spec.name} files get no diagnostics for the rest of this "
                "session (edits go on)"
            )
            return f"cannot {what}: {name} {why}; it is not started again this session"
        return f"cannot {what}: {name} {why}; it is started again at the next call"

    async def _ensure_started(self, slot: _Slot, notices: list[str]) -> None:
        """A running server, or one starting, for ``slot`` (``notices`` gathers what the
        user is told: a server found dead since the last edit)."""
        loop = asyncio.get_running_loop()
        server = slot.server
        if server is not None and server.loop is not loop:
            # A new event loop (a second asyncio.run in one process): the old loop's
            # pipes are unusable, so that process is ended and a new one started.
            server.kill()
            slot.server = server = None
        if server is not None and not server.alive:
            why = await server.why_gone()
            slot.server = None
            await server.aclose(polite=False)
            notices.append(self._restart_note(slot, why, now=True))
        if slot.starting is not None and slot.starting.get_loop() is not loop:
            slot.starting = None
        if slot.server is not None or slot.starting is not None:
            return
        if slot.off is not None:
            raise _Unavailable(slot.off)
        program = find_program(slot.spec.command)
        if program is None:
            slot.off = (
                f"diagnostics after edits: the {slot.spec.name} language server "
                f"'{slot.spec.command}' is not installed ({_install_hint(slot.spec)}"
                "); edits go on without diagnostics"
            )
            raise _Unavailable(slot.off)
        slot.starts += 1
        slot.answered = slot.waited_cold = False
        slot.starting = asyncio.create_task(self._start(slot, program))

    async def _start(self, slot: _Slot, program: str) -> LanguageServer:
        slot.seen = await asyncio.to_thread(source_stats, self.workspace, slot.spec)
        return await LanguageServer.start(
            server_settings(slot.spec, self.workspace),
            self.workspace,
            confined([program, *slot.spec.args], self.workspace),
        )

    async def _server(self, slot: _Slot) -> LanguageServer:
        """The slot's server once started; the start goes on if this wait is cut short."""
        if slot.server is None:
            assert slot.starting is not None
            server = await asyncio.shield(slot.starting)  # raises what the start raised
            slot.server, slot.starting = server, None
        return slot.server

    def _timed_out(self, slot: _Slot, notices: list[str]) -> str:
        """The notice for an unanswered edit (empty: already said)."""
        slot.timeouts += 1
        name = _program(slot.spec)
        if slot.timeouts >= MAX_TIMEOUTS:
            slot.off = (
                f"diagnostics after edits: {name} left {slot.timeouts} edits in a row "
                f"unanswered within {self.config.timeout_s:g} s; it is stopped and "
                f"{slot.spec.name} files get no diagnostics for the rest of this "
                "session"
            )
            self._stop(slot)
            notices.append(slot.off)
        elif slot.timeouts == 1:
            what = "start and report diagnostics" if slot.server is None else "report diagnostics"
            notices.append(
                f"diagnostics after edits: {name} did not {what} in time; this "
                "edit's result has none (the edit itself is done)"
            )
        return "; ".join(notices)

    async def _lost(self, slot: _Slot, exc: Exception) -> str:
        return self._restart_note(slot, await self._gone(slot, exc))

    async def _gone(self, slot: _Slot, exc: Exception) -> str:
        """Why the slot's server failed ``exc``; the server is dropped."""
        server, slot.server, slot.starting = slot.server, None, None
        why = await server.why_gone() if server is not None else str(exc)
        if server is not None:
            await server.aclose(polite=False)
        if isinstance(exc, OSError):
            why = f"could not be started: {exc}"
        elif isinstance(exc, RpcError) and server is not None and server.alive:
            why = f"failed a request: {exc}"
        return why

    def _restart_note(self, slot: _Slot, why: str, *, now: bool = False) -> str:
        name = _program(slot.spec)
        if slot.starts >= MAX_STARTS:
            slot.off = (
                f"diagnostics after edits: {name} {why}; after {slot.starts} starts "
                f"{slot.spec.name} files get no diagnostics for the rest of this "
                "session (edits go on)"
            )
            return slot.off
        if now:  # found dead at this edit: started again for it
            return f"diagnostics after edits: {name} {why}; it is started again"
        return (
            f"diagnostics after edits: {name} {why}; the edit is done without "
            "diagnostics and the server is started again at the next edit"
        )

    def _stop(self, slot: _Slot) -> None:
        if slot.starting is not None:
            slot.starting.cancel()
            slot.starting = None
        if slot.server is not None:
            slot.server.kill()
            slot.server = None

    async def aclose(self) -> None:
        """Shut every server down (politely, then by killing its process group)."""
        for slot in self._slots.values():
            starting, slot.starting = slot.starting, None
            if starting is not None:
                starting.cancel()
                with contextlib.suppress(BaseException):
                    slot.server = await starting
            if slot.server is not None:
                server, slot.server = slot.server, None
                await server.aclose()


def source_stats(workspace: Path, spec: LanguageServerConfig) -> Stats:
    """The workspace's files of ``spec``'s language (at most :data:`SCAN_FILES`)."""
    stats: Stats = {}
    for n, path in enumerate(walk_files(workspace, workspace)):
        if n == SCAN_FILES:
            break
        if any(path.name.endswith(ext) for ext in spec.extensions):
            with contextlib.suppress(OSError):
                st = path.stat()
                stats[path] = (st.st_mtime_ns, st.st_size)
    return stats


def _plain(notice: str) -> str:
    """A notice without its "diagnostics after edits: " head, for a tool's error."""
    return notice.removeprefix("diagnostics after edits: ")


def _program(spec: LanguageServerConfig) -> str:
    return Path(spec.command).name


def _install_hint(spec: LanguageServerConfig) -> str:
    if spec.command == "basedpyright-langserver":
        return (
            "pip install basedpyright, or name another in config.toml [diagnostics.servers.python]"
        )
    return f"install it, or change [diagnostics.servers.{spec.name}] command in config.toml"
