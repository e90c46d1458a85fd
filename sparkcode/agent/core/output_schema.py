"""``sparkcode run --output-schema FILE``: a final answer the engine's grammar holds
to a JSON schema, checked before it is given to the script.

The agent's turn runs as always (tools, approvals, the answer as prose). Once it has
ended with an answer, one more request asks for the final answer as JSON, with no
tools and vLLM's ``structured_outputs`` carrying the user's schema: the grammar then
admits only text of that schema, where a model left free (or told in the prompt
only) wraps the JSON in prose or a code fence. Small-model mode (``_structured.py``)
drives the same grammar for every step; here it is one request at the end, so the
turn's tool calls are whatever the model's normal mode is.

The reply is then parsed and validated with ``jsonschema`` all the same: a server
that is not vLLM may ignore the field, and a reply cut by ``max_tokens`` is not
whole. Each failure is an :class:`OutputSchemaError` whose message names it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jsonschema
import referencing
import referencing.exceptions
from jsonschema.exceptions import SchemaError, ValidationError

from ..scaffold.structured import results_as_user
from ..wire.chat_types import ChatError
from ..wire.stream_idle import idle_timeout_s
from ._request import context_overflow, request_params

if TYPE_CHECKING:
    from .loop import Agent

FINAL_PROMPT = (
    "Now give your final answer as one JSON value that matches this JSON "
    "schema, and nothing else:\n{schema}"
)
"""The user message of the final request. The schema is also in the grammar; shown it,
the model knows what each field is for (the grammar only says what is allowed)."""


class OutputSchemaError(Exception):
    """The schema file, or the final answer, is not what ``--output-schema`` needs."""


def load_schema(path: Path) -> dict[str, Any]:
    """The schema in ``path``: readable, JSON, an object, and a valid JSON schema
    (its ``$schema`` draft, else the latest). Refused before anything is sent."""
    try:
        text = path.expanduser().read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise OutputSchemaError(f"--output-schema {path}: cannot read it ({exc})") from None
    try:
        schema = json.loads(text)
    except ValueError as exc:
        raise OutputSchemaError(f"--output-schema {path}: not JSON ({exc})") from None
    if not isinstance(schema, dict):
        raise OutputSchemaError(
            f"--output-schema {path}: a JSON schema is an object, got {type(schema).__name__}"
        )
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except SchemaError as exc:
        where = _pointer(exc.path)
        raise OutputSchemaError(
            f"--output-schema {path}: not a valid JSON schema at {where}: {exc.message}"
        ) from None
    return schema


LOCAL_REFS: referencing.Registry[Any] = referencing.Registry()  # it retrieves nothing
"""The only ``$ref`` targets an answer is checked against: the schema file's own
(jsonschema 4.26 would fetch a URL ``$ref`` over HTTP; docs/connections.md)."""


def check_answer(text: str, schema: dict[str, Any]) -> Any:
    """The JSON value in ``text`` when it matches ``schema``; else the reason."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise OutputSchemaError(f"the final answer is not JSON ({exc}): {_shown(text)}") from None
    validator = jsonschema.validators.validator_for(schema)(schema, registry=LOCAL_REFS)
    try:
        validator.validate(value)
    except referencing.exceptions.Unresolvable as exc:
        raise OutputSchemaError(
            f"the schema's $ref {exc.ref!r} is not in the schema file "
            "(sparkcode fetches no schema; put it under $defs)"
        ) from None
    except ValidationError as exc:
        where = _pointer(exc.absolute_path)
        raise OutputSchemaError(
            f"the final answer does not match the schema at {where}: {exc.message}"
        ) from None
    return value


def final_params(agent: Agent, schema: dict[str, Any]) -> dict[str, Any]:
    """The final request's fields: the turn's own (sampling with its seed, output limit,
    the effort as its placement says it, so a pinned template renders the same prefix)
    with thinking closed (the work is done; a thinking model held by the grammar from
    its first token could not think anyway) and the grammar."""
    params = request_params(
        agent.settings,
        agent.next_sampling(),
        thinking_closed=True,
        prompt_estimate=agent.context.estimate(agent.history),
        pinned_effort=agent.effort_pinned,
    )
    params.pop("return_token_ids", None)  # for salvaging tool calls; there are none here
    params["structured_outputs"] = {"json": schema, "disable_any_whitespace": True}
    return params


async def final_answer(agent: Agent, schema: dict[str, Any]) -> Any:
    """Ask for the final answer in ``schema`` (one request, no tools) and return the
    validated value. The question and the reply join the history, as the recording
    holds the request, so a session resumed later shows them."""
    prompt = FINAL_PROMPT.format(schema=json.dumps(schema, ensure_ascii=False))
    agent.history.append({"role": "user", "content": prompt})
    outgoing = agent.history
    structured = agent.settings.structured_tools
    if structured and agent.settings.results_as_user:
        outgoing = results_as_user(agent.history, agent.settings.step_name_key)
    # The turn's tool list is sent as it was, with tool_choice "none": the rendered
    # prompt then starts as the turn's last request did, and the prefix cache holds.
    # (Small-model mode sends no tools; they are in its system prompt.)
    tools = None if structured else agent.tools.specs()
    try:
        async with agent.client.stream_chat(
            outgoing,
            tools=tools,
            tool_choice="none" if tools else None,
            params=final_params(agent, schema),
            idle_timeout_s=idle_timeout_s(
                agent.settings.stream_idle_timeout_s,
                agent.client.prefill.tok_s,
                agent.context.estimate(outgoing),
            ),
        ) as stream:
            async for _ in stream:
                if agent.cancelled:
                    raise OutputSchemaError("cancelled before the final answer")
    except ChatError as exc:
        # A 400 for this request is the schema's (vLLM refuses one with a feature its
        # grammar backend lacks), unless the prompt no longer fits.
        if exc.status == 400 and not context_overflow(exc):
            raise OutputSchemaError(f"the engine refused the schema: {exc}") from None
        raise
    text = stream.content
    agent.history.append({"role": "assistant", "content": text})
    if stream.result().finish_reason == "length":
        limit = agent.settings.max_tokens
        said = (
            f"[agent] max_tokens = {limit}"
            if limit is not None
            else "the context left; [agent] max_tokens is not set"
        )
        raise OutputSchemaError(
            f"the final answer was cut by the output limit after "
            f"{len(text)} characters ({said}): {_shown(text)}"
        )
    return check_answer(text.strip(), schema)


def _shown(text: str) -> str:
    return repr(text if len(text) <= 200 else text[:200] + "...")


def _pointer(path: Iterable[str | int]) -> str:
    """Where in a document, as a JSON pointer (``/items/0/name``)."""
    parts = [str(p) for p in path]
    return "/" + "/".join(parts) if parts else "the top level"
