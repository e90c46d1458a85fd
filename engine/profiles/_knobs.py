"""The agent's knobs: one record for every setting a profile, ``config.toml`` and a
start can give the agent.

The same :class:`AgentKnobs` type is a profile's ``[agent]`` table, the knob part
of ``config.toml``'s ``[agent]`` table and the per-start options
(``SessionOptions.knobs``: the ``run`` command's flags, the ACP client's...).
Every field is optional: ``None`` means "not said here", so layers stack with
:func:`overlay` (later layers win). The defaults live only in
``sparkcode.agent.AgentSettings``; the types and ranges only here, checked by
msgspec when a TOML file is read (:mod:`._toml`) and by :func:`check_knobs` for
knobs built in code.

Adding a setting: one field here (its type, range and a ``description`` that
completes "must be ..."), and its default under the same name in
``AgentSettings``; docs/architecture.md, "Adding a setting".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from engine.errors import UserError

ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"]
REASONING_EFFORTS: tuple[ReasoningEffort, ...] = (
    "none",
    "minimal",
    "low",
    "medium",
    "high",
    "xhigh",
    "max",
)
DegenerateMode = Literal["stop", "warn", "off"]
DEGENERATE_MODES: tuple[DegenerateMode, ...] = ("stop", "warn", "off")
StepNameKey = Literal["tool", "name"]
EffortPlacement = Literal["request", "glm"]
"""Where a request says its reasoning effort (``sparkcode.agent.core.effort.PLACEMENTS``)."""


class AgentKnobs(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The agent's settings as one layer says them; ``None``: not said here."""

    reasoning_effort: ReasoningEffort | None = None
    """Sent with every request (GLM-5.3-Flash treats a missing value as max)."""
    effort_placement: EffortPlacement | None = None
    """``request``: each request's ``reasoning_effort`` says the effort; ``glm``: the
    chat template renders it before the history (GLM-5.x), so the request keeps the
    conversation's first value and a change is a system message at the end."""
    thinking_token_budget: (
        Annotated[int, Meta(ge=-1, description="an integer >= -1 (-1 = unlimited)")] | None
    ) = None
    max_turns: Annotated[int, Meta(ge=1, description="a positive integer")] | None = None
    """Model requests per user message."""
    max_tokens: Annotated[int, Meta(ge=1, description="a positive integer")] | None = None
    """The completion cap sent with every request."""
    temperature: Annotated[float, Meta(ge=0, le=2, description="between 0 and 2")] | None = None
    """Sampling temperature sent with every request."""
    top_p: Annotated[float, Meta(gt=0, le=1, description="a number in (0, 1]")] | None = None
    thinking_history: bool | None = None
    """Send each assistant message's reasoning back within a turn's tool loop (in
    ``reasoning_content``), as models trained on interleaved thinking expect."""
    structured_tools: bool | None = None
    """Small-model mode: each reply is one JSON step (a tool call or the answer),
    held to the tools' schemas by vLLM's structured outputs."""
    step_name_key: StepNameKey | None = None
    """Small-model mode: ``tool`` or ``name`` (the hermes shape Qwen knows) names
    the tool in a call step."""
    first_step_tool: bool | None = None
    """A turn's first request must call a tool (small-model mode: no answer in its
    schema; otherwise ``tool_choice: "required"``)."""
    tools: tuple[str, ...] | None = None
    """The built-in tools offered to the model; empty: all of them."""
    task_reminder: bool | None = None
    """Append the turn's task to every tool result (a small model loses it)."""
    workspace_files: bool | None = None
    """List the workspace's files in the system prompt (a small model guesses paths)."""
    attach_files: (
        Annotated[int, Meta(ge=0, description=("a number of bytes >= 0 (0 = attach nothing)"))]
        | None
    ) = None
    """Attach the project (when its files fit in this many bytes) or the files the
    message names to each user message (a small model guesses paths)."""
    questions_read_only: bool | None = None
    """A message that only asks (``sparkcode.agent.scaffold.message_words``) is offered no
    edit tool."""
    hidden_arguments: tuple[str, ...] | None = None
    """Optional tool arguments (``TOOL.ARG``) left out of the tools' specs."""
    results_as_user: bool | None = None
    """Small-model mode: tool results go to the model as user messages (Qwen read its
    own steps' results in ``<tool_response>`` tags badly)."""
    loop_nudge: bool | None = None
    """A turn's first loop of repeated calls is told to the model, not asked about."""
    run_before_answer: bool | None = None
    """A turn whose message asks to run something cannot answer before a bash call has
    run (its first 4 requests)."""
    keep_told_files: bool | None = None
    """Files a message says not to change (the tests, a named file) are refused to the
    edit tools for that turn."""
    refuse_syntax_errors: bool | None = None
    """Refuse an edit that would leave a Python, JSON or TOML file unparsable; the
    result shows the model the broken lines (SWE-agent's lint-guarded edit)."""
    refuse_lost_definitions: bool | None = None
    """Refuse a change that would delete a Python file's functions, classes or methods
    the message does not name (docs/experiments/2026-12-02-agent-suite.md)."""
    task_tool: bool | None = None
    """Offer the ``task`` tool (a read-only explore sub-conversation that returns a
    summary); the small-model profiles turn it off."""
    bash_timeout_s: (
        Annotated[float, Meta(gt=0, description="a positive number of seconds")] | None
    ) = None
    stream_idle_timeout_s: (
        Annotated[float, Meta(gt=0, description="a positive number of seconds")] | None
    ) = None
    """How long a model stream may send nothing (vLLM is silent while it prefills);
    unset: at least 600 s, longer where the measured prefill rate needs it."""
    degenerate_streams: DegenerateMode | None = None
    """What a looping or garbled stream does: stop, warn or off."""
    compact_threshold: (
        Annotated[
            float,
            Meta(
                ge=0.1,
                le=0.95,
                description=(
                    "a number between 0.1 and 0.95 (the share of the context window that compacts "
                    "the history)"
                ),
            ),
        ]
        | None
    ) = None
    image_max_mib: (
        Annotated[
            float,
            Meta(
                gt=0,
                le=64,
                description=("a number of MiB in (0, 64] (the size cap per attached image)"),
            ),
        ]
        | None
    ) = None


KNOB_NAMES: tuple[str, ...] = AgentKnobs.__struct_fields__


def overlay(*layers: AgentKnobs) -> AgentKnobs:
    """The knobs the layers say, later layers winning (profile, config, start)."""
    said: dict[str, object] = {}
    for layer in layers:
        said.update(
            (name, getattr(layer, name)) for name in KNOB_NAMES if getattr(layer, name) is not None
        )
    return AgentKnobs(**said)  # type: ignore[arg-type]


def knobs_of(value: AgentKnobs) -> AgentKnobs:
    """Only the knob fields of ``value`` (a subclass such as ``Config`` holds more)."""
    return overlay(value) if type(value) is not AgentKnobs else value


def check_knobs(knobs: AgentKnobs, where: str) -> AgentKnobs:
    """The range check for knobs built in code (per-start options): the same
    types and ranges a TOML file is held to; a bad one is a :class:`UserError`."""
    return knobs_from(msgspec.to_builtins(knobs_of(knobs)), where)


def knobs_from(
    values: Mapping[str, object], where: str, labels: Mapping[str, str] | None = None
) -> AgentKnobs:
    """Knobs from untyped values (command-line flags; ``None``: not given), held to
    the types and ranges the TOML files are; ``labels`` name the knobs as the user
    wrote them (``{"reasoning_effort": "--effort"}``)."""
    from ._toml import describe_error

    said = {name: value for name, value in values.items() if value is not None}
    try:
        return msgspec.convert(said, AgentKnobs, strict=True)
    except msgspec.ValidationError as exc:
        raise UserError(
            describe_error(str(exc), AgentKnobs, said, where, colon=True, labels=labels)
        ) from None
