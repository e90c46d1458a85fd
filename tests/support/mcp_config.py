"""config.toml text that declares the tests' own MCP server over stdio."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def stdio_server_toml(name: str) -> str:
    """An ``[mcp.servers.NAME]`` table, as a user would write it, that starts the test server."""
    return (
        f'[mcp.servers.{name}]\ncommand = "{sys.executable}"\n'
        'args = ["-m", "tests.support.mcp_server", "stdio"]\n'
        f'env = {{ PYTHONPATH = "{ROOT}" }}\nstartup_timeout_s = 60\n'
    )
