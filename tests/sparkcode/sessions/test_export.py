"""Transcripts of recorded sessions (``sessions export --format md|html``): a real agent
session over the scripted server, read back through playback and rendered."""

from __future__ import annotations

import asyncio
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from engine.errors import UserError
from engine.paths import Paths
from sparkcode.agent import Agent, AgentSettings, ChatClient, Permissions
from sparkcode.config import Config
from sparkcode.replay import session_transcript
from sparkcode.sessions import Session, SessionEvent, event_recorder, load_session, start_recording
from sparkcode.sessions.export import TRANSCRIPT_FORMATS, transcript_format
from tests.support.scripted import Reply, ScriptedServer

SCRIPT = "<script>alert('pwned')</script>"
THINKING = "the user wants a note file; I will write it"


def replies() -> list[Reply]:
    note = json.dumps({"path": "NOTES.md", "content": "first line\nsecond line\n"})
    shell = json.dumps({"command": f'echo "{SCRIPT}"'})
    return [
        Reply(
            reasoning=["the user wants ", "a note file; ", "I will write it"],
            tool_calls=[("write_file", note), ("bash", shell)],
        ),
        Reply(content=["Wrote **NOTES.md**", " and ran <b>echo</b>."]),
        Reply(reasoning=["short"], content=["All done."]),
    ]


async def record(
    paths: Paths,
    workspace: Path,
    prompts: tuple[str, ...] = ("write the notes", "thanks"),
    script: list[Reply] | None = None,
) -> Path:
    """A real agent session (tools, loop, recorder) against the scripted server."""
    server = ScriptedServer(replies() if script is None else script)
    recorder, transport = start_recording(
        "http://engine.test/v1",
        workspace=workspace,
        model="m",
        paths=paths,
        inner=server.transport(),
    )
    client = ChatClient("http://engine.test/v1", "m", transport=transport)
    agent = Agent(
        client,
        workspace,
        settings=AgentSettings(),
        permissions=Permissions(Config(), mode="full-auto"),
    )
    agent.subscribe(event_recorder(recorder))
    for prompt in prompts:
        async for _ in agent.run_turn(prompt):
            pass
    await client.aclose()
    recorder.close()
    return recorder.path


@pytest.fixture
def recorded(paths: Paths, workspace: Path) -> Session:
    return load_session(asyncio.run(record(paths, workspace)))


def md(session: Session) -> str:
    return asyncio.run(session_transcript(session, "md"))


def html(session: Session) -> str:
    return asyncio.run(session_transcript(session, "html"))


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parsed(page: str) -> _Tags:
    tags = _Tags()
    tags.feed(page)
    return tags


def test_markdown_has_turns_thinking_collapsed_and_the_tool_call_with_its_diff(
    recorded: Session,
) -> None:
    text = md(recorded)
    assert text.startswith(f"# Session {recorded.id}\n")
    assert "## Turn 1" in text and "## Turn 2" in text and "## Turn 3" not in text
    assert "> write the notes" in text and "> thanks" in text
    # Thinking is a collapsed block holding the streamed reasoning.
    block = re.search(
        r"<details>\n<summary>Thinking \(3 tokens\)</summary>\n\n```text\n"
        r"(.*?)\n```\n\n</details>",
        text,
        re.S,
    )
    assert block is not None and block.group(1) == THINKING
    assert "<details open" not in text
    # The call, its arguments, its diff and its result.
    assert "### Tool call: `write_file`" in text
    assert '"path": "NOTES.md"' in text
    diff = re.search(r"```diff\n(.*?)\n```", text, re.S)
    assert diff is not None and "+first line" in diff.group(1) and "+second line" in diff.group(1)
    assert "### Tool call: `bash`" in text
    assert "Wrote **NOTES.md** and ran <b>echo</b>." in text  # the answer stays Markdown
    # Figures per request and per turn.
    assert re.search(
        r"\*\d+ prompt tokens · 7 completion tokens · 3 thinking · first token "
        r"\d+\.\d\d s · \d+\.\d\d s · .*finish tool_calls\*",
        text,
    ), text
    assert re.search(
        r"\*at \d+\.\d\d s · took \d+\.\d\d s · 2 requests · \d+ prompt tokens · "
        r"\d+ completion tokens · ended: stop\*",
        text,
    )


def test_markdown_fences_cannot_be_closed_by_what_they_hold(recorded: Session) -> None:
    text = md(recorded)
    # The bash result holds the script tag as text inside a fence, never as bare HTML.
    fenced = re.findall(r"```text\n(.*?)\n```", text, re.S)
    assert any(SCRIPT in block for block in fenced)
    bare = re.sub(r"(`{3,})[a-z]*\n.*?\n\1", "", text, flags=re.S)
    assert "<script>" not in bare
    event = next(
        e for e in recorded.events if e.type == "ToolCallFinished" and e.data["name"] == "bash"
    )
    event.data["result"] = "before\n```\n## not a heading\n```` more"
    text = md(recorded)
    assert "`````text\nbefore\n```\n## not a heading\n```` more\n`````" in text


def test_html_escapes_everything_the_session_holds(recorded: Session) -> None:
    page = html(recorded)
    assert page.startswith("<!DOCTYPE html>")
    tags = parsed(page)
    assert "script" not in tags.tags  # neither the tool's output nor the answer runs
    assert "&lt;script&gt;alert(&#x27;pwned&#x27;)&lt;/script&gt;" in page
    assert SCRIPT in "".join(tags.text)  # shown as text
    assert "&lt;b&gt;echo&lt;/b&gt;" in page and "<strong>NOTES.md</strong>" in page
    assert "b" not in tags.tags
    # Thinking collapsed, the diff's lines marked.
    assert re.search(
        r"<details><summary>Thinking \(3 tokens\)</summary>"
        r"<pre class=\"thinking\">" + re.escape(THINKING) + "</pre></details>",
        page,
    )
    assert '<span class="add">+first line</span>' in page
    assert tags.tags.count("section") == 2 and "link" not in tags.tags


def test_a_user_message_with_html_and_a_bad_link_is_shown_not_run(
    paths: Paths, workspace: Path
) -> None:
    prompt = 'see <img src=x onerror="alert(1)"> and [here](javascript:alert(1))'
    session = load_session(asyncio.run(record(paths, workspace, (prompt,))))
    page = html(session)
    assert "img" not in parsed(page).tags and "javascript:" not in page.replace(
        "[here](javascript:alert(1))", ""
    )
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in page


def test_secrets_stay_redacted(recorded: Session, monkeypatch: pytest.MonkeyPatch) -> None:
    # A credential header a recording still holds (a hand-edited or foreign file), and a
    # secret-named variable of this process: neither shows anywhere in a transcript.
    token = "sk-live-abcdef123456"
    env_secret = "hunter2-very-secret"
    first = recorded.exchanges[0]
    first.request_headers = [*first.request_headers, ("Authorization", f"Bearer {token}")]
    monkeypatch.setenv("MY_SERVICE_TOKEN", env_secret)
    event = next(e for e in recorded.events if e.type == "ToolCallFinished")
    event.data["result"] = f"key={token} pass={env_secret}"
    recorded.events.append(
        SessionEvent(event.t_ns + 1, "Notice", {"message": f"saw {token[:9]}" + token[9:]})
    )
    for fmt in TRANSCRIPT_FORMATS:
        text = asyncio.run(session_transcript(recorded, fmt))
        assert token not in text and env_secret not in text, fmt
        assert "key=&lt;redacted&gt;" in text or "key=<redacted>" in text


def test_images_are_named_not_embedded(recorded: Session) -> None:
    start = next(e for e in recorded.events if e.type == "TurnStarted")
    start.data["images"] = ["shot.png (PNG, 1280x800, 211.4 KiB)"]
    text = md(recorded)
    assert "Images attached:\n\n- shot.png (PNG, 1280x800, 211.4 KiB)" in text
    assert "base64" not in text


def test_unknown_format_is_named() -> None:
    assert transcript_format("html") == "html"
    with pytest.raises(UserError, match=r"unknown export format 'pdf'; known: md, html"):
        transcript_format("pdf")


def test_a_failed_call_shows_its_error_once(paths: Paths, workspace: Path) -> None:
    """The error is the call's result: one block labelled Error, not a paragraph and
    the same text again as the result (seen exporting a tmux trial)."""
    edit = json.dumps({"path": "missing.py", "old_string": "a", "new_string": "b"})
    script = [Reply(tool_calls=[("edit_file", edit)]), Reply(content=["It failed."])]
    session = load_session(asyncio.run(record(paths, workspace, ("edit it",), script)))
    text, page = md(session), html(session)
    assert text.count("missing.py") == 2  # the arguments and the error block
    assert "Error:\n\n```text\nerror: " in text and "**Error:**" not in text
    assert "<p>Error:</p>" in page and "<strong>Error:</strong>" not in page
