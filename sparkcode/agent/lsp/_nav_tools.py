"""The navigation tools the model calls: ``definition``, ``references`` and ``rename``,
answered by the session's language server (:mod:`._navigate`).

A call names the place by file, the name and, optionally, a 1-based line: a small
model copies a name from the file it read far more reliably than it counts a column
(or a line), so the column is where the name first stands on that line, and a line
without the name is taken as a guess (the name's definition in the file, else its
nearest use, said in the result). Results are
``path:line:column: source line``, paths relative to the workspace, at most
:data:`MAX_LOCATIONS`. ``rename`` is an edit: its new texts go through
:func:`~sparkcode.agent.tools.plan_changes` and :func:`~sparkcode.agent.tools.
apply_changes`, the edit tools' guards, approval, undo snapshot and diff.

:func:`navigation_tools` offers them only where a server can answer (diagnostics on,
a server installed); docs/agent.md, "Navigation tools".
"""

from __future__ import annotations

import asyncio
import keyword
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..tools import (
    FileChange,
    Preview,
    Tool,
    ToolContext,
    ToolError,
    ToolKind,
    ToolOutput,
    apply_changes,
    changes_diff,
    plan_changes,
    resolve_in_workspace,
)
from ._hub import Diagnostics
from ._navigate import Location, locations, read_source, rename_texts, source_line
from ._positions import from_utf16, lines_of, plain_symbol, symbol_index, utf16_units

MAX_LOCATIONS = 40
"""Places listed per call; the rest are counted."""
LINE_CHARS = 160
"""Characters of each listed source line at most."""

_PATH = {
    "type": "string",
    "description": "A file where the name appears, relative to the workspace.",
}
_LINE = {
    "type": "integer",
    "description": "Optional: a line number (1-based) of that file where the name appears.",
}
_SYMBOL = {"type": "string", "description": "The name as written in the file, e.g. calc_total."}


_DEFINES = r"^\s*(?:async\s+)?(?:def|class)\s+{name}\b|^{name}\s*[:=]"
"""A line that defines the name (a function, a class or a module-level assignment)."""


class _Target:
    """Where a call points: the file, its text and the LSP position of the name."""

    def __init__(
        self,
        path: Path,
        shown: str,
        line: int,
        character: int,
        symbol: str,
        asked: int | None = None,
    ) -> None:
        self.path, self.shown, self.symbol = path, shown, symbol
        self.line, self.character = line, character
        self.asked = asked
        """The line the call gave when the name was not on it (None: it was, or none
        was given)."""

    @property
    def where(self) -> str:
        moved = "" if self.asked is None else f", not line {self.asked}, which does not have it"
        return f"{self.symbol} ({self.shown} line {self.line + 1}{moved})"


def _line_arg(args: dict[str, Any]) -> int | None:
    line = args.get("line")
    if line is None:
        return None
    if isinstance(line, str) and line.strip().isdigit():
        line = int(line)
    if not isinstance(line, int) or isinstance(line, bool) or line < 1:
        raise ToolError("line must be a line number of the file, counting from 1")
    return line


def _target(args: dict[str, Any], ctx: ToolContext) -> _Target:
    """The place a call names. A line that does not have the name is taken as a guess
    (the 1.5B gave line numbers it had not read and failed every rename try, 0 of 9 in
    ``sparkcode bench agent --kind rename``): the name's definition in the file is used,
    else its use nearest that line, and the result says so."""
    path = resolve_in_workspace(ctx.workspace, args.get("path", ""))
    shown = str(path.relative_to(ctx.workspace)) if path != ctx.workspace else "."
    raw_symbol = args.get("symbol")
    if not isinstance(raw_symbol, str) or not plain_symbol(raw_symbol):
        raise ToolError("symbol must be the name as written in the file, e.g. calc_total")
    symbol = plain_symbol(raw_symbol)
    line = _line_arg(args)
    if not path.is_file():
        raise ToolError(f"{shown} is not a file of the workspace")
    try:
        lines = lines_of(read_source(path))
    except OSError as exc:
        raise ToolError(f"cannot read {shown}: {exc.strerror}") from None
    count = len(lines) - (len(lines) > 1 and lines[-1] == "")  # as an editor counts
    if line is not None and line <= count:
        index = symbol_index(lines[line - 1], symbol)
        if index is not None:
            return _Target(path, shown, line - 1, utf16_units(lines[line - 1], index), symbol)
    on = [n for n, text in enumerate(lines[:count], 1) if symbol_index(text, symbol) is not None]
    if not on:
        raise ToolError(
            _absent(lines, line if line is not None and line <= count else None, symbol, shown)
        )
    pattern = _DEFINES.format(name=re.escape(symbol))
    defining = [n for n in on if re.search(pattern, lines[n - 1])]
    chosen = (
        defining[0]
        if defining
        else min(on, key=lambda n: abs(n - line))
        if line is not None
        else on[0]
    )
    index = symbol_index(lines[chosen - 1], symbol)
    assert index is not None
    return _Target(
        path, shown, chosen - 1, utf16_units(lines[chosen - 1], index), symbol, asked=line
    )


def _absent(lines: list[str], line: int | None, symbol: str, shown: str) -> str:
    """The error for a name that is nowhere in the file."""
    if line is None:
        return f"{symbol!r} is not in {shown}; give a file where it appears"
    quoted = lines[line - 1].strip()[:LINE_CHARS]
    return (
        f"{symbol!r} is not on line {line} of {shown} (line {line} is: {quoted!r}), "
        f"nor anywhere else in {shown}; give a file where it appears"
    )


def _listing(found: list[Location], ctx: ToolContext) -> str:
    cache: dict[Path, list[str] | None] = {}
    lines = []
    for loc in found[:MAX_LOCATIONS]:
        text = source_line(loc.path, loc.line, cache)
        try:
            column = from_utf16(text, loc.character) + 1
        except ValueError:
            column = loc.character + 1
        text = text.strip()
        inside = loc.path.is_relative_to(ctx.workspace)
        rel = loc.path.relative_to(ctx.workspace) if inside else loc.path
        lines.append(
            f"{rel}:{loc.line + 1}:{column}: {text[:LINE_CHARS]}"
            + ("" if inside else "  [outside the workspace]")
        )
    if len(found) > MAX_LOCATIONS:
        lines.append(f"[and {len(found) - MAX_LOCATIONS} more]")
    return "\n".join(lines)


def _files(found: list[Location]) -> int:
    return len({loc.path for loc in found})


class _NavigationTool(Tool):
    def __init__(
        self,
        hub: Diagnostics,
        name: str,
        description: str,
        parameters: dict[str, Any],
        kind: ToolKind,
        required: tuple[str, ...],
    ) -> None:
        languages = ", ".join(e for spec in hub.navigable() for e in spec.extensions)
        super().__init__(
            name=name,
            description=f"{description} Works in {languages} files.",
            parameters=parameters,
            kind=kind,
            required=required,
        )
        self.hub = hub


class Definition(_NavigationTool):
    def __init__(self, hub: Diagnostics) -> None:
        super().__init__(
            hub,
            "definition",
            "Find where a function, class, method or variable is defined, "
            "using the language server. Give a file where the name is used, "
            "and the name.",
            {"path": _PATH, "line": _LINE, "symbol": _SYMBOL},
            "read",
            ("path", "symbol"),
        )

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        target = _target(args, ctx)
        found = await locations(
            self.hub,
            "textDocument/definition",
            target.path,
            target.line,
            target.character,
            f"find {target.symbol}",
        )
        if not found:
            return ToolOutput(
                f"the language server knows no definition of {target.where} "
                "(a builtin, or a name defined nowhere); use grep to look "
                "for it"
            )
        return ToolOutput(f"{target.where} is defined at:\n{_listing(found, ctx)}")


class References(_NavigationTool):
    def __init__(self, hub: Diagnostics) -> None:
        super().__init__(
            hub,
            "references",
            "List every place in the project where a function, class, method "
            "or variable is defined or used, using the language server. Give "
            "a file where the name appears, and the name.",
            {"path": _PATH, "line": _LINE, "symbol": _SYMBOL},
            "read",
            ("path", "symbol"),
        )

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        target = _target(args, ctx)
        found = await locations(
            self.hub,
            "textDocument/references",
            target.path,
            target.line,
            target.character,
            f"find the uses of {target.symbol}",
        )
        if not found:
            return ToolOutput(f"the language server found no use of {target.where}")
        many = "s" if len(found) > 1 else ""
        return ToolOutput(
            f"{target.where}: {len(found)} place{many} in {_files(found)} "
            f"file{'s' if _files(found) > 1 else ''}:\n{_listing(found, ctx)}"
        )


class Rename(_NavigationTool):
    def __init__(self, hub: Diagnostics) -> None:
        super().__init__(
            hub,
            "rename",
            "Rename a function, class, method, variable or parameter "
            "everywhere: its definition and every use, in every file, in one "
            "call (the language server finds them; imports included). Give a "
            "file where the name appears, the name and the new name.",
            {
                "path": _PATH,
                "line": _LINE,
                "symbol": _SYMBOL,
                "new_name": {"type": "string", "description": "The new name."},
            },
            "edit",
            ("path", "symbol", "new_name"),
        )

    async def _plan(
        self, args: dict[str, Any], ctx: ToolContext
    ) -> tuple[_Target, str, list[FileChange], int]:
        target = _target(args, ctx)
        new = args.get("new_name")
        if not isinstance(new, str) or not new.strip():
            raise ToolError("new_name must be the new name, e.g. total_price")
        new = plain_symbol(new)
        python = self.hub.server_for(target.path)
        if (
            python is not None
            and python.language_id == "python"
            and (not new.isidentifier() or keyword.iskeyword(new))
        ):
            raise ToolError(f"{new!r} is not a Python name; no file was changed")
        if new == target.symbol:
            raise ToolError(f"{target.symbol} already has that name; nothing would change")
        renamed = await rename_texts(
            self.hub, target.path, target.line, target.character, target.symbol, new
        )
        changes = await asyncio.to_thread(plan_changes, ctx, renamed.texts, names=target.symbol)
        if not changes:
            raise ToolError(f"the language server's rename of {target.where} changes no file")
        return target, new, changes, renamed.places

    async def preview(self, args: dict[str, Any], ctx: ToolContext) -> Preview:
        target, new, changes, _ = await self._plan(args, ctx)
        diff = changes_diff(changes)
        return Preview(
            summary=f"rename {target.symbol} to {new} in {', '.join(c.shown for c in changes)}",
            detail=diff,
            diff=diff,
        )

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        target, new, changes, places = await self._plan(args, ctx)
        summary = (
            f"renamed {target.symbol} to {new}: {places} "
            f"place{'s' if places != 1 else ''} in {len(changes)} "
            f"file{'s' if len(changes) > 1 else ''} "
            f"({', '.join(c.shown for c in changes)})"
        )
        return await apply_changes(ctx, changes, summary, self._written)

    async def _written(self, changes: Sequence[FileChange]) -> None:
        await self.hub.written([(c.path, c.after) for c in changes])


def navigation_tools(hub: Diagnostics | None) -> list[Tool]:
    """``definition``, ``references`` and ``rename`` on ``hub``'s servers, or none
    where no server can answer (diagnostics off, no server installed)."""
    if hub is None or not hub.navigable():
        return []
    return [Definition(hub), References(hub), Rename(hub)]
