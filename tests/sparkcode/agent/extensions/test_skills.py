"""Skills: found in three places, listed once in the system prompt, loaded by a tool."""

from __future__ import annotations

import io
import json
from pathlib import Path

from engine.paths import Paths
from sparkcode.agent.extensions.skills import load_skills
from sparkcode.cli._run import EXIT_OK, RunRequest, run_headless
from sparkcode.start import SessionOptions
from tests.support.http_server import serve, url
from tests.support.scripted import Reply


def skill(root: Path, folder: str, front: str | None, body: str = "Do the thing.\n") -> Path:
    path = root / folder / "SKILL.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text((f"---\n{front}---\n\n" if front is not None else "") + body)
    return path


def test_skills_are_found_sorted_shadowed_and_bad_ones_named(
    workspace: Path, tmp_path: Path
) -> None:
    user = tmp_path / "user-skills"
    skill(workspace / ".claude/skills", "zeta", "name: zeta\ndescription: Last one.\n")
    skill(workspace / ".agents/skills", "alpha", "name: alpha\ndescription: |\n  Two\n  lines\n")
    skill(user, "alpha", "name: alpha\ndescription: The user's alpha.\n")
    skill(user, "mid", "description: Named by its folder.\n")
    bare = skill(workspace / ".agents/skills", "bare", None, "just text\n")
    skill(workspace / ".agents/skills", "nodesc", "name: nodesc\n")
    found = load_skills(workspace, user)
    assert [(s.name, s.description) for s in found.skills] == [
        ("alpha", "Two lines"),
        ("mid", "Named by its folder."),
        ("zeta", "Last one."),
    ]
    notes = "\n".join(found.notes)
    assert f"skill {bare.relative_to(workspace)} skipped: no front matter" in notes
    assert "nodesc/SKILL.md skipped: it has no description" in notes
    assert "shadowed by .agents/skills/alpha/SKILL.md" in notes
    section = found.prompt_section()
    assert section == load_skills(workspace, user).prompt_section()  # byte-stable
    assert section.index("- alpha: Two lines") < section.index("- mid:") < section.index("- zeta")
    assert load_skills(workspace, None).prompt_section().count("\n- ") == 2


async def test_the_model_loads_a_skill_with_the_skill_tool(workspace: Path, paths: Paths) -> None:
    skill(
        workspace / ".agents/skills",
        "release-notes",
        "name: release-notes\ndescription: Write release notes from git log.\n",
        "1. Run git log.\n2. Group by feature.\n",
    )
    (workspace / ".agents/skills/release-notes/template.md").write_text("# Notes\n")
    skill(paths.config_dir / "skills", "user-one", "name: user-one\ndescription: Mine.\n")
    with serve(
        [
            Reply(tool_calls=[("skill", json.dumps({"name": "release-notes"}))]),
            Reply(tool_calls=[("skill", json.dumps({"name": "nope"}))]),
            Reply(content=["done"]),
        ]
    ) as server:
        out, err = io.StringIO(), io.StringIO()
        code = await run_headless(
            RunRequest(
                prompt="write the notes",
                workspace=workspace,
                as_json=True,
                endpoint=url(server),
                session=SessionOptions(record=False),
            ),
            out=out,
            err=err,
        )
    assert code == EXIT_OK, err.getvalue()
    first = server.requests[0]
    system = first["messages"][0]["content"]
    assert system.endswith("- release-notes: Write release notes from git log.\n- user-one: Mine.")
    spec = next(t for t in first["tools"] if t["function"]["name"] == "skill")
    assert spec["function"]["parameters"]["properties"]["name"]["enum"] == [
        "release-notes",
        "user-one",
    ]
    results = [m["content"] for m in server.requests[2]["messages"] if m["role"] == "tool"]
    assert "1. Run git log.\n2. Group by feature." in results[0]
    assert "name: release-notes" not in results[0]  # the body, not the front matter
    assert "template.md" in results[0]
    assert "no skill named 'nope'; the skills are: release-notes, user-one" in results[1]


async def test_without_skills_the_prompt_and_tools_are_unchanged(workspace: Path) -> None:
    with serve([Reply(content=["hi"])]) as server:
        code = await run_headless(
            RunRequest(
                prompt="hi",
                workspace=workspace,
                as_json=True,
                endpoint=url(server),
                session=SessionOptions(record=False),
            ),
            out=io.StringIO(),
            err=io.StringIO(),
        )
    assert code == EXIT_OK
    body = server.requests[0]
    assert "# Skills" not in body["messages"][0]["content"]
    assert "skill" not in [t["function"]["name"] for t in body["tools"]]
