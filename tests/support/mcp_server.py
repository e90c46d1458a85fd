"""A small real MCP server for the tests (the official SDK's MCPServer).

``python -m tests.support.mcp_server stdio`` serves over stdin/stdout;
``python -m tests.support.mcp_server http PORT`` serves streamable HTTP at
``http://127.0.0.1:PORT/mcp``. Its tools: ``add``, ``note`` (appends to
``notes.txt`` in its working directory, so a call has a visible effect),
``big`` (a long result, for the size cap) and ``fail`` (a tool error).
"""

from __future__ import annotations

import sys
from pathlib import Path

from mcp.server.mcpserver import MCPServer

server = MCPServer("testtools")


@server.tool()
def add(a: int, b: int) -> str:
    """Add two integers."""
    return str(a + b)


@server.tool()
def note(text: str) -> str:
    """Append a line to notes.txt."""
    with Path("notes.txt").open("a", encoding="utf-8") as f:
        f.write(text + "\n")
    return f"noted: {text}"


@server.tool()
def big(n: int) -> str:
    """Return n characters."""
    return "x" * n


@server.tool()
def fail(why: str) -> str:
    """Always fails."""
    raise ValueError(f"failed because {why}")


def main() -> None:
    transport = sys.argv[1] if len(sys.argv) > 1 else "stdio"
    if transport == "http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run("stdio")


if __name__ == "__main__":
    main()
