"""Image attachments in the agent: read and checked by their bytes, sent as content
parts, refused by name, and counted by pixels (not base64) in the context figures."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path
from typing import Any

import pytest

from engine.errors import ProfileError, UserError
from engine.paths import Paths
from engine.profiles._schema import parse_profile
from sparkcode.agent.core.context import compact, estimate_tokens
from sparkcode.agent.core.context_report import context_report
from sparkcode.agent.core.events import TurnStarted
from sparkcode.agent.core.images import (
    ImageError,
    content_text,
    image_tokens,
    load_image,
    sniff,
    user_content,
)
from sparkcode.cli._run import EXIT_OK, RunRequest, run_headless
from sparkcode.config import ConfigError, parse_config
from sparkcode.start import AgentSession, SessionOptions, build_session, resolve_target
from tests.support import ROOT
from tests.support.http_server import serve, url
from tests.support.images import image_bytes, write_image
from tests.support.scripted import Reply, ScriptedServer

MIB = 1024 * 1024


@pytest.mark.parametrize(
    ("fmt", "mime"), [("PNG", "image/png"), ("JPEG", "image/jpeg"), ("WEBP", "image/webp")]
)
def test_the_type_and_size_come_from_the_bytes(fmt: str, mime: str) -> None:
    assert sniff(image_bytes(fmt, (321, 123))) == (mime, 321, 123)


def test_the_extension_is_never_trusted(tmp_path: Path) -> None:
    fake = tmp_path / "shot.png"
    fake.write_text("just text, not a picture\n")
    with pytest.raises(
        ImageError,
        match=r"shot.png: it is not a PNG, JPEG or WebP image "
        r"\(it starts with 6a 75",
    ):
        load_image(fake, max_bytes=MIB)
    real = tmp_path / "photo.txt"
    write_image(real, "JPEG")
    assert load_image(real, max_bytes=MIB).mime == "image/jpeg"


def test_refusals_name_the_file_and_the_problem(tmp_path: Path) -> None:
    big = tmp_path / "big.png"
    big.write_bytes(image_bytes("PNG") + b"\0" * (2 * MIB))
    with pytest.raises(ImageError, match=r"big.png: it is 2.0 MiB, over the 1.0 MiB cap"):
        load_image(big, max_bytes=MIB)
    with pytest.raises(ImageError, match="gone.png: no such file"):
        load_image(tmp_path / "gone.png", max_bytes=MIB)
    with pytest.raises(ImageError, match="is a directory"):
        load_image(tmp_path, max_bytes=MIB)
    (tmp_path / "empty.png").write_bytes(b"")
    with pytest.raises(ImageError, match="the file is empty"):
        load_image(tmp_path / "empty.png", max_bytes=MIB)


def test_content_parts_carry_the_exact_bytes_as_a_data_url(tmp_path: Path) -> None:
    data = write_image(tmp_path / "a.png")
    image = load_image(tmp_path / "a.png", max_bytes=MIB, name="a.png")
    assert user_content("hi", []) == "hi"
    content = user_content("look", [image])
    assert content == [
        {"type": "text", "text": "look"},
        {
            "type": "image_url",
            "image_url": {"url": "data:image/png;base64," + base64.b64encode(data).decode()},
        },
    ]
    assert image.describe() == f"a.png (PNG, 64x48, {len(data)} B)"
    assert content_text(content) == "look\n[image: PNG 64x48]"


async def test_images_count_by_pixels_and_compaction_keeps_their_note(tmp_path: Path) -> None:
    write_image(tmp_path / "big.png", size=(1280, 800))
    image = load_image(tmp_path / "big.png", max_bytes=MIB)
    message: dict[str, Any] = {"role": "user", "content": user_content("see", [image])}
    assert image_tokens(image.data_url) == 1307  # ceil(1280 * 800 / 784 = 1306.1)
    # The text counts at 4 characters a token, the image by its pixels, never its base64.
    assert 1307 < estimate_tokens([message]) < 1307 + 40
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "s"},
        message,
        {"role": "assistant", "content": "a red square"},
        {"role": "user", "content": "next"},
    ]
    compacted, summarised = await compact(history, None, 10_000)
    assert summarised == 2 and "[image: PNG 1280x800]" in compacted[1]["content"]


async def _session(
    workspace: Path, paths: Paths, server: ScriptedServer, *, vision: bool
) -> AgentSession:
    target = resolve_target(workspace, paths, endpoint="http://engine.test/v1", vision=vision)
    return await build_session(
        target,
        SessionOptions(
            start_engine=False, transport=server.transport(), mcp=False, permission_mode="full-auto"
        ),
        paths,
    )


async def test_the_request_carries_the_image_and_context_shows_it(
    workspace: Path, paths: Paths
) -> None:
    data = write_image(workspace / "shot.png", size=(280, 280))
    server = ScriptedServer([Reply(content=["a red square"])])
    session = await _session(workspace, paths, server, vision=True)
    try:
        agent = session.agent
        image = agent.load_image(Path("shot.png"))
        events = [e async for e in agent.run_turn("what is this?", [image])]
    finally:
        await session.aclose()
    assert isinstance(events[0], TurnStarted)
    assert events[0].images == (f"shot.png (PNG, 280x280, {len(data)} B)",)
    user = server.requests[0]["messages"][-1]
    assert user["content"][1]["image_url"]["url"] == (
        "data:image/png;base64," + base64.b64encode(data).decode()
    )
    report = dict(context_report(agent).parts)
    assert report["images"] == 100  # 280 * 280 / 784
    assert report["history"] < 100  # the base64 (~1 KiB here) is not counted as text


async def test_a_text_only_model_is_refused_by_name_and_nothing_changes(
    workspace: Path, paths: Paths
) -> None:
    write_image(workspace / "shot.png")
    server = ScriptedServer([])
    session = await _session(workspace, paths, server, vision=False)
    try:
        agent = session.agent
        before = list(agent.history)
        with pytest.raises(ImageError, match="model m is text-only here"):
            agent.load_image(Path("shot.png"))
        image = load_image(workspace / "shot.png", max_bytes=MIB)
        with pytest.raises(ImageError, match="model m is text-only"):
            async for _ in agent.run_turn("look", [image]):
                pass
        assert agent.history == before and not server.requests
    finally:
        await session.aclose()


def test_vision_is_declared_by_the_profile_or_the_endpoint_flag(
    tmp_path: Path, paths: Paths
) -> None:
    base = '[profile]\nname = "x"\n[model]\nbuiltin = "smollm2-135m-instruct"\n'
    assert not parse_profile(base, tmp_path / "x.toml").vision
    assert parse_profile(base + "vision = true\n", tmp_path / "x.toml").vision
    with pytest.raises(ProfileError, match="vision"):
        parse_profile(base + 'vision = "yes"\n', tmp_path / "x.toml")
    endpoint = (
        '[profile]\nname = "e"\nkind = "endpoint"\n[endpoint]\n'
        'base_url = "http://h/v1"\nvision = true\n'
    )
    assert parse_profile(endpoint, tmp_path / "e.toml").vision
    spark = ROOT / "engine/profiles/glm53-flash-spark.toml"
    assert parse_profile(spark.read_text(), spark).vision
    with pytest.raises(Exception, match="--vision is for --endpoint"):
        resolve_target(tmp_path, paths, profile="cpu-demo", vision=True)


def test_the_size_cap_is_a_setting(tmp_path: Path) -> None:
    assert parse_config("[agent]\nimage_max_mib = 2\n", tmp_path / "c").image_max_mib == 2.0
    with pytest.raises(ConfigError, match="image_max_mib"):
        parse_config("[agent]\nimage_max_mib = 0\n", tmp_path / "c")


async def test_run_attaches_images_and_refuses_a_bad_one_before_sending(workspace: Path) -> None:
    data = write_image(workspace / "shot.webp", "WEBP", (20, 10))
    (workspace / "notes.png").write_text("text")
    with serve([Reply(content=["a red bar"])]) as server:
        out, err = io.StringIO(), io.StringIO()
        code = await run_headless(
            RunRequest(
                prompt="describe it",
                workspace=workspace,
                as_json=True,
                endpoint=url(server),
                vision=True,
                images=(workspace / "shot.webp",),
            ),
            out=out,
            err=err,
        )
        assert code == EXIT_OK, err.getvalue()
        with pytest.raises(UserError, match="notes.png: it is not a PNG, JPEG or WebP"):
            await run_headless(
                RunRequest(
                    prompt="again",
                    workspace=workspace,
                    endpoint=url(server),
                    vision=True,
                    images=(workspace / "notes.png",),
                ),
                out=io.StringIO(),
                err=io.StringIO(),
            )
    assert len(server.requests) == 1
    parts = server.requests[0]["messages"][-1]["content"]
    assert parts[1]["image_url"]["url"] == (
        "data:image/webp;base64," + base64.b64encode(data).decode()
    )
    started = json.loads(out.getvalue().splitlines()[0])
    assert started["images"] == [f"{workspace / 'shot.webp'} (WebP, 20x10, {len(data)} B)"]
