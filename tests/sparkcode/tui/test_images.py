"""Attaching images in the TUI: /image, @path and a pasted path reach the request body
as a data URL; refusals are shown by name and lose nothing typed."""

from __future__ import annotations

import asyncio
import base64
import hashlib
from pathlib import Path

from textual import events

from engine.paths import Paths
from sparkcode.sessions import SessionStore, blobs_dir
from sparkcode.tui import SparkcodeApp
from sparkcode.tui.agent_port import AgentPort
from sparkcode.tui.attach import image_mentions, pasted_image
from sparkcode.tui.widgets import ErrorMessage, Notice
from tests.support.images import write_image
from tests.support.scripted import Reply, ScriptedServer

from .conftest import live_app
from .test_pilot import texts, until


def _url(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode()


def _image_urls(server: ScriptedServer, request: int = 0) -> list[str]:
    content = server.requests[request]["messages"][-1]["content"]
    assert isinstance(content, list), content
    return [p["image_url"]["url"] for p in content if p["type"] == "image_url"]


async def _send(app: SparkcodeApp, pilot: object, text: str) -> None:
    app.main.prompt.value = text
    await pilot.press("enter")  # type: ignore[attr-defined]


def test_mentions_and_pasted_paths(workspace: Path) -> None:
    write_image(workspace / "shots" / "my shot.png")
    write_image(workspace / "noext", "JPEG")
    (workspace / "notes.txt").write_text("x")
    assert image_mentions("see @a.png and @src/main.py, mail a@b.png @C.JPEG") == [
        "a.png",
        "C.JPEG",
    ]
    shot = workspace / "shots" / "my shot.png"
    for pasted in (
        str(shot),
        f"'{shot}'",
        str(shot).replace(" ", "\\ "),
        "file://" + str(shot).replace(" ", "%20"),
        "shots/my shot.png\n",
    ):
        assert pasted_image(pasted, workspace) == shot, pasted
    assert pasted_image("noext", workspace) == workspace / "noext"  # image bytes, no name
    assert pasted_image("notes.txt", workspace) is None  # a text file is pasted as text
    assert pasted_image(f"{shot}\n{shot}", workspace) is None  # more than a path
    assert pasted_image("missing.png", workspace) is None


async def test_image_command_at_path_and_paste_reach_the_request(
    workspace: Path, paths: Paths
) -> None:
    one = write_image(workspace / "one.png", size=(30, 20))
    two = write_image(workspace / "two.png", size=(40, 10))
    three = write_image(workspace / "three.png", size=(50, 50))
    server = ScriptedServer([Reply(content=["two images"]), Reply(content=["third"])])
    app = live_app(workspace, paths, server, vision=True)
    async with app.run_test(size=(110, 40)) as pilot:
        await _send(app, pilot, "/image one.png")
        await until(
            pilot,
            lambda: any("image attached: one.png (PNG, 30x20" in t for t in texts(app, Notice)),
        )
        await _send(app, pilot, "compare it with @two.png please")
        await until(pilot, lambda: len(server.requests) == 1 and not app.main.turn_running)
        assert _image_urls(server) == [_url(one), _url(two)]
        assert server.requests[0]["messages"][-1]["content"][0] == {
            "type": "text",
            "text": "compare it with @two.png please",
        }
        shown = texts(app, Notice)
        assert any(t.startswith("image: one.png (PNG, 30x20") for t in shown)
        assert any(t.startswith("image: @two.png (PNG, 40x10") for t in shown)
        # A pasted path attaches instead of being typed; the next message carries it.
        app.main.prompt.post_message(events.Paste(str(workspace / "three.png")))
        await until(pilot, lambda: bool(app.main.attachments.pending))
        assert app.main.prompt.value == ""
        await _send(app, pilot, "and this one?")
        await until(pilot, lambda: len(server.requests) == 2 and not app.main.turn_running)
        assert _image_urls(server, 1) == [_url(three)]
    # The recording keeps each image once, beside the session file.
    session_file = SessionStore(paths.sessions_dir).files()[0]
    stored = {p.name for p in blobs_dir(session_file).iterdir()}
    assert stored == {hashlib.sha256(d).hexdigest() for d in (one, two, three)}


async def test_refusals_name_the_problem_and_keep_the_prompt(workspace: Path, paths: Paths) -> None:
    (workspace / "fake.png").write_text("not a picture")
    write_image(workspace / "big.png", size=(2000, 2000))
    paths.config_file.parent.mkdir(parents=True, exist_ok=True)
    paths.config_file.write_text("[agent]\nimage_max_mib = 0.001\n")  # 1 KiB
    write_image(workspace / "ok.png", size=(8, 8))
    server = ScriptedServer([])
    app = live_app(workspace, paths, server, vision=True)
    async with app.run_test(size=(110, 40)) as pilot:
        prompt = app.main.prompt
        await _send(app, pilot, "what is in @fake.png ?")
        await until(pilot, lambda: bool(texts(app, ErrorMessage)))
        assert (
            "cannot attach @fake.png: it is not a PNG, JPEG or WebP image"
            in texts(app, ErrorMessage)[-1]
        )
        assert prompt.value == "what is in @fake.png ?"  # nothing typed is lost
        await _send(app, pilot, "/image big.png")
        await until(pilot, lambda: len(texts(app, ErrorMessage)) == 2)
        assert "cannot attach big.png: it is" in texts(app, ErrorMessage)[-1]
        assert "over the 1.0 KiB cap per image" in texts(app, ErrorMessage)[-1]
        # A refused paste is typed as text instead, so it is not lost either.
        prompt.value = "see "
        app.main.prompt.post_message(events.Paste("fake.png"))
        await until(pilot, lambda: len(texts(app, ErrorMessage)) == 3)
        await until(pilot, lambda: prompt.value == "see fake.png")
        assert not app.main.attachments.pending and not server.requests


async def test_a_text_only_model_refuses_images_by_name(workspace: Path, paths: Paths) -> None:
    write_image(workspace / "shot.png")
    server = ScriptedServer([Reply(content=["fine"])])
    app = live_app(workspace, paths, server)  # no --vision
    async with app.run_test(size=(110, 40)) as pilot:
        await _send(app, pilot, "look at @shot.png")
        await until(pilot, lambda: bool(texts(app, ErrorMessage)))
        error = texts(app, ErrorMessage)[-1]
        assert "model m is text-only here" in error and "stays in the prompt" in error
        assert app.main.prompt.value == "look at @shot.png"
        await _send(app, pilot, "/image shot.png")
        await until(pilot, lambda: len(texts(app, ErrorMessage)) == 2)
        assert "model m is text-only" in texts(app, ErrorMessage)[-1]
        assert not server.requests


async def test_a_pasted_image_path_does_not_hold_the_keys_while_the_agent_is_built(
    workspace: Path, paths: Paths
) -> None:
    # Seen in tmux: a screenshot's path pasted while the managed engine booted froze the
    # prompt until the engine was ready (about 2 minutes), because attaching waits for
    # the agent and the paste's handler awaited it on the screen's message queue.
    write_image(workspace / "shot.png", size=(12, 12))
    app = live_app(workspace, paths, ScriptedServer([]), vision=True)
    async with app.run_test(size=(110, 40)) as pilot:
        gate = asyncio.Event()
        built = app.main.ensure_agent

        async def slow_agent() -> AgentPort:
            await gate.wait()  # the engine is still booting
            return await built()

        app.main.ensure_agent = slow_agent  # type: ignore[method-assign]
        app.main.prompt.post_message(events.Paste(str(workspace / "shot.png")))
        await pilot.pause()
        try:  # bounded: with the handler awaiting the agent, the keys wait for the gate
            await asyncio.wait_for(pilot.press("h", "i"), timeout=10)
            await until(pilot, lambda: app.main.prompt.value == "hi")
            assert not app.main.attachments.pending
        finally:
            gate.set()
        await until(pilot, lambda: bool(app.main.attachments.pending))
        assert app.main.prompt.value == "hi"
