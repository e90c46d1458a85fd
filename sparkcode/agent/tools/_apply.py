"""Changes of several files at once through the edit tools' own path: the ``rename``
tool (``sparkcode.agent.lsp``) turns a language server's edits into whole new texts,
and they are checked and written here as ``edit_file`` checks and writes one.

Every file is checked before any is written: inside the workspace and not in
``.git``, not kept by the turn's message, unchanged since the change was computed,
and passed by the syntax and lost-definitions guards. Then all are written; a write
that fails puts the files already written back. The call's kind is ``edit``, so its
approval, undo snapshot and diff are those of any edit; each written file's result
then gets :func:`._after_edit.checked_edit`'s notes (names still used elsewhere, the
language server's new problems).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from ._after_edit import checked_edit
from ._base import ToolContext, ToolError, ToolOutput
from ._confine import display, resolve_in_workspace
from ._files import _read_text, unified_diff
from ._kept import refuse_a_kept_file
from ._lost import refuse_lost_definitions
from ._syntax import refuse_broken_syntax


@dataclass(frozen=True)
class FileChange:
    """One file's change, checked: its path (resolved), how it is shown, its text now
    and the text it gets."""

    path: Path
    shown: str
    before: str
    after: str


def plan_changes(
    ctx: ToolContext, texts: Sequence[tuple[Path, str, str]], *, names: str = ""
) -> list[FileChange]:
    """``texts`` (a path, the text the change was computed from, the new text) checked
    as the edit tools check an edit; a :class:`ToolError` naming the file and saying
    that nothing was changed otherwise. ``names``: what the call itself names (a
    rename's old name), which the lost-definitions guard lets go as a message's."""
    guarded = replace(ctx, task=f"{ctx.task}\n{names}") if names else ctx
    changes: list[FileChange] = []
    for raw, base, after in texts:
        try:
            path = resolve_in_workspace(ctx.workspace, str(raw), for_write=True)
            shown = display(ctx.workspace, path)
            if any(c.path == path for c in changes):
                raise ToolError(f"{shown} is changed twice")
            refuse_a_kept_file(guarded, shown)
            now = _read_text(path, shown, ctx.workspace)
            if now != base:
                raise ToolError(f"{shown} changed after the change was computed")
            refuse_broken_syntax(guarded, path, shown, now, after)
            refuse_lost_definitions(guarded, path, shown, now, after, tool="edit_file")
        except ToolError as exc:
            raise ToolError(f"{exc}. No file was changed.") from None
        if after != now:
            changes.append(FileChange(path, shown, now, after))
    return changes


def changes_diff(changes: Sequence[FileChange]) -> str:
    """The unified diff of every change, file after file."""
    return "".join(unified_diff(c.before, c.after, c.shown) for c in changes)


Written = Callable[[Sequence[FileChange]], Awaitable[None]]
"""Told the files once all are written, before their checks (the rename tells its
language server, which would otherwise check each file against the others' old
texts)."""


async def apply_changes(
    ctx: ToolContext,
    changes: Sequence[FileChange],
    summary: str,
    written_hook: Written | None = None,
) -> ToolOutput:
    """Write ``changes`` (from :func:`plan_changes`), all or none, and the result:
    ``summary``, then each file's after-edit notes."""
    written: list[FileChange] = []
    for change in changes:
        try:
            # Bytes, so each file's own line endings are kept as they are.
            change.path.write_bytes(change.after.encode("utf-8"))
        except OSError as exc:
            for done in written:
                done.path.write_bytes(done.before.encode("utf-8"))
            raise ToolError(
                f"cannot write {change.shown}: {exc.strerror}; the files "
                "written before it were put back, so no file was changed"
            ) from None
        written.append(change)
    if written_hook is not None:
        await written_hook(changes)
    output = ToolOutput(summary, diff=changes_diff(changes))
    notices: list[str] = []
    for change in changes:
        output = await checked_edit(
            ctx,
            replace(output, notice=None),
            change.path,
            change.shown,
            change.before,
            change.after,
        )
        if output.notice:
            notices.append(output.notice)
    return replace(output, notice="; ".join(dict.fromkeys(notices)) or None)
