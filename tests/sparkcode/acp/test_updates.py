"""The pure parts of the ACP front: events to updates, prompts, MCP servers, load chains."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from acp import RequestError
from acp.schema import (
    AudioContentBlock,
    EnvVariable,
    HttpHeader,
    HttpMcpServer,
    ImageContentBlock,
    McpServerStdio,
    ResourceContentBlock,
    SseMcpServer,
    TextContentBlock,
    ToolCallProgress,
    ToolCallStart,
)

from engine.paths import Paths
from sparkcode.acp import (
    AcpOptions,
    SparkcodeAcpAgent,
    UpdateMapper,
    history_updates,
    latest_continuation,
    mcp_configs,
)
from sparkcode.acp._commands import parse_command
from sparkcode.acp._session import PromptBlock, prompt_images, prompt_text
from sparkcode.agent import (
    MetricsUpdate,
    TodoItem,
    TodoUpdated,
    ToolCallFinished,
    ToolCallStarted,
    UsageUpdate,
    default_tools,
)
from sparkcode.sessions import SessionStore


def usage(final: bool) -> UsageUpdate:
    return UsageUpdate(
        prompt_tokens=90,
        completion_tokens=10,
        reasoning_tokens=0,
        ttft_s=0.5,
        decode_tok_s=12.5,
        prefill_tok_s=180.0,
        context_used=100,
        context_limit=4096,
        final=final,
    )


def test_one_usage_update_a_request_and_the_acceptance_added_when_it_comes(tmp_path: Path) -> None:
    mapper = UpdateMapper(tmp_path, default_tools())
    assert mapper.updates(usage(final=False)) == []  # not one a frame
    (first,) = mapper.updates(usage(final=True))
    assert (first.used, first.size) == (100, 4096)
    assert first.field_meta == {
        "sparkcode": {
            "decode_tok_s": 12.5,
            "prefill_tok_s": 180.0,
            "ttft_s": 0.5,
            "prompt_tokens": 90,
            "completion_tokens": 10,
            "reasoning_tokens": 0,
            "cached_tokens": None,
        }
    }
    (again,) = mapper.updates(
        MetricsUpdate(acceptance_length=2.5, prefix_cache_hit_rate=0.9, kv_cache_usage=0.1)
    )
    assert again.field_meta is not None
    assert again.field_meta["sparkcode"]["acceptance_length"] == 2.5
    assert again.field_meta["sparkcode"]["decode_tok_s"] == 12.5


def test_an_edit_of_a_new_file_is_a_diff_without_old_text_and_a_failure_has_none(
    tmp_path: Path,
) -> None:
    mapper = UpdateMapper(tmp_path, default_tools())
    (start,) = mapper.updates(
        ToolCallStarted(
            call_id="c1",
            name="write_file",
            arguments={"path": "n.md", "content": "x"},
            raw_arguments="",
        )
    )
    assert isinstance(start, ToolCallStart) and start.locations
    assert (start.kind, start.status, start.title) == ("edit", "pending", "write_file n.md")
    assert start.locations[0].path == str(tmp_path / "n.md")
    (tmp_path / "n.md").write_text("x")
    (done,) = mapper.updates(
        ToolCallFinished(call_id="c1", name="write_file", result="wrote", diff="+x")
    )
    assert isinstance(done, ToolCallProgress) and done.content is not None
    assert [(c.type, getattr(c, "old_text", "-")) for c in done.content] == [
        ("diff", None),
        ("content", "-"),
    ]
    mapper.updates(
        ToolCallStarted(
            call_id="c2", name="edit_file", arguments={"path": "n.md"}, raw_arguments=""
        )
    )
    (failed,) = mapper.updates(
        ToolCallFinished(call_id="c2", name="edit_file", result="no", error="no match")
    )
    assert isinstance(failed, ToolCallProgress) and failed.content is not None
    assert failed.status == "failed" and [c.type for c in failed.content] == ["content"]


def test_raw_input_and_output_are_json_objects_even_for_unparsed_arguments(tmp_path: Path) -> None:
    # Toad 0.6.20 drops a whole update whose rawInput/rawOutput is not an object.
    mapper = UpdateMapper(tmp_path, default_tools())
    (start,) = mapper.updates(
        ToolCallStarted(call_id="c3", name="todo", arguments={}, raw_arguments="{not json")
    )
    (done,) = mapper.updates(
        ToolCallFinished(call_id="c3", name="todo", result="error: bad", error="bad")
    )
    assert start.raw_input == {"raw_arguments": "{not json"}
    assert done.raw_output == {"output": "error: bad"}


def test_the_todo_list_is_the_whole_plan() -> None:
    (plan,) = UpdateMapper(Path("/"), default_tools()).updates(
        TodoUpdated(
            items=(
                TodoItem(id=1, text="a", status="done"),
                TodoItem(id=2, text="b", status="in_progress"),
            )
        )
    )
    assert [(e.content, e.status) for e in plan.entries] == [
        ("a", "completed"),
        ("b", "in_progress"),
    ]


def test_a_recorded_history_is_shown_again_without_its_system_prompt() -> None:
    call = {
        "id": "t1",
        "type": "function",
        "function": {"name": "bash", "arguments": json.dumps({"command": "ls"})},
    }
    updates = history_updates(
        [
            {"role": "system", "content": "secret prompt"},
            {"role": "user", "content": "list"},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "t1", "content": "a.txt"},
            {"role": "assistant", "content": "one file"},
        ],
        default_tools(),
    )
    assert [u.session_update for u in updates] == [
        "user_message_chunk",
        "tool_call",
        "tool_call_update",
        "agent_message_chunk",
    ]
    assert updates[1].title == "bash: ls" and updates[1].kind == "execute"


def test_prompt_blocks_become_text_images_are_decoded_and_audio_is_refused() -> None:
    text = prompt_text(
        [
            TextContentBlock(type="text", text="look at"),
            ResourceContentBlock(type="resource_link", name="a", uri="file:///w/a.py"),
        ]
    )
    assert text == "look at @/w/a.py"
    blocks: list[PromptBlock] = [
        TextContentBlock(type="text", text="and"),
        ImageContentBlock(type="image", data="AAEC", mime_type="image/png"),
    ]
    assert prompt_text(blocks) == "and"
    assert prompt_images(blocks) == [("image 1", b"\x00\x01\x02")]
    with pytest.raises(RequestError, match="image 1: its data is not valid base64"):
        prompt_images([ImageContentBlock(type="image", data="A!!", mime_type="image/png")])
    with pytest.raises(RequestError, match="audio prompts are not supported"):
        prompt_text([AudioContentBlock(type="audio", data="AAAA", mime_type="audio/wav")])
    with pytest.raises(RequestError, match="empty"):
        prompt_text([TextContentBlock(type="text", text="  ")])
    assert parse_command("/undo") is not None and parse_command("/etc/passwd?") is None


def test_the_editors_mcp_servers_join_under_their_own_names() -> None:
    (stdio, http) = mcp_configs(
        [
            McpServerStdio(
                name="fs tools",
                command="/bin/mcp",
                args=["-v"],
                env=[EnvVariable(name="K", value="v")],
            ),
            HttpMcpServer(type="http", name="web", url="http://127.0.0.1:1/mcp", headers=[]),
        ]
    )
    assert (stdio.name, stdio.command, stdio.args, stdio.env) == (
        "editor-fs_tools",
        "/bin/mcp",
        ("-v",),
        (("K", "v"),),
    )
    assert (http.name, http.url) == ("editor-web", "http://127.0.0.1:1/mcp")
    with pytest.raises(RequestError, match="headers"):
        mcp_configs(
            [
                HttpMcpServer(
                    type="http",
                    name="w",
                    url="http://x/mcp",
                    headers=[HttpHeader(name="A", value="b")],
                )
            ]
        )
    with pytest.raises(RequestError, match="stdio and HTTP"):
        mcp_configs([SseMcpServer(type="sse", name="s", url="http://x/sse", headers=[])])


def test_the_editors_mcp_servers_are_added_to_config_tomls(workspace: Path) -> None:
    paths = Paths.from_env()
    paths.config_file.parent.mkdir(parents=True, exist_ok=True)
    paths.config_file.write_text('[mcp.servers.mine]\ncommand = "/bin/mine"\n')
    agent = SparkcodeAcpAgent(AcpOptions(endpoint="http://127.0.0.1:9"), paths)
    agent.client = object()  # type: ignore[assignment]  # only checked for None
    session = agent._session(
        "s1", str(workspace), [McpServerStdio(name="fs", command="/bin/mcp", args=[], env=[])]
    )
    assert [s.name for s in session.target.config.mcp_servers] == ["mine", "editor-fs"]


def test_a_load_follows_the_chain_of_acp_continuations(tmp_path: Path) -> None:
    def header(sid: str, created: str, parent: str | None, origin: str = "acp") -> None:
        record = {"kind": "header", "session_id": sid, "created": created, "origin": origin}
        if parent:
            record["parent"] = parent
        (tmp_path / f"{sid}.jsonl").write_text(json.dumps(record) + "\n")

    header("aaaaaaaaaaaa", "2026-01-01T00:00:00", None)
    header("bbbbbbbbbbbb", "2026-01-01T00:01:00", "aaaaaaaaaaaa")
    header("cccccccccccc", "2026-01-01T00:02:00", "aaaaaaaaaaaa")  # a second, newer load
    header("dddddddddddd", "2026-01-01T00:03:00", "cccccccccccc")
    header("eeeeeeeeeeee", "2026-01-01T00:04:00", "dddddddddddd", origin="tui")
    store = SessionStore(tmp_path)
    assert latest_continuation(store, "aaaaaaaaaaaa") == "dddddddddddd"
    assert latest_continuation(store, "bbbbbbbbbbbb") == "bbbbbbbbbbbb"
