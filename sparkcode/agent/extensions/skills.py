"""Skills: ``SKILL.md`` folders the model loads when a task calls for one.

The shared convention of OpenCode, Claude Code, Codex and Crush: a folder
``<name>/SKILL.md`` under ``.agents/skills`` or ``.claude/skills`` in the
project, or ``skills`` in the user's config dir, whose YAML front matter gives
``name`` and ``description``::

    ---
    name: release-notes
    description: Write release notes from the git log since the last tag.
    ---
    1. Run `git describe --tags --abbrev=0` ...

Only the names and descriptions go into the system prompt, sorted by name and
built once at session start, so the prompt prefix stays byte-stable (a few
hundred bytes for a dozen skills instead of their whole bodies); the ``skill``
tool returns a body when the model asks for it, read from disk at that moment.
Where two folders give the same name the project's ``.agents`` wins, then
``.claude``, then the user's, and the shadowed one is named in a note. A
``SKILL.md`` without front matter, or without a description, is skipped with a
note naming the file.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ..tools import Tool, ToolContext, ToolError, ToolOutput

PROJECT_DIRS: tuple[str, ...] = (".agents/skills", ".claude/skills")
FILE_NAME = "SKILL.md"
MAX_DESCRIPTION = 300
"""Characters of one description in the system prompt (longer ones are cut)."""
HEADING = "# Skills"


@dataclass(frozen=True)
class Skill:
    name: str
    description: str
    path: Path
    """The ``SKILL.md`` file."""

    def body(self) -> str:
        """The instructions after the front matter, read now."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ToolError(f"skill {self.name}: cannot read {self.path} ({exc})") from None
        split = split_front_matter(text)
        return split[1] if split is not None else text


@dataclass(frozen=True)
class Skills:
    """The skills found for one session, by name, and what was skipped (``notes``)."""

    skills: tuple[Skill, ...] = ()
    notes: tuple[str, ...] = ()

    def get(self, name: str) -> Skill | None:
        return next((s for s in self.skills if s.name == name), None)

    def prompt_section(self) -> str:
        """What the system prompt gains ("" with no skills)."""
        if not self.skills:
            return ""
        rows = [f"- {s.name}: {_cut(s.description)}" for s in self.skills]
        return "\n".join(
            [
                "",
                "",
                HEADING,
                "",
                "Skills are instructions for particular tasks. When the task "
                "matches one below, call the skill tool with its name first and "
                "follow what it returns.",
                "",
                *rows,
            ]
        )


def load_skills(workspace: Path, user_dir: Path | None) -> Skills:
    """Find the skills of ``workspace`` and the user's ``user_dir`` (may not exist)."""
    roots = [workspace / d for d in PROJECT_DIRS] + ([user_dir] if user_dir else [])
    found: dict[str, Skill] = {}
    notes: list[str] = []
    for root in roots:
        if not root.is_dir():
            continue
        for path in sorted(root.glob(f"*/{FILE_NAME}")):
            skill, note = _read(path, workspace)
            if note is not None:
                notes.append(note)
            if skill is None:
                continue
            if skill.name in found:
                notes.append(
                    f"skill {skill.name} in {_shown(path, workspace)} is shadowed by "
                    f"{_shown(found[skill.name].path, workspace)}"
                )
                continue
            found[skill.name] = skill
    return Skills(tuple(sorted(found.values(), key=lambda s: s.name)), tuple(notes))


def _read(path: Path, workspace: Path) -> tuple[Skill | None, str | None]:
    shown = _shown(path, workspace)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return None, f"skill {shown} skipped: cannot read it ({exc})"
    split = split_front_matter(text)
    if split is None:
        return None, (
            f"skill {shown} skipped: no front matter (start the file with '---', "
            "then 'name:' and 'description:' lines, then '---')"
        )
    try:
        meta: Any = yaml.safe_load(split[0])
    except yaml.YAMLError as exc:
        return None, f"skill {shown} skipped: its front matter is not YAML ({exc})"
    if not isinstance(meta, dict):
        return None, f"skill {shown} skipped: its front matter is not a mapping"
    name = meta.get("name", path.parent.name)
    description = meta.get("description")
    if not isinstance(name, str) or not name.strip() or any(c.isspace() for c in name):
        return None, f"skill {shown} skipped: name must be one word"
    if not isinstance(description, str) or not description.strip():
        return None, f"skill {shown} skipped: it has no description in its front matter"
    return Skill(name.strip(), " ".join(description.split()), path), None


def split_front_matter(text: str) -> tuple[str, str] | None:
    """(front matter, body), or None when the file does not open with ``---``."""
    lines = text.lstrip("\ufeff").splitlines(keepends=True)
    if not lines or lines[0].strip() != "---":
        return None
    for i in range(1, len(lines)):
        if lines[i].strip() == "---":
            return "".join(lines[1:i]), "".join(lines[i + 1 :]).lstrip("\n")
    return None


def _cut(text: str) -> str:
    return text if len(text) <= MAX_DESCRIPTION else text[: MAX_DESCRIPTION - 1] + "…"


def _shown(path: Path, workspace: Path) -> str:
    try:
        return str(path.relative_to(workspace))
    except ValueError:
        return str(path)


class SkillTool(Tool):
    """``skill(name)``: a skill's instructions, and the other files of its folder."""

    def __init__(self, skills: Skills) -> None:
        names = [s.name for s in skills.skills]
        super().__init__(
            name="skill",
            description="Load a skill's instructions by name (the skills are listed in the "
            "system prompt). Call it before a task a skill describes.",
            parameters={
                "name": {"type": "string", "enum": names, "description": "The skill's name."}
            },
            kind="read",
            required=("name",),
        )
        self.skills = skills

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        name = args.get("name")
        skill = self.skills.get(name) if isinstance(name, str) else None
        if skill is None:
            known = ", ".join(s.name for s in self.skills.skills)
            raise ToolError(f"no skill named {name!r}; the skills are: {known}")
        body = skill.body().rstrip("\n")
        others = sorted(
            str(p.relative_to(skill.path.parent))
            for p in skill.path.parent.rglob("*")
            if p.is_file() and p != skill.path
        )[:50]
        text = f"# Skill {skill.name} ({skill.path.parent})\n\n{body}"
        if others:
            text += "\n\nFiles in the skill's folder: " + ", ".join(others)
        return ToolOutput(text)


def skill_tools(skills: Skills) -> Sequence[Tool]:
    """The ``skill`` tool when there are skills (none: the tool list is unchanged)."""
    return [SkillTool(skills)] if skills.skills else []


__all__ = [
    "FILE_NAME",
    "PROJECT_DIRS",
    "Skill",
    "SkillTool",
    "Skills",
    "load_skills",
    "skill_tools",
    "split_front_matter",
]
