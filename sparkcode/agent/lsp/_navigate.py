"""The navigation requests: ``textDocument/definition``, ``references`` and
``rename`` asked of the session's server (through :meth:`Diagnostics.navigate`, which
starts it, bounds the wait and names its failures), after the files changed on disk
since the server read them are sent to it.

The answers come back as :class:`Location` lists and, for a rename, each file's text
before and after; a rename that does not fit the files as they are now (a file
changed, edits that overlap, a range past a file's end, a file created or renamed)
is a :class:`ToolError` and changes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..tools import ToolError
from ._hub import Diagnostics, Stats, source_stats
from ._positions import applied, lines_of, text_edits, uri_path, workspace_edits
from ._server import LanguageServer

READY_S = 10.0
"""The longest a call waits for the server to analyse the file asked about (a server
that never sends diagnostics for it costs each call this, then is asked anyway)."""


@dataclass(frozen=True)
class Location:
    """A place the server named: the file and its 0-based line and UTF-16 column."""

    path: Path
    line: int
    character: int


def read_source(path: Path) -> str:
    """A source file's text as the edit tools read it (UTF-8, undecodable bytes
    replaced); OSError when it cannot be read."""
    return path.read_bytes().decode("utf-8", "replace")


async def refresh(server: LanguageServer, seen: Stats, workspace: Path, target: Path) -> None:
    """Send ``server`` every source file that differs from what it read (``seen``):
    changed or created since, or open with other text; a deleted one it holds open is
    closed. ``target``, the file asked about, is sent (opened) too, and analysed
    (:func:`_analysed`)."""
    now = await asyncio.to_thread(source_stats, workspace, server.spec)
    for path, stat in now.items():
        if seen.get(path) == stat and server.open_text(path) is None and path != target:
            continue
        try:
            text = await asyncio.to_thread(read_source, path)
        except OSError:
            continue
        if path == target:
            await _analysed(server, path, text)
        else:
            await server.sync(path, text)
        seen[path] = stat
    for path in [p for p in seen if p not in now]:
        await server.close(path)
        del seen[path]


async def _analysed(server: LanguageServer, path: Path, text: str) -> None:
    """Send ``path``'s text and wait (at most :data:`READY_S`) for its diagnostics, the
    sign that the server has analysed it: a basedpyright just started answered a
    rename there with nothing before it had (and a definition in its first 1.5 s)."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(READY_S):
            await server.diagnostics(path, text)


def _params(path: Path, line: int, character: int) -> dict[str, Any]:
    return {
        "textDocument": {"uri": path.as_uri()},
        "position": {"line": line, "character": character},
    }


def _locations(result: Any) -> list[Location]:
    """``Location``, ``Location[]`` or ``LocationLink[]`` (null: none)."""
    items = result if isinstance(result, list) else [result] if result else []
    out = []
    for item in items:
        if not isinstance(item, dict):
            continue
        uri = item.get("uri", item.get("targetUri"))
        where = item.get("range", item.get("targetSelectionRange"))
        start = where.get("start") if isinstance(where, dict) else None
        try:
            path = uri_path(uri)
        except ValueError:
            continue
        if (
            isinstance(start, dict)
            and isinstance(start.get("line"), int)
            and isinstance(start.get("character"), int)
        ):
            out.append(Location(path, start["line"], start["character"]))
    return sorted(set(out), key=lambda loc: (str(loc.path), loc.line, loc.character))


async def locations(
    hub: Diagnostics, method: str, path: Path, line: int, character: int, what: str
) -> list[Location]:
    """The server's answer to ``textDocument/definition`` or ``references`` at
    ``path`` (0-based ``line``, UTF-16 ``character``)."""
    params = _params(path, line, character)
    if method == "textDocument/references":
        params["context"] = {"includeDeclaration": True}

    async def work(server: LanguageServer, seen: Stats) -> Any:
        await refresh(server, seen, hub.workspace, path)
        return await server.rpc.request(method, params)

    return _locations(await hub.navigate(path, what, work))


@dataclass(frozen=True)
class Renamed:
    """A server's rename: each file's path, its text as the server saw it (which is the
    file's now) and its new text; and how many places it replaces."""

    texts: list[tuple[Path, str, str]]
    places: int


async def rename_texts(
    hub: Diagnostics, path: Path, line: int, character: int, old: str, new: str
) -> Renamed:
    """The server's rename of ``old`` (at ``line``, ``character``) to ``new``."""
    what = f"rename {old}"
    params = {**_params(path, line, character), "newName": new}

    async def work(server: LanguageServer, seen: Stats) -> Renamed:
        await refresh(server, seen, hub.workspace, path)
        answer = await server.rpc.request("textDocument/rename", params)
        if answer is None:
            raise ToolError(
                f"cannot {what}: {Path(server.spec.command).name} has nothing "
                f"to rename there (not a name it knows: a builtin, a keyword, "
                "or a name defined nowhere); no file was changed"
            )
        return await asyncio.to_thread(_new_texts, server, answer, old, new, what)

    return await hub.navigate(path, what, work)


def _new_texts(server: LanguageServer, answer: Any, old: str, new: str, what: str) -> Renamed:
    try:
        files = workspace_edits(answer)
    except ValueError as exc:
        raise ToolError(f"cannot {what}: {exc}; no file was changed") from None
    out, places = [], 0
    for file in files:
        held = server.open_text(file.path)
        try:
            text = read_source(file.path)
        except OSError as exc:
            raise ToolError(
                f"cannot {what}: the server would edit {file.path}, which "
                f"cannot be read ({exc.strerror}); no file was changed"
            ) from None
        if (
            held is not None
            and held != text
            or file.version is not None
            and file.version != server.open_version(file.path)
        ):
            raise ToolError(
                f"cannot {what}: {file.path.name} changed while the server "
                "worked; no file was changed (call rename again)"
            )
        try:
            edits = text_edits(text, file.edits)
        except ValueError as exc:
            raise ToolError(
                f"cannot {what}: the server's edits do not fit "
                f"{file.path.name} as it is now ({exc}); no file was changed"
            ) from None
        stale = [e for e in edits if e.new == new and text[e.start : e.end] != old]
        if stale:
            line = text.count("\n", 0, stale[0].start) + 1
            raise ToolError(
                f"cannot {what}: the server's edit of {file.path.name} line "
                f"{line} replaces {text[stale[0].start : stale[0].end]!r}, not "
                f"{old!r} (its view of the file is out of date); no file was "
                "changed"
            )
        out.append((file.path, text, applied(text, edits)))
        places += len(edits)
    return Renamed(out, places)


def source_line(path: Path, line: int, cache: dict[Path, list[str] | None]) -> str:
    """Line ``line`` (0-based) of ``path`` ("" where it cannot be read)."""
    if path not in cache:
        try:
            cache[path] = lines_of(read_source(path))
        except OSError:
            cache[path] = None
    lines = cache[path]
    return lines[line] if lines is not None and 0 <= line < len(lines) else ""
