"""web_fetch against a local HTTP server: Markdown, caps, refusals, approval."""

from __future__ import annotations

import contextlib
import io
import json
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from engine.paths import Paths
from sparkcode.agent import ApprovalRequested, ChatClient, ToolCallFinished
from sparkcode.agent.core.loop import Agent, AgentSettings
from sparkcode.agent.core.permissions import Permissions
from sparkcode.agent.tools import ToolContext, ToolError, WebFetch, default_tools
from sparkcode.cli._run import RunRequest, run_headless
from sparkcode.config import Config, ConfigError, WebFetchConfig, parse_config
from sparkcode.start import SessionOptions
from tests.sparkcode.agent.core.test_loop import of, run
from tests.support.http_server import serve, url
from tests.support.loopback import running
from tests.support.scripted import Reply, ScriptedServer

PAGE = b"""<html><head><title>t</title><style>.x{color:red}</style>
<script>alert('no')</script></head><body><nav>menu menu</nav><main>
<h1>Widget API</h1><p>Call <code>widget.spin(3)</code> to spin, see
<a href="/more">more</a>.</p><ul><li>fast</li><li>safe</li></ul></main></body></html>"""


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        if self.path == "/slow":
            time.sleep(10)  # far past the 0.5 s timeout, so only the timeout ends it
        if self.path == "/moved":
            self.send_response(302)
            self.send_header("Location", "/page")
            self.end_headers()
            return
        body, ctype = {
            "/page": (PAGE, "text/html; charset=utf-8"),
            "/big": (b"x" * 50_000, "text/plain"),
            "/img": (b"\x89PNG....", "image/png"),
        }.get(self.path, (b"slow", "text/plain"))
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        with contextlib.suppress(OSError):  # the client stops reading at its cap
            self.wfile.write(body)


@pytest.fixture
def site() -> Iterator[str]:
    with running(ThreadingHTTPServer(("127.0.0.1", 0), _Handler)) as server:
        yield f"http://127.0.0.1:{server.server_address[1]}"


def fetch(**config: Any) -> WebFetch:
    return WebFetch(WebFetchConfig(enabled=True, **config))


async def test_the_local_server_is_refused_by_default_and_allowed_by_the_setting(
    site: str, workspace: Path
) -> None:
    ctx = ToolContext(workspace=workspace)
    with pytest.raises(
        ToolError,
        match=r"refused: 127\.0\.0\.1 resolves to 127\.0\.0\.1, a "
        r"local or private address \(set \[web_fetch\] allow_private",
    ):
        await fetch().run({"url": f"{site}/page"}, ctx)
    with pytest.raises(ToolError, match="resolves to ::1|resolves to 127"):
        await fetch().run({"url": site.replace("127.0.0.1", "localhost") + "/page"}, ctx)
    out = await fetch(allow_private=True).run({"url": f"{site}/moved"}, ctx)
    text = out.text
    assert text.startswith(f"# {site}/moved\n\n(HTTP 200, text/html; charset=utf-8")
    assert "# Widget API" in text and "`widget.spin(3)`" in text
    assert "[more](/more)" in text and "- fast\n- safe" in text
    assert "alert" not in text and "color:red" not in text and "menu menu" not in text


async def test_caps_and_bad_input_are_clear_errors(site: str, workspace: Path) -> None:
    ctx = ToolContext(workspace=workspace)
    tool = fetch(allow_private=True, max_bytes=10_000, timeout_s=0.5)
    big = await tool.run({"url": f"{site}/big"}, ctx)
    assert "10000 bytes; cut at 10000 bytes)" in big.text
    assert big.text.endswith("\n\n" + "x" * 10_000)
    started = time.monotonic()
    with pytest.raises(ToolError, match=r"took longer than 0\.5s"):
        await tool.run({"url": f"{site}/slow"}, ctx)
    assert time.monotonic() - started < 8
    with pytest.raises(ToolError, match="is image/png, not text"):
        await tool.run({"url": f"{site}/img"}, ctx)
    with pytest.raises(ToolError, match="not an http\\(s\\) URL"):
        await tool.run({"url": "file:///etc/passwd"}, ctx)
    closed = site.rsplit(":", 1)[0] + ":1"
    with pytest.raises(ToolError, match="could not fetch http://127.0.0.1:1/x: ConnectError"):
        await tool.run({"url": f"{closed}/x"}, ctx)
    with pytest.raises(ToolError, match="could not resolve no-such-host.invalid"):
        await tool.run({"url": "http://no-such-host.invalid/"}, ctx)


async def test_a_fetch_is_approved_first_and_recorded_like_any_result(
    site: str, workspace: Path
) -> None:
    server = ScriptedServer(
        [
            Reply(tool_calls=[("web_fetch", json.dumps({"url": f"{site}/page"}))]),
            Reply(content=["spin it with widget.spin"]),
        ]
    )
    client = ChatClient("http://engine.test/v1", "m", transport=server.transport())
    agent = Agent(
        client,
        workspace,
        settings=AgentSettings(),
        permissions=Permissions(Config(), mode="sandbox"),
        tools=default_tools([fetch(allow_private=True)]),
    )
    events = await run(agent, "how do I spin a widget?", answers=[True])
    asked = of(events, ApprovalRequested)[0]
    assert asked.tool == "web_fetch" and asked.summary == f"fetch {site}/page"
    assert of(events, ToolCallFinished)[0].error is None
    result = [m for m in server.requests[1]["messages"] if m["role"] == "tool"][0]["content"]
    assert "# Widget API" in result
    plan = Permissions(Config(), mode="plan").decide(fetch(), {"url": site}, workspace)
    assert plan.verdict == "deny"


def test_web_fetch_is_off_by_default_and_its_settings_are_checked(tmp_path: Path) -> None:
    assert Config().web_fetch.enabled is False
    cfg = parse_config("[web_fetch]\nenabled = true\nmax_bytes = 4096\n", tmp_path / "c.toml")
    assert cfg.web_fetch == WebFetchConfig(enabled=True, max_bytes=4096)
    for bad in ("enabled = 1", "max_bytes = 10", "timeout_s = -1", "proxy = 'x'"):
        with pytest.raises(ConfigError, match=r"\[web_fetch\]"):
            parse_config(f"[web_fetch]\n{bad}\n", tmp_path / "c.toml")


async def test_the_session_offers_web_fetch_only_when_enabled(
    workspace: Path, paths: Paths
) -> None:
    async def tools() -> list[str]:
        with serve([Reply(content=["hi"])]) as server:
            await run_headless(
                RunRequest(
                    prompt="hi",
                    workspace=workspace,
                    endpoint=url(server),
                    session=SessionOptions(record=False),
                ),
                out=io.StringIO(),
                err=io.StringIO(),
            )
        return [t["function"]["name"] for t in server.requests[0]["tools"]]

    assert "web_fetch" not in await tools()
    paths.config_file.parent.mkdir(parents=True, exist_ok=True)
    paths.config_file.write_text("[web_fetch]\nenabled = true\n")
    assert (await tools())[-1] == "web_fetch"
