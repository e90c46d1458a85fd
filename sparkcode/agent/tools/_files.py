"""File tools: read_file, write_file, list_files, grep (edits are in ``_edits``)."""

from __future__ import annotations

import difflib
import fnmatch
import re
from itertools import islice
from pathlib import Path
from typing import Any

from ._after_edit import checked_edit
from ._base import Preview, Tool, ToolContext, ToolError, ToolOutput, cap_output
from ._confine import display, resolve_in_workspace
from ._guesses import instead_of_a_guess, refuse_a_guessed_directory
from ._kept import refuse_a_kept_file
from ._lost import refuse_lost_definitions
from ._syntax import refuse_broken_syntax
from ._walk import walk_files

MAX_READ_BYTES = 2_000_000


WHOLE_ON_BAD_RANGE = 200
"""A line range outside a file this short reads the whole file instead of failing:
Qwen2.5-Coder-1.5B asked for lines 20-30 of a 10-line client.py, was told "start_line
20 is past the end", asked again and was stopped by the loop guard (answer-constant);
one screen of a small file is what it wanted to see."""
HINT_FILES = 20
"""Names a missing-file error lists (a workspace of a few files is listed whole)."""
EMPTY = "holds no files"


def missing_hint(path: Path, workspace: Path | None) -> str:
    """What exists where ``path`` was looked for: the files under its nearest
    existing directory inside ``workspace``. Qwen2.5-Coder-1.5B, which has no
    list_files in its profile, guessed ``src/main/java/com/example/MyClass.java`` and
    ``src/greet.py`` for a root-level ``greet.py`` and, told only "does not exist;
    use list_files", repeated the guess until the loop guard ended the turn (4 of
    16 tries of the agent suite, docs/agent.md)."""
    if workspace is None:
        return "use list_files to see what is there"
    root = workspace.resolve()
    base = path.parent
    while base != root and not base.is_dir() and root in base.parents:
        base = base.parent
    if not base.is_dir() or (base != root and root not in base.parents):
        base = root
    return _files_under(root, base)


def directory_hint(path: Path, workspace: Path | None) -> str:
    """The files under a directory a file tool was given: in a tmux run (2026-12-04)
    the 1.5B's first call read ``.``, and the error's "use list_files"
    named a tool its profile does not offer (cpu-coder: read_file, write_file,
    edit_file, bash); the listing itself works with any tool list."""
    if workspace is None:
        return "give the path of a file in it"
    root = workspace.resolve()
    resolved = path.resolve()
    base = resolved if resolved == root or root in resolved.parents else root
    listing = _files_under(root, base)
    return listing if listing.endswith(EMPTY) else f"{listing}; read one of them by its path"


def _files_under(root: Path, base: Path) -> str:
    names = [str(p.relative_to(root)) for p in islice(walk_files(root, base), HINT_FILES + 1)]
    if not names:
        return f"{display(root, base)} {EMPTY}"
    more = ", ..." if len(names) > HINT_FILES else ""
    where = "the project" if base == root else display(root, base)
    return f"the files in {where} are: {', '.join(names[:HINT_FILES])}{more}"


def workspace_listing(root: Path, limit: int = 60) -> str:
    """The workspace's files, one per line (at most ``limit``), for a system prompt."""
    root = root.resolve()
    names = [str(p.relative_to(root)) for p in islice(walk_files(root, root), limit + 1)]
    more = f"\n(and more; {limit} shown)" if len(names) > limit else ""
    return "\n".join(names[:limit]) + more


def _read_text(path: Path, shown: str, workspace: Path | None = None) -> str:
    if not path.exists():
        raise ToolError(f"{shown} does not exist; {missing_hint(path, workspace)}")
    if path.is_dir():
        raise ToolError(f"{shown} is a directory; {directory_hint(path, workspace)}")
    try:
        size = path.stat().st_size
        if size > MAX_READ_BYTES:
            raise ToolError(
                f"{shown} is {size} bytes, too large to read whole; use grep or "
                "read_file with a line range"
            )
        data = path.read_bytes()
    except OSError as exc:
        raise ToolError(f"cannot read {shown}: {exc.strerror}") from None
    if b"\x00" in data[:8192]:
        raise ToolError(f"{shown} looks binary; only text files can be read")
    return data.decode("utf-8", "replace")


def unified_diff(old: str, new: str, shown: str) -> str:
    lines = difflib.unified_diff(
        old.splitlines(keepends=True),
        new.splitlines(keepends=True),
        fromfile=f"a/{shown}",
        tofile=f"b/{shown}",
    )
    return "".join(
        line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines
    )


def _int_arg(args: dict[str, Any], name: str, default: int | None) -> int | None:
    value = args.get(name, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            return int(str(value))
        except ValueError:
            raise ToolError(f"{name} must be an integer, got {value!r}") from None
    return value


class ReadFile(Tool):
    def __init__(self) -> None:
        super().__init__(
            name="read_file",
            description="Read a text file in the workspace, with line numbers. Optionally "
            "only lines start_line..end_line (1-based, inclusive).",
            parameters={
                "path": {"type": "string", "description": "Path relative to the workspace."},
                "start_line": {"type": "integer", "description": "First line (1-based)."},
                "end_line": {"type": "integer", "description": "Last line (inclusive)."},
            },
            kind="read",
            required=("path",),
        )

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        path = resolve_in_workspace(ctx.workspace, args["path"])
        path, twin_note = instead_of_a_guess(ctx.workspace, path)
        shown = display(ctx.workspace, path)
        lines = _read_text(path, shown, ctx.workspace).splitlines()
        start = _int_arg(args, "start_line", 1) or 1
        end = _int_arg(args, "end_line", None) or len(lines)
        note = twin_note
        if lines and (start > len(lines) or start < 1 or end < start):
            if len(lines) > WHOLE_ON_BAD_RANGE:
                past = f"has only {len(lines)} lines" if start > len(lines) else "is read"
                raise ToolError(
                    f"{shown} {past}; bad line range {start}..{end} (lines are "
                    "1-based and end_line >= start_line)"
                )
            note = f"; lines {start}-{end} do not exist, so the whole file is shown"
            start, end = 1, len(lines)
        end = min(end, len(lines))
        body = "\n".join(f"{n:6}\t{lines[n - 1]}" for n in range(start, end + 1))
        header = (
            f"{shown} (lines {start}-{end} of {len(lines)}{note})" if lines else f"{shown} (empty)"
        )
        return ToolOutput(cap_output(f"{header}\n{body}", ctx.output_cap))


_HEADER = re.compile(r"^\S.* \((lines \d+-\d+ of \d+[^)]*|empty)\)$")
"""read_file's first line: ``calc.py (lines 1-6 of 6)``."""
_NUMBERED = re.compile(r"^ *\d+\t")
"""read_file's line prefix: the number right-aligned in six columns, then a tab."""


def read_file_residue(new: str, old: str = "") -> str | None:
    """Why ``new`` (text about to be written) still carries read_file's framing that
    ``old`` (what it replaces) did not, or None. Qwen2.5-Coder-1.5B wrote a whole
    file that began with ``parity.py (lines 1-6 of 6)`` and kept line numbers
    (the agent suite's fix-line-even, 2026-12-02): a broken file, found only when
    the tests ran."""
    first = new.split("\n", 1)[0]
    if _HEADER.match(first) and not old.startswith(first):
        return (
            f"the content begins with read_file's header line ({first!r}), which is "
            "not part of the file; write only the file's own text"
        )
    lines = [line for line in new.splitlines() if line.strip()]
    numbered = sum(1 for line in lines if _NUMBERED.match(line))
    if (
        numbered >= 2
        and 2 * numbered >= len(lines)
        and not any(_NUMBERED.match(line) for line in old.splitlines())
    ):
        return (
            f"{numbered} of its {len(lines)} lines begin with read_file's line numbers "
            "(a number and a tab), which are not part of the file; write the lines "
            "without them"
        )
    return None


class WriteFile(Tool):
    def __init__(self) -> None:
        super().__init__(
            name="write_file",
            description="Create or overwrite a file in the workspace with the given content "
            "(parent directories are created).",
            parameters={
                "path": {"type": "string", "description": "Path relative to the workspace."},
                "content": {"type": "string", "description": "The complete new file content."},
            },
            kind="edit",
            required=("path", "content"),
        )

    def _plan(self, args: dict[str, Any], ctx: ToolContext) -> tuple[Path, str, str, str]:
        path = resolve_in_workspace(ctx.workspace, args["path"], for_write=True)
        shown = display(ctx.workspace, path)
        if path.is_dir():
            raise ToolError(f"{shown} is a directory; give a file path")
        refuse_a_kept_file(ctx, shown)
        content = args["content"]
        if not isinstance(content, str):
            raise ToolError("content must be a string")
        if not path.exists():
            refuse_a_guessed_directory(ctx.workspace, path, shown)
        existing = _read_text(path, shown) if path.exists() else None
        old = existing or ""
        residue = read_file_residue(content, old)
        if residue:
            raise ToolError(f"{shown} was not written: {residue}")
        refuse_broken_syntax(ctx, path, shown, existing, content)
        refuse_lost_definitions(ctx, path, shown, existing, content)
        return path, shown, old, content

    async def preview(self, args: dict[str, Any], ctx: ToolContext) -> Preview:
        path, shown, old, new = self._plan(args, ctx)
        diff = unified_diff(old, new, shown)
        verb = "overwrite" if path.exists() else "create"
        return Preview(summary=f"{verb} {shown}", detail=diff, diff=diff)

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        path, shown, old, new = self._plan(args, ctx)
        existed = path.exists()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(new, encoding="utf-8")
        except OSError as exc:
            raise ToolError(f"cannot write {shown}: {exc.strerror}") from None
        lines = new.count("\n") + (0 if new.endswith("\n") or not new else 1)
        verb = "overwrote" if existed else "created"
        return await checked_edit(
            ctx,
            ToolOutput(f"{verb} {shown} ({lines} lines)", diff=unified_diff(old, new, shown)),
            path,
            shown,
            old,
            new,
        )


class ListFiles(Tool):
    LIMIT = 500

    def __init__(self) -> None:
        super().__init__(
            name="list_files",
            description="List files under a workspace directory (recursive), optionally "
            "filtered by a glob such as '*.py' or 'src/**/test_*.py'.",
            parameters={
                "path": {"type": "string", "description": "Directory (default '.')."},
                "pattern": {"type": "string", "description": "Glob on the relative path."},
            },
            kind="read",
        )

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        base = resolve_in_workspace(ctx.workspace, str(args.get("path") or "."))
        if not base.is_dir():
            raise ToolError(f"{display(ctx.workspace, base)} is not a directory")
        pattern = args.get("pattern") or None
        root = ctx.workspace.resolve()
        out: list[str] = []
        total = 0
        for path in walk_files(root, base):
            rel = str(path.relative_to(root))
            if pattern and not (
                fnmatch.fnmatch(rel, pattern) or fnmatch.fnmatch(path.name, pattern)
            ):
                continue
            total += 1
            if len(out) < self.LIMIT:
                out.append(rel)
        if not out:
            return ToolOutput("no files match" if pattern else "the directory is empty")
        more = (
            f"\n[{total - len(out)} more not shown; narrow the pattern]" if total > len(out) else ""
        )
        return ToolOutput("\n".join(out) + more)


class Grep(Tool):
    LIMIT = 200

    def __init__(self) -> None:
        super().__init__(
            name="grep",
            description="Search file contents with a Python regular expression; prints "
            "path:line: text for each match.",
            parameters={
                "pattern": {"type": "string", "description": "Regular expression."},
                "path": {"type": "string", "description": "File or directory (default '.')."},
                "glob": {"type": "string", "description": "Only files matching this glob."},
                "ignore_case": {"type": "boolean"},
            },
            kind="read",
            required=("pattern",),
        )

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        try:
            regex = re.compile(args["pattern"], re.IGNORECASE if args.get("ignore_case") else 0)
        except (re.error, TypeError) as exc:
            raise ToolError(f"invalid regular expression: {exc}") from None
        base = resolve_in_workspace(ctx.workspace, str(args.get("path") or "."))
        root = ctx.workspace.resolve()
        files = [base] if base.is_file() else list(walk_files(root, base))
        glob = args.get("glob") or None
        hits: list[str] = []
        for path in files:
            rel = str(path.relative_to(root))
            if glob and not (fnmatch.fnmatch(rel, glob) or fnmatch.fnmatch(path.name, glob)):
                continue
            try:
                if path.stat().st_size > MAX_READ_BYTES:
                    continue
                data = path.read_bytes()
            except OSError:
                continue
            if b"\x00" in data[:8192]:
                continue
            for n, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
                if regex.search(line):
                    hits.append(f"{rel}:{n}: {line[:300]}")
                    if len(hits) > self.LIMIT:
                        hits.append(f"[more than {self.LIMIT} matches; narrow the search]")
                        return ToolOutput("\n".join(hits))
        return ToolOutput("\n".join(hits) if hits else "no matches")
