"""One ACP session: a sparkcode agent session built in the background, and its turns.

``session/new`` returns at once: the session builder (the same one the TUI and
``sparkcode run`` use) runs in a task, and a managed engine's boot is shown as
a ``tool_call`` whose updates carry the supervisor's progress lines. The first
prompt waits for the build; a build that failed (no engine, a bad endpoint) is
retried at the next prompt, so fixing the cause needs no new session.

Approvals go to the editor as ``session/request_permission`` (allow once,
always, reject); the shell still runs in sparkcode's own sandbox, never in the
editor's terminal, so the permission modes and undo snapshots hold.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from acp import (
    Client,
    RequestError,
    start_tool_call,
    text_block,
    tool_content,
    update_agent_message_text,
    update_tool_call,
)
from acp.helpers import update_available_commands, update_current_mode
from acp.schema import (
    AllowedOutcome,
    AudioContentBlock,
    EmbeddedResourceContentBlock,
    ImageContentBlock,
    PermissionOption,
    PromptResponse,
    ResourceContentBlock,
    TextContentBlock,
    TextResourceContents,
    ToolCallUpdate,
)

from engine.errors import UserError
from engine.paths import Paths
from sparkcode.agent import AgentError, ApprovalDecision, ApprovalRequested, TurnFinished
from sparkcode.agent.core.events import Event
from sparkcode.agent.core.images import (
    ImageAttachment,
    ImageError,
    image_from_bytes,
    refuse_text_only,
)
from sparkcode.agent.core.settings import ACT_PROMPT
from sparkcode.config import PermissionMode
from sparkcode.operations import Operation
from sparkcode.sessions import SessionStore
from sparkcode.start import AgentSession, SessionOptions, StartTarget, build_session

from ._asking import acp_asker
from ._commands import available_commands, parse_command
from ._dispatch import Context, run_command
from ._updates import STOP_REASONS, UpdateMapper

log = logging.getLogger(__name__)

PromptBlock = (
    TextContentBlock
    | ImageContentBlock
    | AudioContentBlock
    | ResourceContentBlock
    | EmbeddedResourceContentBlock
)
BOOT_CALL = "sparkcode-engine"
"""The tool-call ID under which the engine's boot is shown."""


def user_error(message: str, code: int = -32602) -> RequestError:
    """A JSON-RPC error whose message is the sentence the user reads."""
    return RequestError(code, message, {"details": message})


def prompt_text(blocks: Sequence[PromptBlock]) -> str:
    """The prompt as the model gets it: text as is, a linked file as ``@path``, an
    embedded file's text fenced with its name; images are taken apart by
    :func:`prompt_images` (and refused here when ``images`` is not allowed), audio is
    refused (the capabilities do not offer it)."""
    parts: list[str] = []
    for block in blocks:
        if isinstance(block, TextContentBlock):
            parts.append(block.text)
        elif isinstance(block, ResourceContentBlock):
            parts.append(f"@{_path_of(block.uri)}")
        elif isinstance(block, EmbeddedResourceContentBlock):
            res = block.resource
            if not isinstance(res, TextResourceContents):
                raise user_error(
                    f"{res.uri}: binary attachments are not supported; attach "
                    "text files or link the file"
                )
            parts.append(f"\n{_path_of(res.uri)}:\n```\n{res.text}\n```\n")
        elif not isinstance(block, ImageContentBlock):
            raise user_error(
                f"{block.type} prompts are not supported: the model takes text "
                "and, with a vision profile, images (initialize advertised "
                "audio: false)"
            )
    text = "".join(part if part.startswith("\n") else part + " " for part in parts).strip()
    if not text and not any(isinstance(block, ImageContentBlock) for block in blocks):
        raise user_error("the prompt is empty")
    return text


def prompt_images(blocks: Sequence[PromptBlock]) -> list[tuple[str, bytes]]:
    """The prompt's images as (name, bytes): the editor sends them base64-encoded; a
    name (``image 1``...) is given for the transcript and the errors."""
    out: list[tuple[str, bytes]] = []
    for block in blocks:
        if isinstance(block, ImageContentBlock):
            name = f"image {len(out) + 1}"
            try:
                out.append((name, base64.b64decode(block.data, validate=True)))
            except (binascii.Error, ValueError):
                raise user_error(f"{name}: its data is not valid base64") from None
    return out


def _path_of(uri: str) -> str:
    return uri.removeprefix("file://")


class AcpSession:
    """A session the editor drives: build, prompts, cancel, mode, commands."""

    def __init__(
        self,
        session_id: str,
        client: Client,
        target: StartTarget,
        options: SessionOptions,
        paths: Paths,
        *,
        record_id: str | None = None,
        form_elicitation: bool = False,
    ) -> None:
        self.id = session_id
        self.record_id = record_id or session_id
        """The recording's ID: the session's own, or a new one continuing a loaded one."""
        self.client = client
        self.target = target
        self.paths = paths
        self.mode: PermissionMode | None = options.permission_mode
        self._options = options
        self._build: asyncio.Task[AgentSession] | None = None
        self._running = False
        self._cancel = asyncio.Event()
        self._mode_before_plan: PermissionMode | None = None
        self.mapper: UpdateMapper | None = None
        self._form = form_elicitation
        """The editor takes typed answers to ``ask_user`` (:mod:`._asking`)."""

    # -- building ---------------------------------------------------------------

    def start(self) -> None:
        """Build in the background (the engine may take minutes to boot)."""
        build = self._build
        if build is None or (build.done() and (build.cancelled() or build.exception())):
            self._build = asyncio.create_task(self._build_session(), name=f"acp-{self.id}")

    def built(self) -> AgentSession | None:
        """The session when its build has succeeded, else None."""
        build = self._build
        if build is None or not build.done() or build.cancelled() or build.exception():
            return None
        return build.result()

    async def _build_session(self) -> AgentSession:
        loop = asyncio.get_running_loop()
        booting = False
        in_order = asyncio.Lock()  # the lines go out in the order they were said

        async def boot_line(line: str) -> None:
            nonlocal booting
            async with in_order:
                if not booting:
                    booting = True
                    await self.send(
                        start_tool_call(
                            BOOT_CALL, "start the engine", kind="other", status="in_progress"
                        )
                    )
                await self.send(
                    update_tool_call(BOOT_CALL, content=[tool_content(text_block(line))])
                )

        def progress(line: str) -> None:  # called from the supervisor's thread
            loop.call_soon_threadsafe(lambda: asyncio.ensure_future(boot_line(line)))

        options = replace(
            self._options,
            progress=progress,
            approver=self._approve,
            session_id=self.record_id,
            permission_mode=self.mode,
        )
        try:
            session = await build_session(self.target, options, self.paths)
        except Exception as exc:
            if booting:
                await self.send(
                    update_tool_call(
                        BOOT_CALL, status="failed", content=[tool_content(text_block(str(exc)))]
                    )
                )
            raise
        if booting:
            async with in_order:
                await self.send(update_tool_call(BOOT_CALL, status="completed"))
        self.mapper = UpdateMapper(session.target.workspace, session.agent.tools)
        session.agent.asker = acp_asker(self.client, self.id, self._cancel, form=self._form)
        permissions = session.agent.permissions
        wanted = self.mode  # the editor may have switched while the session was built
        if wanted is not None and permissions.mode != wanted:
            session.agent.set_mode(wanted)
        if permissions.mode != (wanted or "sandbox"):  # no sandbox here: ask instead
            await self.send(update_current_mode(permissions.mode))
        self.mode = permissions.mode
        for note in session.notes:
            await self.say(note)
        return session

    async def ready(self) -> AgentSession | None:
        """The built session; None when the prompt was cancelled while waiting."""
        self.start()
        assert self._build is not None
        waiter = asyncio.create_task(self._cancel.wait())
        try:
            await asyncio.wait({self._build, waiter}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
        if not self._build.done():
            return None
        try:
            return self._build.result()
        except asyncio.CancelledError:
            raise user_error(
                "the session's start was stopped; send the prompt again", -32603
            ) from None
        except UserError as exc:
            raise user_error(f"the session could not start: {exc}", -32603) from None

    # -- talking to the editor ----------------------------------------------------

    async def send(self, update: Any) -> None:
        try:
            await self.client.session_update(session_id=self.id, update=update)
        except Exception as exc:  # noqa: BLE001 - the editor went away; the turn goes on
            log.warning("session/update not delivered: %s", exc)

    async def say(self, text: str) -> None:
        await self.send(update_agent_message_text(f"\n\n> sparkcode: {text}\n\n"))

    async def announce(self) -> None:
        """What an editor lists at once: the slash commands."""
        await self.send(update_available_commands(available_commands()))

    async def _approve(self, request: ApprovalRequested) -> ApprovalDecision:
        detail = request.detail.rstrip("\n")
        shown = f"```diff\n{detail}\n```" if request.kind == "edit" else f"```\n{detail}\n```"
        options = [PermissionOption(option_id="allow_once", name="Allow once", kind="allow_once")]
        if request.kind != "loop":
            options.append(
                PermissionOption(
                    option_id="allow_always",
                    name=f"Always allow {request.tool}",
                    kind="allow_always",
                )
            )
        options.append(PermissionOption(option_id="reject_once", name="Reject", kind="reject_once"))
        call = ToolCallUpdate(
            tool_call_id=request.call_id,
            title=request.summary,
            status="pending",
            content=[tool_content(text_block(shown))] if detail else None,
        )
        # ACP has the editor answer a pending approval `cancelled` after
        # session/cancel, but Toad 0.6.20 leaves it unanswered (tried 2026-12-02):
        # the cancel itself ends the wait, and a late answer is dropped by the SDK.
        asking = asyncio.ensure_future(
            self.client.request_permission(session_id=self.id, tool_call=call, options=options)
        )
        cancelled = asyncio.ensure_future(self._cancel.wait())
        try:
            await asyncio.wait({asking, cancelled}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            asking.cancel()
            raise
        finally:
            cancelled.cancel()
        if not asking.done():
            asking.cancel()
            return ApprovalDecision(approved=False, reason="the user cancelled the turn")
        try:
            answer = asking.result()
        except Exception as exc:  # noqa: BLE001 - an editor error is a refusal, said so
            return ApprovalDecision(
                approved=False, reason=f"not approved: the editor did not answer ({exc})"
            )
        outcome = answer.outcome
        if not isinstance(outcome, AllowedOutcome):
            return ApprovalDecision(approved=False, reason="the user cancelled the turn")
        if outcome.option_id == "reject_once":
            return ApprovalDecision(approved=False, reason="the user rejected this call")
        return ApprovalDecision(approved=True, always=outcome.option_id == "allow_always")

    # -- turns --------------------------------------------------------------------

    async def prompt(self, blocks: Sequence[PromptBlock]) -> PromptResponse:
        text = prompt_text(blocks)
        raw_images = prompt_images(blocks)
        if self._running:
            raise user_error("a prompt is already running in this session; cancel it first", -32600)
        self._running = True
        self._cancel.clear()
        try:
            session = await self.ready()
            if session is None:
                return PromptResponse(stop_reason="cancelled")
            parsed = parse_command(text) if not raw_images else None
            if parsed is not None:
                return await self._command(session, *parsed)
            return await self._turn(session, text, self._images(session, raw_images))
        finally:
            self._running = False

    @staticmethod
    def _images(session: AgentSession, raw: list[tuple[str, bytes]]) -> tuple[ImageAttachment, ...]:
        """The prompt's images checked as the TUI checks an attached file: a model
        without vision, a file that is not PNG/JPEG/WebP or one over the cap is an
        error that names it (JSON-RPC -32602), and nothing is sent."""
        if not raw:
            return ()
        settings = session.agent.settings
        try:
            if not settings.vision:
                raise refuse_text_only(session.agent.client.model)
            return tuple(
                image_from_bytes(data, name, max_bytes=settings.image_max_bytes)
                for name, data in raw
            )
        except ImageError as exc:
            raise user_error(str(exc)) from None

    async def _turn(
        self, session: AgentSession, text: str, images: tuple[ImageAttachment, ...] = ()
    ) -> PromptResponse:
        assert self.mapper is not None
        finished: TurnFinished | None = None
        error: AgentError | None = None
        async for event in session.agent.run_turn(text, images):
            for update in self.mapper.updates(event):
                await self.send(update)
            if isinstance(event, AgentError):
                error = event
            elif isinstance(event, TurnFinished):
                finished = event
        assert finished is not None  # every turn ends with one
        meta: dict[str, Any] = {
            "reason": finished.reason,
            "requests": finished.requests,
            "prompt_tokens": finished.prompt_tokens,
            "completion_tokens": finished.completion_tokens,
        }
        if error is not None:
            meta["error"] = error.message
        if session.session_id is not None:
            meta["recording"] = session.session_id
        # ACP: a cancelled prompt answers `cancelled`, whatever stopped the turn first
        # (a refused approval, which the editor answers `cancelled` on cancel).
        stop = "cancelled" if self._cancel.is_set() else STOP_REASONS[finished.reason]
        return PromptResponse(stop_reason=stop, field_meta={"sparkcode": meta})

    def cancel(self) -> None:
        """``session/cancel``: the turn stops at its next frame or tool boundary; a
        prompt still waiting for the engine returns ``cancelled`` (the boot goes on)."""
        self._cancel.set()
        session = self.built()
        if session is not None:
            session.agent.cancel()

    async def set_mode(self, mode: PermissionMode) -> None:
        self.mode = mode
        session = self.built()
        if session is None:
            return  # applied when the session is built
        permissions = session.agent.permissions
        if permissions.mode != "plan" and mode == "plan":
            self._mode_before_plan = permissions.mode
        notice = session.agent.set_mode(mode)  # recorded: a load gets it back
        if notice:
            self.mode = permissions.mode
            await self.send(update_current_mode(permissions.mode))
            await self.say(notice)

    async def _command(self, session: AgentSession, op: Operation, arg: str) -> PromptResponse:
        if op.name == "act":
            agent = session.agent
            if agent.permissions.mode == "plan":
                await self.set_mode(self._mode_before_plan or "sandbox")
                await self.send(update_current_mode(agent.permissions.mode))
                return await self._turn(session, ACT_PROMPT)
            reply = "/act failed: not in plan mode (switch to the plan mode first)"
        else:
            reply = await run_command(
                Context(session, self._show, SessionStore(self.paths.sessions_dir)), op, arg
            )
        await self.send(update_agent_message_text(reply))
        return PromptResponse(stop_reason="end_turn")

    async def _show(self, event: Event) -> None:
        assert self.mapper is not None
        for update in self.mapper.updates(event):
            await self.send(update)

    async def aclose(self) -> None:
        if self._build is None:
            return
        if not self._build.done():
            self._build.cancel()
        try:
            session = await self._build
        except BaseException:  # noqa: BLE001 - nothing was built, nothing to close
            return
        await session.aclose()


def workspace_of(cwd: str) -> Path:
    path = Path(cwd)
    if not path.is_absolute():
        raise user_error(f"cwd must be an absolute path, got {cwd!r}")
    return path


__all__ = ["AcpSession", "prompt_text", "user_error", "workspace_of"]
