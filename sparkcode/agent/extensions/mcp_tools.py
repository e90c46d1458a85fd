"""MCP servers' tools as agent tools, through the official ``mcp`` SDK.

The servers are declared in ``config.toml`` (``[mcp.servers.NAME]``: a
``command`` for stdio, or a ``url`` for streamable HTTP). :meth:`McpHub.start`
connects to all of them at session start and lists their tools once; each
becomes a tool named ``mcp__<server>__<tool>``, so the tool list, which is part
of the prompt prefix, stays byte-stable for the session. A server that fails to
start or to list its tools is reported in :attr:`McpHub.failures` and skipped.

Each connection lives in a task of its own (anyio contexts must be left by the
task that entered them); calls are sent from whichever task runs the tool.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from sparkcode.config import McpServerConfig

from ..tools import Preview, Tool, ToolContext, ToolError, ToolOutput, cap_output

log = logging.getLogger(__name__)

TOOL_PREFIX = "mcp__"
_NAME_BAD = re.compile(r"[^A-Za-z0-9_-]")


class McpError(Exception):
    """A server could not be started, listed or called."""


def tool_name(server: str, tool: str) -> str:
    """``mcp__<server>__<tool>``, limited to what the OpenAI API accepts in a name."""
    return (TOOL_PREFIX + server + "__" + _NAME_BAD.sub("_", tool))[:64]


class McpConnection:
    """One running server: its client session, owned by a background task."""

    def __init__(self, config: McpServerConfig, log_dir: Path) -> None:
        self.config = config
        self.log_path = log_dir / f"{config.name}.log"
        self._client: Any = None
        self._ready: asyncio.Future[list[Any]] | None = None
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._errlog: IO[str] | None = None

    async def start(self) -> list[Any]:
        """Connect and list the tools (``mcp_types.Tool``); McpError on failure."""
        self._ready = asyncio.get_running_loop().create_future()
        self._task = asyncio.create_task(self._own(), name=f"mcp-{self.config.name}")
        try:
            return await asyncio.wait_for(
                asyncio.shield(self._ready), self.config.startup_timeout_s
            )
        except TimeoutError:
            await self.close()
            raise McpError(f"no answer within {self.config.startup_timeout_s:g}s") from None
        except Exception as exc:  # noqa: BLE001 - the SDK raises many kinds
            await self.close()
            raise McpError(_describe(exc)) from None

    async def _own(self) -> None:
        from mcp import Client

        assert self._ready is not None
        try:
            async with Client(self._transport()) as client:
                tools: list[Any] = []
                cursor: str | None = None
                while True:
                    page = await client.list_tools(cursor=cursor)
                    tools += page.tools
                    cursor = page.next_cursor
                    if not cursor:
                        break
                self._client = client
                self._ready.set_result(tools)
                await self._stop.wait()
        except BaseException as exc:  # noqa: BLE001 - reported through the future
            if not self._ready.done():
                self._ready.set_exception(
                    exc if isinstance(exc, Exception) else McpError("cancelled")
                )
            elif not isinstance(exc, asyncio.CancelledError):
                log.warning("MCP server %s ended: %s", self.config.name, _describe(exc))
        finally:
            self._client = None

    def _transport(self) -> Any:
        cfg = self.config
        if cfg.url is not None:
            return cfg.url
        from mcp import StdioServerParameters, stdio_client

        assert cfg.command is not None
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        # The server's stderr goes to a log file, never into the terminal app.
        self._errlog = self.log_path.open("a", encoding="utf-8")
        params = StdioServerParameters(
            command=cfg.command,
            args=list(cfg.args),
            env=dict(cfg.env) or None,
            cwd=str(cfg.cwd) if cfg.cwd else None,
        )
        return stdio_client(params, errlog=self._errlog)

    async def call(self, tool: str, arguments: dict[str, Any]) -> Any:
        """The ``CallToolResult`` of one call; McpError if the server is gone."""
        if self._client is None:
            raise McpError(f"the MCP server {self.config.name!r} is not running")
        try:
            return await asyncio.wait_for(
                self._client.call_tool(tool, arguments), self.config.call_timeout_s
            )
        except TimeoutError:
            raise McpError(f"no answer within {self.config.call_timeout_s:g}s") from None
        except Exception as exc:  # noqa: BLE001 - protocol errors, a dead server
            raise McpError(_describe(exc)) from None

    async def close(self) -> None:
        self._stop.set()
        if self._task is not None and not self._task.done():
            try:
                await asyncio.wait_for(asyncio.shield(self._task), 5)
            except (TimeoutError, Exception):  # noqa: BLE001 - closing anyway
                self._task.cancel()
                with contextlib.suppress(BaseException):
                    await self._task
        if self._errlog is not None:
            self._errlog.close()
            self._errlog = None


@dataclass
class McpHub:
    """Every configured server that started, and the tools they offer."""

    connections: list[McpConnection] = field(default_factory=list)
    tools: list[McpTool] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    """One message per server that was skipped, for the user."""

    @classmethod
    async def start(cls, servers: tuple[McpServerConfig, ...], log_dir: Path) -> McpHub:
        hub = cls()
        conns = [McpConnection(cfg, log_dir) for cfg in servers]
        results = await asyncio.gather(*(c.start() for c in conns), return_exceptions=True)
        for conn, result in zip(conns, results, strict=True):
            name = conn.config.name
            if isinstance(result, BaseException):
                where = f" (its log: {conn.log_path})" if conn.config.command else ""
                hub.failures.append(f"MCP server {name!r} was skipped: {_describe(result)}{where}")
                continue
            hub.connections.append(conn)
            for spec in result:
                hub.tools.append(McpTool(conn, spec))
        unique: dict[str, McpTool] = {}
        for tool in hub.tools:
            if tool.name in unique:
                hub.failures.append(
                    f"MCP tool name {tool.name!r} is offered twice; only the first is used"
                )
            else:
                unique[tool.name] = tool
        hub.tools = list(unique.values())
        return hub

    async def aclose(self) -> None:
        await asyncio.gather(*(c.close() for c in self.connections), return_exceptions=True)


class McpTool(Tool):
    """One server tool, offered to the model under its namespaced name."""

    def __init__(self, conn: McpConnection, spec: Any) -> None:
        schema = dict(spec.input_schema or {})
        schema.setdefault("type", "object")
        schema.setdefault("properties", {})
        self.server = conn.config.name
        self.remote_name = str(spec.name)
        self.schema = schema
        self._conn = conn
        super().__init__(
            name=tool_name(self.server, self.remote_name),
            description=f"[MCP server {self.server}] {spec.description or spec.name}",
            parameters=dict(schema["properties"]),
            kind="mcp",
            required=tuple(schema.get("required") or ()),
        )

    def spec(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.schema,
            },
        }

    async def preview(self, args: dict[str, Any], ctx: ToolContext) -> Preview:
        text = json.dumps(args, ensure_ascii=False, indent=1)
        return Preview(
            summary=f"MCP {self.server}: {self.remote_name}"
            f"({json.dumps(args, ensure_ascii=False)[:80]})",
            detail=f"server {self.server}, tool {self.remote_name}\n{text}",
        )

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        try:
            result = await self._conn.call(self.remote_name, args)
        except McpError as exc:
            raise ToolError(f"{self.name}: {exc}") from None
        text = result_text(result)
        if result.is_error:
            raise ToolError(cap_output(text or "the MCP tool reported an error", ctx.output_cap))
        return ToolOutput(cap_output(text, ctx.output_cap))


def result_text(result: Any) -> str:
    """A ``CallToolResult`` as text: text blocks as they are, others described."""
    parts: list[str] = []
    for block in result.content or []:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
        elif kind in ("image", "audio"):
            parts.append(f"[{kind} {block.mime_type}, {len(block.data)} base64 characters]")
        elif kind == "resource":
            res = block.resource
            parts.append(getattr(res, "text", None) or f"[resource {res.uri}]")
        elif kind == "resource_link":
            parts.append(f"[resource link {block.uri}]")
        else:
            parts.append(f"[{kind or 'unknown'} content]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(parts)


def _describe(exc: BaseException) -> str:
    # anyio task groups wrap the real error in an ExceptionGroup.
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc) or type(exc).__name__
    return text if isinstance(exc, McpError) else f"{type(exc).__name__}: {text}"
