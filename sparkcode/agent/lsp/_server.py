"""One language server process for one workspace: started, initialized, fed the
edited files' texts, asked for their diagnostics (and, through :attr:`rpc`, the
navigation requests of ``_navigate``), shut down.

Diagnostics arrive pushed (``textDocument/publishDiagnostics``), tagged with the
document version they were computed for when the server supports that (pyright
does); a server that leaves the version out is taken to answer the latest text
sent. A file stays open once sent (the server keeps it analysed, so the next
edit's "before" is already known), up to :data:`MAX_OPEN` files.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...config import LanguageServerConfig
from ._rpc import JsonRpc, MethodNotFound, ServerGone

MAX_OPEN = 16
"""Files kept open per server; the least recently edited is closed past this (an
open file is re-checked whenever a file it imports changes)."""
SHUTDOWN_S = 2.0
"""How long a polite ``shutdown``/``exit`` may take before the process group is killed."""

Diagnostic = dict[str, Any]
"""One LSP ``Diagnostic`` object as the server sent it."""


@dataclass
class _Document:
    version: int
    text: str
    published: tuple[int, list[Diagnostic]] | None = None
    """The last diagnostics received and the version they were for."""
    waiters: list[tuple[int, asyncio.Future[list[Diagnostic]]]] = field(default_factory=list)


class LanguageServer:
    """A started and initialized server; :meth:`start` makes one."""

    def __init__(
        self,
        spec: LanguageServerConfig,
        workspace: Path,
        process: asyncio.subprocess.Process,
        rpc: JsonRpc,
    ) -> None:
        self.spec = spec
        self.workspace = workspace
        self.process = process
        self.rpc = rpc
        self.loop = asyncio.get_running_loop()
        self._docs: OrderedDict[str, _Document] = OrderedDict()

    @classmethod
    async def start(
        cls, spec: LanguageServerConfig, workspace: Path, argv: list[str]
    ) -> LanguageServer:
        """Spawn ``argv`` in ``workspace`` and run the ``initialize`` handshake; raises
        OSError (cannot run it), :class:`ServerGone` or :class:`~._rpc.RpcError`."""
        process = await asyncio.create_subprocess_exec(
            *argv,
            cwd=workspace,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )  # its own process group, killed whole at the end
        assert process.stdin is not None and process.stdout is not None
        server: LanguageServer | None = None

        def notified(method: str, params: Any) -> None:
            if server is not None and method == "textDocument/publishDiagnostics":
                server._published(params)

        async def requested(method: str, params: Any) -> Any:
            return _answer(spec, workspace, method, params)

        rpc = JsonRpc(process.stdout, process.stdin, notified, requested, stderr=process.stderr)
        server = cls(spec, workspace, process, rpc)
        try:
            await rpc.request("initialize", _initialize_params(spec, workspace))
            await rpc.notify("initialized", {})
            if spec.settings:
                await rpc.notify("workspace/didChangeConfiguration", {"settings": spec.settings})
        except BaseException:
            await server.aclose(polite=False)
            raise
        return server

    @property
    def alive(self) -> bool:
        return self.rpc.gone is None and self.process.returncode is None

    async def why_gone(self) -> str:
        """The exit code and the end of stderr, for a notice. A server that closed its
        output is given up to 1 s to be reaped, so a crash is named by its exit code
        rather than by the closed pipe it is seen by first."""
        if self.process.returncode is None and self.rpc.gone is not None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.process.wait(), timeout=1.0)
        code = self.process.returncode
        how = (
            f"exited with code {code}"
            if code is not None and code >= 0
            else f"was killed by signal {-code}"
            if code is not None
            else f"stopped answering ({self.rpc.gone})"
        )
        tail = self.rpc.stderr_tail.strip().splitlines()[-1:] if self.rpc.stderr_tail else []
        return how + (f"; its last words: {tail[0][:200]}" if tail else "")

    async def sync(self, path: Path, text: str) -> None:
        """Make ``text`` the server's content of ``path``: opened, or changed when it
        holds another (nothing is sent when it holds this one)."""
        await self._sync(path, text)

    def open_text(self, path: Path) -> str | None:
        """The text this server holds open for ``path`` (None: not open; it reads the
        file from disk)."""
        doc = self._docs.get(path.as_uri())
        return doc.text if doc is not None else None

    def open_version(self, path: Path) -> int | None:
        doc = self._docs.get(path.as_uri())
        return doc.version if doc is not None else None

    async def close(self, path: Path) -> None:
        """Close ``path`` if open (the server reads it from disk again)."""
        uri = path.as_uri()
        if self._docs.pop(uri, None) is not None:
            await self.rpc.notify("textDocument/didClose", {"textDocument": {"uri": uri}})

    async def _sync(self, path: Path, text: str) -> _Document:
        uri = path.as_uri()
        doc = self._docs.get(uri)
        if doc is None:
            doc = self._docs[uri] = _Document(version=1, text=text)
            await self.rpc.notify(
                "textDocument/didOpen",
                {
                    "textDocument": {
                        "uri": uri,
                        "languageId": self.spec.language_id or self.spec.name,
                        "version": 1,
                        "text": text,
                    }
                },
            )
            await self._close_past_limit()
        elif doc.text != text:
            doc.version += 1
            doc.text = text
            await self.rpc.notify(
                "textDocument/didChange",
                {
                    "textDocument": {"uri": uri, "version": doc.version},
                    "contentChanges": [{"text": text}],
                },
            )
        self._docs.move_to_end(uri)
        return doc

    async def diagnostics(self, path: Path, text: str) -> list[Diagnostic]:
        """The server's diagnostics for ``path`` holding ``text`` (sent first when it
        is not what the server has); waits for them, so callers bound it."""
        doc = await self._sync(path, text)
        if doc.published is not None and doc.published[0] >= doc.version:
            return doc.published[1]
        future: asyncio.Future[list[Diagnostic]] = self.loop.create_future()
        doc.waiters.append((doc.version, future))
        closed: asyncio.Future[Any] = asyncio.ensure_future(self.rpc.closed.wait())
        either: set[asyncio.Future[Any]] = {future, closed}
        try:
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        finally:
            closed.cancel()
            if not future.done():
                future.cancel()
                doc.waiters = [w for w in doc.waiters if w[1] is not future]
        if not future.done() or future.cancelled():
            raise ServerGone(self.rpc.gone or "the connection closed")
        return future.result()

    def _published(self, params: Any) -> None:
        if not isinstance(params, dict):
            return
        doc = self._docs.get(str(params.get("uri")))
        items = params.get("diagnostics")
        if doc is None or not isinstance(items, list):
            return
        version = params.get("version")
        version = version if isinstance(version, int) else doc.version
        diagnostics = [d for d in items if isinstance(d, dict)]
        doc.published = (version, diagnostics)
        waiting = []
        for wanted, future in doc.waiters:
            if wanted <= version and not future.done():
                future.set_result(diagnostics)
            elif not future.done():
                waiting.append((wanted, future))
        doc.waiters = waiting

    async def _close_past_limit(self) -> None:
        while len(self._docs) > MAX_OPEN:
            uri, _ = self._docs.popitem(last=False)
            await self.rpc.notify("textDocument/didClose", {"textDocument": {"uri": uri}})

    def kill(self) -> None:
        """End the process group now, without the handshake (no waiting)."""
        if self.process.returncode is not None:
            return  # reaped: its group ID may belong to someone else by now
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)

    async def aclose(self, *, polite: bool = True) -> None:
        """``shutdown`` and ``exit`` (when ``polite`` and it is alive), then the process
        group is killed if anything of it is still running."""
        if polite and self.alive:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.rpc.request("shutdown", None), SHUTDOWN_S)
                await self.rpc.notify("exit", None)
                await asyncio.wait_for(self.process.wait(), SHUTDOWN_S)
        self.kill()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.process.wait(), SHUTDOWN_S)
        await self.rpc.aclose()


def _initialize_params(spec: LanguageServerConfig, workspace: Path) -> dict[str, Any]:
    folder = {"uri": workspace.as_uri(), "name": workspace.name or str(workspace)}
    return {
        # Not our PID: in the sandbox's PID namespace it does not exist, and servers that
        # watch it (basedpyright) exit at once. They end on stdin's EOF when we do.
        "processId": None,
        "clientInfo": {"name": "sparkcode"},
        "rootUri": folder["uri"],
        "rootPath": str(workspace),
        "workspaceFolders": [folder],
        "capabilities": {
            "workspace": {
                "configuration": True,
                "workspaceFolders": True,
                "didChangeConfiguration": {"dynamicRegistration": False},
            },
            "textDocument": {
                "synchronization": {"dynamicRegistration": False, "didSave": False},
                "publishDiagnostics": {"versionSupport": True, "relatedInformation": False},
            },
            "general": {"positionEncodings": ["utf-16"]},
        },
    }


def _answer(spec: LanguageServerConfig, workspace: Path, method: str, params: Any) -> Any:
    """The result of a request the server sends us."""
    if method == "workspace/configuration":
        items = params.get("items", []) if isinstance(params, dict) else []
        return [
            _section(spec.settings, item.get("section") if isinstance(item, dict) else None)
            for item in items
        ]
    if method == "workspace/workspaceFolders":
        return [{"uri": workspace.as_uri(), "name": workspace.name or str(workspace)}]
    if method in (
        "client/registerCapability",
        "client/unregisterCapability",
        "window/workDoneProgress/create",
        "window/showMessageRequest",
        "window/showDocument",
        "workspace/diagnostic/refresh",
        "workspace/semanticTokens/refresh",
        "workspace/inlayHint/refresh",
    ):
        return None
    raise MethodNotFound(method)


def _section(settings: dict[str, Any], section: Any) -> Any:
    """``settings`` at a dotted ``section`` (``basedpyright.analysis``); None if absent."""
    if not isinstance(section, str) or not section:
        return settings
    value: Any = settings
    for part in section.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value
