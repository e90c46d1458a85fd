"""``sparkcode run "PROMPT"``: the agent loop without the TUI.

Prints the answer as it streams (tool calls and notes on stderr), or one JSON
object per event with ``--json``. Exit status: 0 when the agent finished its
answer, 1 on an error (engine unreachable, HTTP failure...), 3 when it stopped
early (max turns, a declined approval, a repeated-call loop, output cut by
the length limit, a UserPromptSubmit hook refusing the prompt), 4 when the
stream degenerated (looping or garbled text) and was stopped (``--degenerate
warn`` only reports it), 5 when ``--output-schema``'s final answer is not JSON of the
schema (``sparkcode.agent.core.output_schema``).
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any, Literal, TextIO, cast

import typer

from engine.errors import UserError
from engine.paths import Paths
from engine.profiles import REASONING_EFFORTS, knobs_from
from sparkcode.agent import (
    Agent,
    AgentError,
    ApprovalDecision,
    ApprovalRequested,
    BudgetExceeded,
    ChatError,
    ContentDelta,
    DegenerationDetected,
    Event,
    HookRan,
    Notice,
    ReasoningDelta,
    TaskEvent,
    TodoUpdated,
    ToolCallFinished,
    ToolCallStarted,
    TurnFinished,
    UsageUpdate,
    event_to_json,
)
from sparkcode.agent.core.output_schema import OutputSchemaError, final_answer, load_schema
from sparkcode.agent.tools import TodoList
from sparkcode.hooks import HookSpec
from sparkcode.hooks.session import describe
from sparkcode.replay import Rebuilt
from sparkcode.sessions import SessionStore
from sparkcode.start import (
    SessionOptions,
    WorkspaceMismatch,
    build_session,
    find_resume,
    resolve_target,
)
from sparkcode.worktree import open_worktree

from ._asking import run_asker
from ._options import ApiKeyEnvOption, EndpointOption, ModelOption, WorktreeCommand, WorktreeOption

EXIT_OK, EXIT_ERROR, EXIT_STOPPED, EXIT_DEGENERATE, EXIT_SCHEMA = 0, 1, 3, 4, 5
FLAGS = {
    "reasoning_effort": "--effort",
    "thinking_token_budget": "--budget",
    "max_turns": "--max-turns",
    "max_tokens": "--max-tokens",
    "temperature": "--temperature",
    "top_p": "--top-p",
    "degenerate_streams": "--degenerate",
}
"""The knobs ``run`` takes as flags, by the flag's name (for error messages)."""


@dataclass(frozen=True)
class RunRequest:
    """What ``sparkcode run`` is asked: the prompts, what to talk to, where, and the
    output's form. Every setting of the session (recording, permission mode, the
    agent's knobs, the seed) is in ``session``, as every front passes it."""

    prompt: str
    workspace: Path
    session: SessionOptions = SessionOptions(origin="run")
    """``origin``, ``approver``, ``ask_trust``, ``progress`` and ``resume`` are the
    run's own (set by :func:`run_headless`)."""
    as_json: bool = False
    endpoint: str | None = None
    model: str | None = None
    api_key_env: str | None = None
    profile: str | None = None
    vision: bool = False
    """``--vision``: the ``--endpoint``'s model takes images."""
    resume: str | None = None
    """A session ID to continue (``--resume``)."""
    continue_latest: bool = False
    """Continue the latest session of the workspace (``--continue``)."""
    prompt_file: Path | None = None
    """Further prompts, one a line (``-``: standard input, read as lines arrive)."""
    images: tuple[Path, ...] = ()
    """Images attached to the first prompt (``--image``, repeatable)."""
    output_schema: Path | None = None
    """``--output-schema``: after the last turn, the final answer as JSON of this schema,
    alone on stdout (the turn's text goes to stderr)."""
    worktree: str | None = None
    """``--worktree [NAME]``: work in the git worktree NAME (``""``: a new name) of the
    workspace's repository (:mod:`sparkcode.worktree`); None: in the workspace."""


def register(app: typer.Typer) -> None:
    app.command("run", cls=WorktreeCommand)(run_cmd)


def run_cmd(
    prompt: Annotated[str, typer.Argument(help="What the agent should do.")],
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON object per event.")
    ] = False,
    max_turns: Annotated[
        int | None, typer.Option("--max-turns", help="Most model requests for this prompt.")
    ] = None,
    auto: Annotated[
        bool, typer.Option("--auto", help="Full-auto: run edits and shell commands without asking.")
    ] = False,
    plan: Annotated[
        bool,
        typer.Option("--plan", help="Plan mode: only read-only tools run; the answer is a plan."),
    ] = False,
    endpoint: EndpointOption = None,
    model: ModelOption = None,
    api_key_env: ApiKeyEnvOption = None,
    workspace: Annotated[
        Path | None,
        typer.Option(
            "--workspace", "-w", help="The project directory (default: current directory)."
        ),
    ] = None,
    profile: Annotated[
        str | None, typer.Option("--profile", "-p", help="Engine profile (started if not running).")
    ] = None,
    effort: Annotated[
        str | None,
        typer.Option("--effort", help=f"reasoning_effort: {', '.join(REASONING_EFFORTS)}."),
    ] = None,
    budget: Annotated[
        int | None, typer.Option("--budget", help="thinking_token_budget (-1 = unlimited).")
    ] = None,
    force_tool: Annotated[str | None, typer.Option("--force-tool", hidden=True)] = None,
    force_tool_schema: Annotated[
        str | None, typer.Option("--force-tool-schema", hidden=True)
    ] = None,
    max_tokens: Annotated[int | None, typer.Option("--max-tokens", hidden=True)] = None,
    temperature: Annotated[
        float | None,
        typer.Option(
            "--temperature",
            help="Sampling temperature (default: config.toml "
            "[agent], then the profile, then the server).",
        ),
    ] = None,
    top_p: Annotated[float | None, typer.Option("--top-p", help="Nucleus sampling top_p.")] = None,
    seed: Annotated[
        str | None,
        typer.Option(
            "--seed",
            help="Session seed: an integer, 'random' or 'off' (default: config.toml "
            "[agent] seed, else random; recorded, so `replay --rerun` reproduces the run).",
        ),
    ] = None,
    no_record: Annotated[
        bool, typer.Option("--no-record", help="Do not record this session.")
    ] = False,
    resume: Annotated[
        str | None,
        typer.Option(
            "--resume", help="Continue the recorded session ID (a new recording names it)."
        ),
    ] = None,
    continue_latest: Annotated[
        bool,
        typer.Option("--continue", "-c", help="Continue the latest session of this workspace."),
    ] = False,
    degenerate: Annotated[
        str | None,
        typer.Option(
            "--degenerate",
            help="A looping or garbled stream: stop (exit 4), warn or off "
            "(default: config.toml's degenerate_streams, else stop).",
        ),
    ] = None,
    prompt_file: Annotated[
        Path | None,
        typer.Option(
            "--prompt-file",
            help="Further prompts, one a line ('-': standard input, read as "
            "lines arrive); each is sent when the turn before ends with an answer, as the TUI "
            "sends a queued message.",
        ),
    ] = None,
    trust_project: Annotated[
        bool,
        typer.Option(
            "--trust-project",
            help="Trust this project: run its hooks (.sparkcode/hooks.toml, "
            ".claude/settings.json) and remember it; without it, untrusted project hooks are "
            "asked about on a terminal and skipped otherwise.",
        ),
    ] = False,
    image: Annotated[
        list[Path] | None,
        typer.Option(
            "--image",
            help="Attach an image (PNG, JPEG or WebP, told by its bytes) to PROMPT; "
            "repeatable. The model must take images (the profile's [model] vision).",
        ),
    ] = None,
    vision: Annotated[
        bool, typer.Option("--vision", help="With --endpoint: the model takes images.")
    ] = False,
    output_schema: Annotated[
        Path | None,
        typer.Option(
            "--output-schema",
            help="A JSON schema file: once the agent has answered, one more "
            "request has the engine's grammar hold the final answer to it; the JSON alone is "
            "printed on stdout (the rest on stderr) after it is validated, else exit 5.",
        ),
    ] = None,
    worktree: WorktreeOption = None,
) -> None:
    """Run the agent on PROMPT without the TUI and print the result."""
    # The flags are held to the knobs' types and ranges, as config.toml is.
    knobs = knobs_from(
        {
            "reasoning_effort": effort,
            "thinking_token_budget": budget,
            "max_turns": max_turns,
            "max_tokens": max_tokens,
            "temperature": temperature,
            "top_p": top_p,
            "degenerate_streams": degenerate,
        },
        "sparkcode run:",
        FLAGS,
    )
    if auto and plan:
        raise UserError("--auto and --plan exclude each other; pass one")
    schema = None
    if force_tool_schema is not None:
        try:
            schema = json.loads(force_tool_schema)
        except json.JSONDecodeError as exc:
            raise UserError(f"--force-tool-schema is not JSON: {exc}") from None
    if resume and continue_latest:
        raise UserError("--resume and --continue exclude each other; pass one")
    if output_schema is not None and as_json:
        raise UserError(
            "--output-schema prints the final JSON alone on stdout, --json prints "
            "every event there; pass one"
        )
    request = RunRequest(
        prompt=prompt,
        workspace=workspace or Path.cwd(),
        as_json=as_json,
        endpoint=endpoint,
        model=model,
        api_key_env=api_key_env,
        profile=profile,
        vision=vision,
        resume=resume,
        continue_latest=continue_latest,
        prompt_file=prompt_file,
        images=tuple(p.expanduser().absolute() for p in image or ()),
        output_schema=output_schema,
        worktree=worktree,
        session=SessionOptions(
            origin="run",
            record=not no_record,
            knobs=knobs,
            seed=parse_seed(seed),
            permission_mode="full-auto" if auto else "plan" if plan else None,
            force_tool=force_tool,
            force_tool_parameters=schema,
            trust_project=True if trust_project else None,
        ),
    )
    code = asyncio.run(run_headless(request, Paths.from_env()))
    if code:
        raise typer.Exit(code)


async def run_headless(
    request: RunRequest,
    paths: Paths | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Resolve the engine, run one turn, print it; returns the exit status.

    ``paths``: the directories the command resolved once; None reads them from the
    environment here, the one default, for the tests that drive a run in-process."""
    paths = paths if paths is not None else Paths.from_env()
    out = out or sys.stdout
    err = err or sys.stderr

    def progress(message: str) -> None:
        print(message, file=err, flush=True)

    schema = None
    if request.output_schema is not None:  # refused before the engine is reached
        try:
            schema = load_schema(request.output_schema)
        except OutputSchemaError as exc:
            raise UserError(str(exc)) from None
    further = _further_prompts(request.prompt_file)
    workspace = request.workspace.expanduser().resolve()
    tree = None
    if request.worktree is not None:
        tree = open_worktree(workspace, request.worktree or None)
        workspace = tree.workspace
    try:
        rebuilt = None
        if request.resume or request.continue_latest:
            rebuilt = await resume_here(
                paths, workspace, request.resume, request.continue_latest, err
            )
            workspace = Path(rebuilt.workspace)
        target = resolve_target(
            workspace,
            paths,
            profile=request.profile,
            endpoint=request.endpoint,
            model=request.model,
            api_key_env=request.api_key_env,
            vision=request.vision,
            worktree=tree if tree and tree.workspace == workspace else None,
        )
        session = await build_session(
            target,
            replace(
                request.session,
                origin="run",
                approver=None if sys.stdin.isatty() else _refuse,
                progress=progress,
                resume=rebuilt,
                ask_trust=_ask_trust if sys.stdin.isatty() else None,
            ),
            paths,
        )
    except BaseException:
        if tree is not None:
            tree.discard()  # a start that failed leaves no new worktree behind
        raise
    agent = session.agent
    agent.asker = run_asker(err)  # ask_user: the terminal, or nobody without one
    if rebuilt is not None:
        progress(
            f"resuming session {rebuilt.session_id} after turn {rebuilt.turns} "
            f"(new session {session.session_id or 'not recorded'})"
        )
        if rebuilt.todos:
            progress(TodoList(items=rebuilt.todos).render())
    for note in session.notes:
        progress(f"note: {note}")
    # With a schema, stdout is the final JSON's alone.
    printer = _Printer(err if schema is not None else out, err, request.as_json)
    reason = "error"
    empty = False
    prompt: str | None = request.prompt
    try:
        # Read and checked before the first request: a bad image sends nothing.
        images = tuple(agent.load_image(path) for path in request.images)
        while prompt is not None:
            # A custom command (`/review src/`) is sent as its file's prompt.
            prompt = target.commands.expand_line(prompt) or prompt
            async for event in agent.run_turn(prompt, images):
                printer.show(event)
                if isinstance(event, ApprovalRequested) and agent.approver is None:
                    event.respond(await _ask_terminal(event, err))
                if isinstance(event, Notice) and event.code == "empty_answer":
                    empty = True
                if isinstance(event, TurnFinished):
                    reason = event.reason
            prompt, images = None, ()
            if reason == "stop" and not empty and not printer.errors:
                prompt = await anext(further, None)
        printer.end()
        if schema is not None:
            if reason == "stop" and not empty and not printer.errors:
                return await _final_json(agent, schema, out, err)
            # The run's own status stays (1, 3 or 4): it says why better than 5 would.
            progress(
                "error: --output-schema: no final answer was asked for, as the run did "
                f"not end with one ({'an empty answer' if empty else reason})"
            )
    finally:
        await session.aclose()
        if target.worktree is not None:  # how to merge or remove it
            print(target.worktree.exit_advice(), file=err, flush=True)
    printer.end()
    if printer.errors or empty:
        return EXIT_ERROR  # an empty answer did nothing: a script must not take it as done
    if reason == "degenerate":
        return EXIT_DEGENERATE
    return EXIT_OK if reason == "stop" else EXIT_STOPPED


def _further_prompts(path: Path | None) -> AsyncIterator[str]:
    """``--prompt-file``'s prompts, blank lines skipped: a file is read now (a missing
    one refused before anything runs), standard input line by line as it arrives."""
    if path is not None and str(path) == "-":
        return _stdin_lines()
    lines: list[str] = []
    if path is not None:
        try:
            lines = path.expanduser().read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise UserError(f"--prompt-file {path}: cannot read it ({exc})") from None
    return _listed([line.strip() for line in lines if line.strip()])


async def _listed(prompts: list[str]) -> AsyncIterator[str]:
    for prompt in prompts:
        yield prompt


async def _stdin_lines() -> AsyncIterator[str]:
    while line := await asyncio.to_thread(sys.stdin.readline):
        if line.strip():
            yield line.strip()


def parse_seed(text: str | None) -> int | Literal["random", "off"] | None:
    """``--seed``: an integer, ``random`` or ``off``."""
    if text is None:
        return None
    text = text.strip().lower()
    if text in ("random", "off"):
        return cast(Literal["random", "off"], text)
    if text.isdigit():
        return int(text)
    raise UserError(f"--seed must be a non-negative integer, 'random' or 'off', got {text!r}")


async def resume_here(
    paths: Paths, workspace: Path, session_id: str | None, latest: bool, err: TextIO
) -> Rebuilt:
    """The conversation to continue; a session of another workspace is resumed there
    only when the user at the terminal says yes."""
    store = SessionStore(paths.sessions_dir)
    try:
        return await find_resume(store, workspace, session_id=session_id, latest=latest)
    except WorkspaceMismatch as exc:
        if not sys.stdin.isatty():
            raise
        print(
            f"session {exc.session_id} was recorded in {exc.recorded} (you are in {exc.current}).",
            file=err,
        )
        answer = await asyncio.to_thread(input, f"resume it in {exc.recorded}? [y/N]: ")
        if answer.strip().lower() not in ("y", "yes"):
            raise UserError("not resumed: the session belongs to another workspace") from None
        return await find_resume(store, workspace, session_id=exc.session_id, any_workspace=True)


async def _final_json(agent: Agent, schema: dict[str, Any], out: TextIO, err: TextIO) -> int:
    """The final answer in ``schema`` on ``out``; the reason on ``err`` otherwise."""
    try:
        value = await final_answer(agent, schema)
    except OutputSchemaError as exc:
        print(f"error: --output-schema: {exc}", file=err, flush=True)
        return EXIT_SCHEMA
    except ChatError as exc:
        print(f"error: --output-schema: the final request failed: {exc}", file=err, flush=True)
        return EXIT_ERROR
    out.write(json.dumps(value, ensure_ascii=False) + "\n")
    out.flush()
    return EXIT_OK


async def _refuse(request: ApprovalRequested) -> ApprovalDecision:
    """No one to ask: refuse, and say how to allow it."""
    return ApprovalDecision(
        approved=False,
        reason="not approved: sparkcode run is not interactive; rerun with --auto or allow "
        "this tool in config.toml [permissions]",
    )


async def _ask_trust(workspace: Path, hooks: tuple[HookSpec, ...]) -> bool:
    print(f"\n{workspace} declares hooks (commands run on agent events):", file=sys.stderr)
    for hook in hooks:
        print(
            f"  {hook.event} [{hook.matcher or '*'}] {hook.command}  ({hook.source})",
            file=sys.stderr,
        )
    answer = await asyncio.to_thread(input, "trust this project and run them? [y/N]: ")
    return answer.strip().lower() in ("y", "yes")


async def _ask_terminal(request: ApprovalRequested, err: TextIO) -> ApprovalDecision:
    print(f"\n--- approve {request.tool}: {request.summary}", file=err)
    if request.detail:
        print(request.detail.rstrip("\n"), file=err)
    answer = await asyncio.to_thread(input, "approve? [y]es / [N]o / [a]lways: ")
    answer = answer.strip().lower()
    return ApprovalDecision(
        approved=answer in ("y", "yes", "a", "always"), always=answer in ("a", "always")
    )


class _Printer:
    """Human output: the answer on stdout, everything else on stderr."""

    def __init__(self, out: TextIO, err: TextIO, as_json: bool) -> None:
        self.out, self.err, self.as_json = out, err, as_json
        self.errors = 0
        self.thinking = 0
        self.midline = False
        self.rate: float | None = None

    def show(self, event: Event) -> None:
        if isinstance(event, AgentError):
            self.errors += 1
        if self.as_json:
            self.out.write(json.dumps(event_to_json(event), ensure_ascii=False) + "\n")
            self.out.flush()
            return
        if isinstance(event, TaskEvent):
            self._task(event.event)
        elif isinstance(event, ReasoningDelta):
            self.thinking = event.tokens_so_far
        elif isinstance(event, ContentDelta):
            self._thinking_done()
            self.out.write(event.text)
            self.out.flush()
            self.midline = not event.text.endswith("\n")
        elif isinstance(event, ToolCallStarted):
            self._thinking_done()
            self._newline()
            args = json.dumps(event.arguments, ensure_ascii=False)
            self._note(f"-> {event.name} {args[:200]}")
        elif isinstance(event, ToolCallFinished):
            first = event.result.strip().splitlines()[0] if event.result.strip() else ""
            self._note(f"   {'failed' if event.error else 'ok'}: {first[:200]}")
        elif isinstance(event, BudgetExceeded):
            self._note(
                f"thinking passed its budget ({event.used} > {event.budget} tokens); "
                "continuing without thinking"
            )
        elif isinstance(event, Notice):
            self._note(f"note: {event.message}")
        elif isinstance(event, DegenerationDetected):
            self._newline()
            what = "stopped the stream" if event.stopped else "warning only"
            self._note(
                f"degenerate {event.channel} after {event.chars} characters "
                f"({event.pattern}: {event.detail}); {what}"
            )
        elif isinstance(event, HookRan):
            self._newline()
            self._note(describe(event))
        elif isinstance(event, TodoUpdated):
            self._note(TodoList(items=event.items).render())
        elif isinstance(event, AgentError):
            self._newline()
            self._note(f"error: {event.message}")
        elif isinstance(event, UsageUpdate) and event.final and event.decode_tok_s:
            self.rate = event.decode_tok_s
        elif isinstance(event, TurnFinished):
            self._newline()
            if event.reason != "stop":
                self._note(f"stopped: {event.reason}")
            rate = f", {self.rate:.1f} tok/s" if self.rate else ""
            self._note(
                f"({event.requests} requests, {event.prompt_tokens} prompt + "
                f"{event.completion_tokens} completion tokens{rate})"
            )

    def _task(self, event: Event) -> None:
        """A ``task`` call's sub-conversation: its calls, indented under the task."""
        if isinstance(event, ToolCallStarted):
            args = json.dumps(event.arguments, ensure_ascii=False)
            self._note(f"   | -> {event.name} {args[:160]}")
        elif isinstance(event, ToolCallFinished):
            first = event.result.strip().splitlines()[0] if event.result.strip() else ""
            self._note(f"   |    {'failed' if event.error else 'ok'}: {first[:160]}")
        elif isinstance(event, AgentError | Notice):
            self._note(f"   | note: {event.message}")
        elif isinstance(event, TurnFinished):
            self._note(f"   | ({event.requests} requests, {event.reason})")

    def _thinking_done(self) -> None:
        if self.thinking:
            self._note(f"(thought for {self.thinking} tokens)")
            self.thinking = 0

    def _newline(self) -> None:
        if self.midline:
            self.out.write("\n")
            self.out.flush()
            self.midline = False

    def _note(self, text: str) -> None:
        print(text, file=self.err, flush=True)

    def end(self) -> None:
        if not self.as_json:
            self._newline()
