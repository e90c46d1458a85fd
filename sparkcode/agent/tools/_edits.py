"""Search/replace edits: edit_file (one replacement) and multi_edit (several, atomic).

Both place each replacement with :func:`._match.plan_replacement`: exact and
unique first, whitespace-tolerant (still unique) only when the exact text is
absent. multi_edit applies its replacements in order to the text in memory and
writes the file once, only when every one of them applied.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ._after_edit import checked_edit
from ._base import Preview, Tool, ToolContext, ToolError, ToolOutput
from ._confine import display, resolve_in_workspace
from ._files import _read_text, read_file_residue, unified_diff
from ._guesses import instead_of_a_guess
from ._kept import refuse_a_kept_file
from ._lost import refuse_lost_definitions
from ._match import MatchError, exact_matches, plan_replacement
from ._syntax import refuse_broken_syntax

_OLD = {"type": "string", "description": "The text to replace, copied from the file."}
_NEW = {"type": "string", "description": "Replacement text."}
_ALL = {"type": "boolean", "description": "Replace every exact occurrence (default false)."}


_TAIL_LINES = 3
"""Lines of the file's end an empty old_string's error quotes."""


def _empty_old_string(text: str, shown: str) -> str:
    """The error for an empty old_string, with the lines to copy for adding at the end:
    the 1.5B sent ``old_string: ""`` to add a function (3 times in 2 tries of the agent
    suite, 2026-12-04), and was told only to use write_file, which it then used to
    replace the whole file."""
    tail = text.rstrip().splitlines()[-_TAIL_LINES:]  # as they are, so a copy matches
    while tail and not tail[0].strip():
        tail.pop(0)
    if not tail:
        return (
            f"old_string is empty and {shown} has no text to match; to create or "
            "fill a whole file use write_file"
        )
    return (
        f"old_string is empty. To add code at the end of {shown}, copy its last "
        "lines as old_string and send them followed by the new code as new_string; "
        "they are:\n" + "\n".join(tail) + "\n(To create or replace a whole file, "
        "use write_file.)"
    )


def apply_edit(
    text: str, old: Any, new: Any, replace_all: Any, shown: str, replace_all_offered: bool = True
) -> tuple[str, str]:
    """``text`` with one edit applied, and how it matched; raises ToolError."""
    if not isinstance(old, str) or not isinstance(new, str):
        raise ToolError("old_string and new_string must be strings")
    if not old:
        raise ToolError(_empty_old_string(text, shown))
    if old == new:
        raise ToolError("old_string and new_string are identical; nothing would change")
    residue = read_file_residue(new, old)
    if residue:
        raise ToolError(f"{shown} was not changed: new_string: {residue}")
    if replace_all is True and len(exact_matches(text, old)) > 1:
        return text.replace(old, new), "exact"
    try:
        r = plan_replacement(text, old, new, shown, replace_all_offered)
    except MatchError as exc:
        raise ToolError(str(exc)) from None
    return text[: r.start] + r.new + text[r.end :], r.how


def _note(hows: list[str]) -> str:
    tolerant = sorted({h for h in hows if h != "exact"})
    return f" (matched ignoring {', '.join(tolerant)})" if tolerant else ""


def _write(path: Path, shown: str, new: str) -> None:
    try:
        # Bytes, so the file's own line endings are kept as they are.
        path.write_bytes(new.encode("utf-8"))
    except OSError as exc:
        raise ToolError(f"cannot write {shown}: {exc.strerror}") from None


class EditFile(Tool):
    def __init__(self) -> None:
        super().__init__(
            name="edit_file",
            description="Replace a piece of text in a file. old_string should match the file "
            "exactly and only once (unless replace_all is true); if it differs "
            "only in whitespace or indentation, the one region it matches is "
            "edited. Read the file first.",
            parameters={
                "path": {"type": "string", "description": "Path relative to the workspace."},
                "old_string": _OLD,
                "new_string": _NEW,
                "replace_all": _ALL,
            },
            kind="edit",
            required=("path", "old_string", "new_string"),
        )

    def _plan(self, args: dict[str, Any], ctx: ToolContext) -> tuple[Path, str, str, str, str, str]:
        path = resolve_in_workspace(ctx.workspace, args["path"], for_write=True)
        path, twin = instead_of_a_guess(ctx.workspace, path)
        shown = display(ctx.workspace, path)
        refuse_a_kept_file(ctx, shown)
        text = _read_text(path, shown, ctx.workspace)
        new, how = apply_edit(
            text,
            args["old_string"],
            args["new_string"],
            args.get("replace_all"),
            shown,
            "edit_file.replace_all" not in ctx.hidden_arguments,
        )
        refuse_broken_syntax(ctx, path, shown, text, new)
        refuse_lost_definitions(ctx, path, shown, text, new, tool=self.name)
        return path, shown, text, new, how, f" ({twin[2:]})" if twin else ""

    async def preview(self, args: dict[str, Any], ctx: ToolContext) -> Preview:
        _, shown, old, new, how, twin = self._plan(args, ctx)
        diff = unified_diff(old, new, shown)
        return Preview(summary=f"edit {shown}{_note([how])}{twin}", detail=diff, diff=diff)

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        path, shown, old, new, how, twin = self._plan(args, ctx)
        _write(path, shown, new)
        return await checked_edit(
            ctx,
            ToolOutput(f"edited {shown}{_note([how])}{twin}", diff=unified_diff(old, new, shown)),
            path,
            shown,
            old,
            new,
        )


class MultiEdit(Tool):
    def __init__(self) -> None:
        super().__init__(
            name="multi_edit",
            description="Apply several replacements to one file, in order, all or nothing: "
            "each edit works like edit_file on the result of the ones before; "
            "if any fails, the file is left unchanged.",
            parameters={
                "path": {"type": "string", "description": "Path relative to the workspace."},
                "edits": {
                    "type": "array",
                    "description": "The replacements, in order.",
                    "items": {
                        "type": "object",
                        "required": ["old_string", "new_string"],
                        "properties": {"old_string": _OLD, "new_string": _NEW, "replace_all": _ALL},
                    },
                },
            },
            kind="edit",
            required=("path", "edits"),
        )

    def _plan(self, args: dict[str, Any], ctx: ToolContext) -> tuple[Path, str, str, str, str]:
        path = resolve_in_workspace(ctx.workspace, args["path"], for_write=True)
        shown = display(ctx.workspace, path)
        refuse_a_kept_file(ctx, shown)
        edits = args["edits"]
        if not isinstance(edits, list) or not edits:
            raise ToolError("edits must be a non-empty list of {old_string, new_string} objects")
        original = text = _read_text(path, shown, ctx.workspace)
        hows = []
        for n, edit in enumerate(edits, 1):
            if not isinstance(edit, dict) or "old_string" not in edit or "new_string" not in edit:
                raise ToolError(
                    f"edit {n} of {len(edits)} must be an object with old_string "
                    "and new_string; nothing was changed"
                )
            try:
                text, how = apply_edit(
                    text, edit["old_string"], edit["new_string"], edit.get("replace_all"), shown
                )
            except ToolError as exc:
                raise ToolError(
                    f"edit {n} of {len(edits)} failed, so none was applied "
                    f"(edits apply in order, each to the result of the ones "
                    f"before): {exc}"
                ) from None
            hows.append(how)
        refuse_broken_syntax(ctx, path, shown, original, text)
        refuse_lost_definitions(ctx, path, shown, original, text, tool=self.name)
        return path, shown, original, text, _note(hows)

    async def preview(self, args: dict[str, Any], ctx: ToolContext) -> Preview:
        _, shown, old, new, note = self._plan(args, ctx)
        diff = unified_diff(old, new, shown)
        return Preview(
            summary=f"edit {shown} ({len(args['edits'])} edits){note}", detail=diff, diff=diff
        )

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        path, shown, old, new, note = self._plan(args, ctx)
        _write(path, shown, new)
        return await checked_edit(
            ctx,
            ToolOutput(
                f"edited {shown} ({len(args['edits'])} edits){note}",
                diff=unified_diff(old, new, shown),
            ),
            path,
            shown,
            old,
            new,
        )
