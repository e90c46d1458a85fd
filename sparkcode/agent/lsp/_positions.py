"""Positions between the model's words and LSP's: a name on a 1-based line to an LSP
position, LSP ranges (UTF-16 code units, the one encoding every server speaks) to
string offsets, and a server's ``WorkspaceEdit`` to each file's edits.

Pure functions; the tools in ``_nav_tools`` turn their ``ValueError`` into the
model's error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

_EOL = re.compile(r"\r\n|\r|\n")
"""LSP's line ends: a position's line counts all three."""


@dataclass(frozen=True)
class TextEdit:
    """One replacement in one file, as string offsets."""

    start: int
    end: int
    new: str


def lines_of(text: str) -> list[str]:
    """``text``'s lines without their ends, as LSP counts them (a final end opens an
    empty last line)."""
    return _EOL.split(text)


def line_starts(text: str) -> list[int]:
    """The offset where each LSP line of ``text`` starts."""
    return [0, *(m.end() for m in _EOL.finditer(text))]


def utf16_units(line: str, index: int) -> int:
    """The UTF-16 column of ``line[index]`` (a character outside the BMP is two)."""
    return len(line[:index].encode("utf-16-le")) // 2


def from_utf16(line: str, units: int) -> int:
    """The string index of UTF-16 column ``units`` in ``line``; ValueError past its end."""
    count = 0
    for index, char in enumerate(line):
        if count >= units:
            return index
        count += 2 if ord(char) > 0xFFFF else 1
    if count >= units:
        return len(line)
    raise ValueError(f"column {units} is past the end of the line ({count} columns)")


def offset_of(text: str, starts: list[int], position: Any) -> int:
    """The offset in ``text`` of an LSP ``Position``; ValueError when it is not one of
    ``text``'s (the server computed it for another text)."""
    if not isinstance(position, dict):
        raise ValueError(f"not a position: {position!r}")
    line, character = position.get("line"), position.get("character")
    if not isinstance(line, int) or not isinstance(character, int) or line < 0 or character < 0:
        raise ValueError(f"not a position: {position!r}")
    if line >= len(starts):
        raise ValueError(f"line {line + 1} is past the end ({len(starts)} lines)")
    begin = starts[line]
    end = starts[line + 1] if line + 1 < len(starts) else len(text)
    content = _EOL.sub("", text[begin:end])
    return begin + from_utf16(content, character)


def symbol_index(line: str, symbol: str) -> int | None:
    """Where ``symbol`` first stands on ``line`` as a whole name (not inside a longer
    one: ``total`` is not found in ``subtotal``), or None."""
    pattern = (
        rf"(?<![\w]){re.escape(symbol)}(?![\w])"
        if symbol[:1].isidentifier() or symbol[:1] == "_"
        else re.escape(symbol)
    )
    found = re.search(pattern, line)
    return found.start() if found else None


def plain_symbol(raw: str) -> str:
    """The name the model meant: ``calc_total()`` and ``shop.calc_total`` are
    ``calc_total``, surrounding quotes and backticks dropped."""
    name = raw.strip().strip("`'\"").strip()
    if name.endswith("()"):
        name = name[:-2]
    if "." in name and all(part.isidentifier() for part in name.split(".")):
        name = name.rsplit(".", 1)[1]
    return name


def uri_path(uri: Any) -> Path:
    """The file a ``file://`` URI names; ValueError for any other."""
    if not isinstance(uri, str):
        raise ValueError(f"not a URI: {uri!r}")
    parsed = urlparse(uri)
    if parsed.scheme != "file":
        raise ValueError(f"{uri} is not a file")
    return Path(unquote(parsed.path))


@dataclass(frozen=True)
class FileEdits:
    """A ``WorkspaceEdit``'s edits of one file, as the server sent them."""

    path: Path
    edits: tuple[dict[str, Any], ...]
    """LSP ``TextEdit`` objects (``range``, ``newText``)."""
    version: int | None = None
    """The document version the server computed them for (None: not said)."""


def workspace_edits(edit: Any) -> list[FileEdits]:
    """Each file's edits in a ``WorkspaceEdit`` (``documentChanges`` or ``changes``);
    ValueError for what cannot be applied as edits of existing files (a file created,
    renamed or deleted, or a shape not LSP's)."""
    if not isinstance(edit, dict):
        raise ValueError(f"not a WorkspaceEdit: {edit!r}"[:200])
    out: dict[Path, FileEdits] = {}

    def add(path: Path, edits: Any, version: Any) -> None:
        if not isinstance(edits, list) or not all(isinstance(e, dict) for e in edits):
            raise ValueError(f"the edits of {path} are not a list of TextEdits")
        known = out.get(path)
        both = (*known.edits, *edits) if known else tuple(edits)
        out[path] = FileEdits(path, both, version if isinstance(version, int) else None)

    changes = edit.get("documentChanges")
    if isinstance(changes, list):
        for change in changes:
            if not isinstance(change, dict):
                raise ValueError(f"not a document change: {change!r}"[:200])
            kind = change.get("kind")
            if kind is not None:
                what = kind if kind in ("create", "rename", "delete") else "change"
                raise ValueError(
                    f"the server's answer would also {what} a file "
                    f"({change.get('uri') or change.get('oldUri')}); only "
                    "edits of existing files are applied"
                )
            document = change.get("textDocument")
            if not isinstance(document, dict):
                raise ValueError("a document change names no document")
            add(uri_path(document.get("uri")), change.get("edits"), document.get("version"))
    elif isinstance(edit.get("changes"), dict):
        for uri, edits in edit["changes"].items():
            add(uri_path(uri), edits, None)
    return list(out.values())


def text_edits(text: str, edits: tuple[dict[str, Any], ...]) -> list[TextEdit]:
    """``edits`` as offsets in ``text``, in order; ValueError for a range that is not
    in ``text`` or edits that overlap."""
    starts = line_starts(text)
    out = []
    for edit in edits:
        where = edit.get("range")
        new = edit.get("newText")
        if not isinstance(where, dict) or not isinstance(new, str):
            raise ValueError(f"not a TextEdit: {edit!r}"[:200])
        start, end = (
            offset_of(text, starts, where.get("start")),
            offset_of(text, starts, where.get("end")),
        )
        if end < start:
            raise ValueError(f"a range ends before it starts: {where!r}")
        out.append(TextEdit(start, end, new))
    out.sort(key=lambda e: (e.start, e.end))
    for before, after in zip(out, out[1:], strict=False):
        if after.start < before.end or (
            after.start == before.start and after.end == before.end and before.end > before.start
        ):
            raise ValueError(f"two edits overlap at offset {after.start}")
    return out


def applied(text: str, edits: list[TextEdit]) -> str:
    """``text`` with ``edits`` (sorted, not overlapping) applied."""
    parts, at = [], 0
    for edit in edits:
        parts += [text[at : edit.start], edit.new]
        at = edit.end
    parts.append(text[at:])
    return "".join(parts)
