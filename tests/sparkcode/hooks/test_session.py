"""A session's hooks: the project's run only once it is trusted (asked, remembered), a
malformed project file is a note, not a failed start (real shells, scripted server)."""

from __future__ import annotations

from pathlib import Path

from engine.paths import Paths
from sparkcode.agent import HookRan
from sparkcode.agent.extensions.hooks import Hooks
from sparkcode.hooks import HookSpec, TrustStore
from sparkcode.hooks.session import session_hooks
from tests.sparkcode.agent.core.test_loop import make_agent, of, run
from tests.support.scripted import Reply, ScriptedServer


async def test_project_hooks_run_only_once_the_project_is_trusted(
    workspace: Path, paths: Paths
) -> None:
    (workspace / ".sparkcode").mkdir()
    (workspace / ".sparkcode" / "hooks.toml").write_text('[[Stop]]\ncommand = "true"\n')
    user = (HookSpec("Stop", "echo user"),)

    async def start(trust: bool | None, answer: bool | None = None) -> tuple[Hooks, list[str]]:
        async def ask(ws: Path, specs: tuple[HookSpec, ...]) -> bool:
            assert ws == workspace and specs[0].command == "true"
            assert answer is not None
            return answer

        return await session_hooks(
            workspace,
            user,
            paths,
            trust=trust,
            ask=ask if answer is not None else None,
            session_id="s",
            transcript=None,
        )

    got, notes = await start(None)  # `run` without a terminal and without the flag
    assert got.specs == user and "not trusted" in notes[0] and "--trust-project" in notes[0]
    got, _ = await start(None, answer=False)
    assert got.specs == user and not TrustStore(paths.state_dir).is_trusted(workspace)
    # A real shell proves the untrusted hook is not run at all.
    server = ScriptedServer([Reply(content=["ok"])])
    agent = make_agent(server, workspace)
    agent.hooks = got
    assert [r.command for r in of(await run(agent, "hi"), HookRan)] == ["echo user"]
    got, _ = await start(None, answer=True)  # asked once, remembered
    assert [s.command for s in got.specs] == ["echo user", "true"]
    got, notes = await start(None)
    assert len(got.specs) == 2 and "project hooks: 1" in notes[0]


async def test_a_malformed_project_hook_file_is_a_note_not_a_failed_start(
    workspace: Path, paths: Paths
) -> None:
    (workspace / ".sparkcode").mkdir()
    (workspace / ".sparkcode" / "hooks.toml").write_text("[[Stop]\n")
    got, notes = await session_hooks(
        workspace, (), paths, trust=True, ask=None, session_id=None, transcript=None
    )
    assert not got.specs and "malformed TOML" in notes[0]
