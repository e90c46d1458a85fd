"""What an agent session is set up with: its settings and the fixed texts it sends.

:class:`AgentSettings` holds the per-session knobs (the TUI's /effort, /budget and
/approve change some live); the prompts are constants because they are part of
the prompt prefix, which must stay byte-stable for the prefix cache.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.profiles import KNOB_NAMES, AgentKnobs

from ... import config as _config
from .images import DEFAULT_MAX_MIB

DEFAULT_SYSTEM_PROMPT = (
    "You are sparkcode, a coding agent working in a software project. Use the tools to "
    "inspect and change it: paths are relative to the project's top directory. Read a "
    "file before editing it; edit_file needs old_string to match exactly once. Prefer small, "
    "correct changes and check them (run the tests when there are some). When you are done, "
    "reply with a short summary of what you changed."
)
PLAN_NOTE = (
    "\n\n[Plan mode: only read-only tools run. Investigate, record the steps of the change "
    "with the todo tool (action add), then answer with the plan. Nothing is changed until "
    "the user approves the plan.]"
)
"""Appended to the user's message while the permission mode is ``plan``."""
# No "the workspace" in DEFAULT_SYSTEM_PROMPT: a small model wrote workspace/calc.py for
# calc.py (docs/experiments/2026-12-02-agent-suite.md). The small-model scaffolding's
# texts (the task reminders, the loop nudge) are in ``scaffold/prompts.py``.
ACT_PROMPT = (
    "The plan is approved: carry it out now, step by step, marking each todo item "
    "in_progress and then done as you go."
)
"""What switching from plan to act sends (the TUI's /act)."""


@dataclass
class AgentSettings:
    """Per-session knobs; the TUI's /effort, /budget, /approve change them live.

    The only place their defaults are written: a profile, ``config.toml`` and a
    start say :class:`~engine.profiles.AgentKnobs` (``None``: not said), and
    :func:`settings_from` lays them over these defaults. A knob lands on the field
    of its own name, but for those :data:`KNOB_TO_SETTING` converts.
    """

    reasoning_effort: str = "low"
    """Sent with every request (GLM-5.3-Flash treats a missing value as max)."""
    effort_placement: str = "request"
    """Where the effort is said (:data:`~.effort.PLACEMENTS`): ``request`` in each
    request's ``reasoning_effort``; ``glm`` (the GLM-5.x profiles) pins that field
    to the conversation's first effort, because the template renders it before the
    history, and says a change as a system message after the history."""
    thinking_token_budget: int = 1536
    """Sent with every request; -1 = unlimited (not sent)."""
    budget_margin: int = 64
    """Tokens past the budget tolerated before the client cuts the stream."""
    max_turns: int = 50
    """Model requests per user message."""
    max_tokens: int | None = None
    temperature: float | None = None
    """None: the server's default."""
    top_p: float | None = None
    seed: int | None = None
    """The session seed; every request sends ``seed`` derived from it and the
    request's number (:func:`~.sampling.request_seed`). None: no seed is sent."""
    thinking_history: bool = False
    """Within a turn's tool loop, send each assistant message's reasoning back
    (in ``thinking_field``); earlier turns' reasoning is dropped, as GLM-5.x's
    template does itself."""
    thinking_field: str = "reasoning_content"
    """The assistant-message field the server's chat template reads reasoning from."""
    force_tool: str | None = None
    """Name a tool in ``tool_choice`` on the first request of each turn, marked
    ``strict`` so vLLM constrains the arguments to its schema; for scripted runs."""
    force_tool_parameters: dict[str, Any] | None = None
    """A narrower JSON schema for the forced call's arguments. vLLM's grammar for
    the call allows any whitespace inside the arguments, so a random model may
    pad them until max_tokens; a model that writes JSON is held to the schema."""
    context_limit: int | None = None
    """The engine's max_model_len (from /v1/models)."""
    vision: bool = False
    """The model takes images (the profile's ``[model] vision``); without it an
    image attachment is refused by name, before anything is sent."""
    image_max_bytes: int = int(DEFAULT_MAX_MIB * 1024 * 1024)
    """The size cap per image (``config.toml`` ``[agent] image_max_mib``; the
    default's reason is at :data:`~.images.DEFAULT_MAX_MIB`)."""
    compact_threshold: float = 0.8
    bash_timeout_s: float = 120.0
    stream_idle_timeout_s: float | None = None
    """How long a stream may send nothing (``[agent] stream_idle_timeout_s``); None:
    the rule of :func:`~.stream_idle.idle_timeout_s` (from the measured prefill
    rate and the prompt's size, at least 600 s)."""
    tools: tuple[str, ...] = ()
    """The built-in tools offered to the model; empty: all of them."""
    usage_interval_s: float = 0.1
    """Least time between two :class:`UsageUpdate` events of one stream."""
    degenerate: _config.DegenerateMode = "stop"
    """What a degenerate stream (``sparkcode.detect``) does: ``stop`` closes it and
    ends the turn, ``warn`` only reports it, ``off`` does not watch."""
    structured_tools: bool = False
    """Small-model mode (``_structured``): tools described in the system prompt,
    every reply one JSON step held to the tools' schemas by the engine."""
    step_name_key: str = "tool"
    """Small-model mode: the key naming the tool in a call step (``_structured.NAME_KEYS``)."""
    task_reminder: bool = False
    """Append the turn's task to every tool result (for models that lose it;
    ``scaffold/_reminders.py``)."""
    results_as_user: bool = False
    """Small-model mode: send each tool result as a user message after the step as the
    model wrote it, not as the API's tool message (``_structured.results_as_user``)."""
    loop_nudge: bool = False
    """A turn's first loop of calls (``loop_guard``) is not asked about: the call is not
    run and its result tells the model to stop repeating it (``scaffold.prompts.LOOP_NUDGE``);
    a second loop in the turn asks as usual."""
    run_before_answer: bool = False
    """While the turn's message asks to run something (``questions.asks_a_run``) and no
    ``bash`` call has run, its first ``scaffold.RUN_BEFORE_ANSWER_REQUESTS`` requests
    cannot answer (small-model mode: no answer in the schema; otherwise
    ``tool_choice: "required"``): RUN_REMINDER alone did not stop a small model
    answering first (docs/experiments/2026-12-02-agent-suite.md)."""
    keep_told_files: bool = False
    """Files the turn's message says not to change ("do not change the tests", "do not
    edit calc.py"; ``questions.kept_files``) are refused to the edit tools that turn
    (``tools._kept``). Off by default: a rule of plain words can misread a message, and
    a capable model follows the words itself."""
    refuse_syntax_errors: bool = False
    """Refuse an edit that would leave a Python, JSON or TOML file that parses
    unparsable (``tools._syntax``); off by default: Python is parsed by the
    interpreter sparkcode runs on, which may be older than the project's."""
    refuse_lost_definitions: bool = False
    """Refuse a change that would delete a Python file's top-level functions, classes
    or methods that the turn's message does not name (``tools._lost``): a small model
    wrote a file as the one function it was asked to add (docs/experiments/). Off by default: a
    capable model deletes only what it means to, which the message need not name."""
    workspace_files: bool = False
    """End the system prompt with the workspace's files as they are when the session
    starts (as Gemini CLI's first context does), for a model that guesses paths
    (docs/experiments/2026-12-02-agent-suite.md)."""
    attach_files: int = 0
    """Bytes of the project's files shown with each user message (``attach``): the
    whole project when it fits, else the files the message names; 0: none."""
    questions_read_only: bool = False
    """A turn whose message only asks (``questions.is_question``) is offered no tool of
    kind ``edit``, and its reminder says to answer once the answer is known."""
    hidden_arguments: tuple[str, ...] = ()
    """Optional arguments (``TOOL.ARG``) the model is not shown (``ToolRegistry.hiding``):
    a small model set them to its harm (docs/experiments/2026-12-02-agent-suite.md)."""
    first_step_tool: bool = False
    """A turn's first request must call a tool: in small-model mode its schema has
    no answer, otherwise it is sent with ``tool_choice: "required"``."""
    task_tool: bool = True
    """Offer the ``task`` explore subagent (``[agent] task_tool``; on for ``--endpoint``
    and the Spark profile, off in the small-model profiles)."""
    task_max_requests: int = 16
    """Model requests one ``task`` sub-conversation may make (its ``max_turns``). An
    explore that has read and searched 15 times without answering is better cut
    off and reported than left to fill the engine's time; the main turn goes on."""
    salvage_calls: bool = True
    """Recover tool calls the server's parser did not return (``_salvage``)."""
    held_back_max_prompt: int = 32768
    """Ask vLLM for token ids (``return_token_ids``, to recover calls its streaming
    parser swallowed) only while the prompt is estimated below this many tokens:
    vLLM then also returns the prompt's ids in the first frame."""


KNOB_TO_SETTING: dict[str, tuple[str, Any]] = {
    "degenerate_streams": ("degenerate", lambda mode: mode),
    "image_max_mib": ("image_max_bytes", lambda mib: int(mib * 1024 * 1024)),
}
"""The knobs whose setting has another name or unit: knob -> (field, conversion)."""


def settings_from(knobs: AgentKnobs, **fixed: Any) -> AgentSettings:
    """:class:`AgentSettings` with what ``knobs`` says over the defaults (an
    :func:`~engine.profiles.overlay` of the layers); ``fixed``: fields no file
    sets (the session seed, the context limit...)."""
    said: dict[str, Any] = {}
    for name in KNOB_NAMES:
        value = getattr(knobs, name)
        if value is None:
            continue
        field, convert = KNOB_TO_SETTING.get(name, (name, lambda v: v))
        said[field] = convert(value)
    return AgentSettings(**said, **fixed)
