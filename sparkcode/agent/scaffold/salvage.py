"""Recovering tool calls that the server's parser did not return.

Local models often write a call the server does not recognise: in the wrong
format for the configured parser, slightly malformed, or as a bare JSON object
without the tags the parser waits for; the call then arrives as answer text,
as reasoning, or not at all (vLLM's streaming hermes parser swallows what
follows a ``<tool_call>`` it cannot read). :func:`salvage` finds such calls in
text, in the formats models use:

- hermes / Qwen: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``
  (also with ``parameters``, arguments as a JSON string, a missing closing tag,
  code fences, trailing commas, single-quoted Python-style literals);
- GLM-4.5/4.7/5.x: ``<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>
  ...</tool_call>`` (values are text; a value is JSON-decoded only where the
  tool's schema says the argument is not a string, as vLLM's glm47 parser does);
- ``<tool_call>NAME {json arguments}</tool_call>``;
- Qwen3-Coder: ``<function=NAME><parameter=K>V</parameter>...</function>`` and
  MiniMax-M2 / Anthropic-style: ``<invoke name="NAME"><parameter name="K">V
  </parameter>...</invoke>``, with or without a wrapper (``<tool_call>``,
  ``<minimax:tool_call>``, ``<function_calls>``); values are typed by the schema
  as for GLM;
- a bare JSON object of call shape (``name`` plus ``arguments``/``parameters``,
  or OpenAI's ``{"function": {...}}``) or ``{"TOOL": {arguments}}`` naming a
  known tool.

A call that is recognisably an attempt but cannot be read becomes a
:class:`Unreadable` with a message saying exactly what is wrong; its raw text
is never sent back to the model.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from ..._pyparse import literal_eval
from ..tools import ToolRegistry

_OPEN, _CLOSE = "<tool_call>", "</tool_call>"
_FENCE = re.compile(r"^```[a-zA-Z]*\s*|\s*```$")
_GLM_ARG = re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", re.DOTALL)
_NAME = re.compile(r"[A-Za-z_][\w.\-]*")
_STOPS = ("<|im_end|>", "<|endoftext|>", "<|user|>", "<|observation|>", "<|assistant|>")
_ARG_KEYS = ("arguments", "parameters", "args", "input")


@dataclass(frozen=True)
class Recovered:
    """A call read from text: the name and the arguments as a JSON object string."""

    name: str
    arguments: str
    form: str
    """``hermes``, ``glm``, ``name+json``, ``bare json``, ``qwen xml`` or ``invoke xml``."""


@dataclass(frozen=True)
class Unreadable:
    """A call attempt that cannot be run, and why (said to the model)."""

    problem: str
    name: str = ""


@dataclass
class Salvage:
    """What :func:`salvage` found in one text."""

    calls: list[Recovered] = field(default_factory=list)
    unreadable: list[Unreadable] = field(default_factory=list)
    text: str = ""
    """The text with every call attempt cut out (what stays in the history)."""

    def __bool__(self) -> bool:
        return bool(self.calls or self.unreadable)


def salvage(text: str, registry: ToolRegistry) -> Salvage:
    """Every tool call written into ``text``; empty when there is none."""
    out = Salvage()
    kept: list[str] = []
    rest = _xml_calls(text, registry, out)
    while True:
        at = rest.find(_OPEN)
        if at < 0:
            break
        kept.append(rest[:at])
        body_start = at + len(_OPEN)
        end = _body_end(rest, body_start)
        body = rest[body_start:end]
        closed = rest.startswith(_CLOSE, end)
        rest = rest[end + (len(_CLOSE) if closed else 0) :]
        _tagged(body, closed, registry, out)
    kept.append(rest)
    remaining = "".join(kept)
    if not out:
        remaining = _bare(remaining, registry, out)
    if not out:
        remaining = _broken_attempt(remaining, out)
    out.text = remaining.strip() if out else text
    return out


_CALL_START = re.compile(r'(?:^|\n)[ \t]*(\{\s*"name"\s*:)')
"""Where a call-shaped JSON object begins: ``{"name":`` at the start of a line."""


def _broken_attempt(text: str, out: Salvage) -> str:
    """The call attempts nothing could read: a ``</tool_call>`` that no
    ``<tool_call>`` opened, or a ``{"name": ...`` object left open at the end of
    the text (a model that ran out of tokens or lost its way inside a call)."""
    # Only objects at the top level: a "name" key deep in other JSON is data.
    starts = [
        m.start(1) for m in _CALL_START.finditer(text) if _open_depth(text[: m.start(1)]) == 0
    ]
    close = text.find(_CLOSE)
    if close >= 0:
        begin = max([i for i in starts if i < close], default=0)
        out.unreadable.append(
            Unreadable(
                f"the closing {_CLOSE} has no opening {_OPEN} before it; write each call as "
                f'{_OPEN}{{"name": "TOOL", "arguments": {{...}}}}{_CLOSE}',
                _guess_name(text[begin:close]),
            )
        )
        return text[:begin] + text[close + len(_CLOSE) :]
    if (
        starts
        and _open_depth(text[starts[-1] :]) != 0
        and _call_shaped(_top_keys(text[starts[-1] :]))
    ):
        begin = starts[-1]
        out.unreadable.append(
            Unreadable(
                'your call\'s JSON object starts with {"name": but never closes; write the '
                'whole call: {"name": "TOOL", "arguments": {...}}',
                _guess_name(text[begin:]),
            )
        )
        return text[:begin]
    return text


def _body_end(text: str, start: int) -> int:
    """Where a tagged call's body ends: its closing tag, the next opening tag, an
    end-of-turn marker, or the end of the text."""
    ends = [i for i in (text.find(m, start) for m in (_CLOSE, _OPEN, *_STOPS)) if i >= 0]
    return min(ends) if ends else len(text)


def _unfence(body: str) -> str:
    return _FENCE.sub("", body.strip()).strip()


def _tagged(body: str, closed: bool, registry: ToolRegistry, out: Salvage) -> None:
    body = _unfence(body)
    if not body:
        out.unreadable.append(Unreadable("your <tool_call> was empty: it named no tool"))
        return
    if body.startswith("{"):
        obj, why = _loads_object(body)
        if obj is None:
            cut = "" if closed else " (it has no closing </tool_call>; was it cut off?)"
            out.unreadable.append(
                Unreadable(
                    f"the JSON in your <tool_call> could not be read: {why}{cut}", _guess_name(body)
                )
            )
            return
        _from_object(obj, registry, out, "hermes", explicit=True)
        return
    m = _NAME.match(body)
    if m is None:
        out.unreadable.append(
            Unreadable(
                "your <tool_call> starts with neither a JSON object nor a tool name "
                f"(it starts with {body[:20]!r})"
            )
        )
        return
    name, after = m.group(0), body[m.end() :].strip()
    if "<arg_key>" in after or not after:
        _glm(name, after, registry, out)
        return
    if after.startswith("{"):
        obj, why = _loads_object(after)
        if obj is None:
            out.unreadable.append(
                Unreadable(f"the arguments of your {name} call could not be read: {why}", name)
            )
            return
        _checked(name, obj, registry, out, "name+json")
        return
    out.unreadable.append(
        Unreadable(
            f"after the tool name {name!r} your <tool_call> has neither <arg_key>/<arg_value> "
            "pairs nor a JSON object of arguments",
            name,
        )
    )


def _typed(name: str, pairs: list[tuple[str, str]], registry: ToolRegistry) -> dict[str, Any]:
    """Arguments written as text: JSON-decoded where the tool's schema says the
    argument is not a string (as vLLM's glm47 and qwen3_coder parsers do)."""
    tool = registry.get(name)
    props: dict[str, Any] = tool.parameters if tool is not None else {}
    args: dict[str, Any] = {}
    for key, value in pairs:
        key = key.strip()
        kind = props.get(key, {}).get("type") if isinstance(props.get(key), dict) else None
        if kind not in (None, "string"):
            try:
                args[key] = json.loads(value)
                continue
            except ValueError:
                pass
        args[key] = value
    return args


def _glm(name: str, args_text: str, registry: ToolRegistry, out: Salvage) -> None:
    args = _typed(name, _GLM_ARG.findall(args_text), registry)
    leftover = _GLM_ARG.sub("", args_text).strip()
    if leftover:
        if "<arg_key>" in leftover and "</arg_value>" not in leftover.split("<arg_key>")[-1]:
            why = "its last <arg_value> is not closed (was it cut off?)"
        else:
            why = f"text outside <arg_key>/<arg_value> pairs ({leftover[:40]!r})"
        out.unreadable.append(
            Unreadable(f"the arguments of your {name} call could not be read: {why}", name)
        )
        return
    _checked(name, args, registry, out, "glm")


_XML_CALL = re.compile(
    r"<function=(?P<fname>[^>\s]+)\s*>(?P<fbody>.*?)(?:</function>|(?=<function=)|$)"
    r"|<invoke\s+name=\"(?P<iname>[^\"]+)\"\s*>(?P<ibody>.*?)(?:</invoke>|(?=<invoke\s)|$)",
    re.DOTALL,
)
_XML_PARAM = re.compile(
    r"<parameter(?:=(?P<k1>[^>\s]+)|\s+name=\"(?P<k2>[^\"]+)\")\s*>(?P<v>.*?)</parameter>",
    re.DOTALL,
)
_XML_WRAPPERS = re.compile(
    r"<(?P<tag>tool_call|minimax:tool_call|function_calls)>\s*(?:</(?P=tag)>|$)"
    r"|^\s*</(?:tool_call|minimax:tool_call|function_calls)>",
    re.DOTALL,
)
"""A wrapper a cut-out call leaves empty: a pair, an opener at the end, a closer at the start."""


def _xml_calls(text: str, registry: ToolRegistry, out: Salvage) -> str:
    """Qwen3-Coder's ``<function=...>`` and MiniMax's ``<invoke name=...>`` calls in
    ``text``; the text without them (and without wrappers they leave empty)."""
    if "<function=" not in text and "<invoke" not in text:
        return text
    kept: list[str] = []
    last = 0
    for m in _XML_CALL.finditer(text):
        name = m["fname"] or m["iname"]
        body = m["fbody"] if m["fname"] else m["ibody"]
        closed = text.endswith("</function>" if m["fname"] else "</invoke>", 0, m.end())
        form = "qwen xml" if m["fname"] else "invoke xml"
        kept.append(text[last : m.start()])
        last = m.end()
        pairs = [(p["k1"] or p["k2"], _strip_newline(p["v"])) for p in _XML_PARAM.finditer(body)]
        leftover = _XML_PARAM.sub("", body)
        for stop in _STOPS:
            leftover = leftover.split(stop, 1)[0]
        leftover = re.sub(
            r"</?(?:tool_call|minimax:tool_call|function_calls)>", "", leftover
        ).strip()
        if leftover or not closed:
            why = (
                "its last <parameter> is not closed (was it cut off?)"
                if "<parameter" in leftover
                else f"text outside <parameter> tags ({leftover[:40]!r})"
                if leftover
                else f"it has no closing {'</function>' if m['fname'] else '</invoke>'} "
                "(was it cut off?)"
            )
            out.unreadable.append(
                Unreadable(f"the arguments of your {name} call could not be read: {why}", name)
            )
            continue
        _checked(name, _typed(name, pairs, registry), registry, out, form)
    kept.append(text[last:])
    return _XML_WRAPPERS.sub("", "".join(kept))


def _strip_newline(value: str) -> str:
    """A parameter value without the one newline each side that the format puts there."""
    value = value[1:] if value.startswith("\n") else value
    return value[:-1] if value.endswith("\n") else value


def _from_object(
    obj: dict[str, Any], registry: ToolRegistry, out: Salvage, form: str, *, explicit: bool
) -> bool:
    """Read a call object; False if it is not call-shaped (and not explicit)."""
    fn = obj.get("function")
    if isinstance(fn, dict) and isinstance(fn.get("name"), str):
        obj = fn
    name = obj.get("name", obj.get("tool", obj.get("tool_name")))
    if isinstance(name, str) and name:
        key = next((k for k in _ARG_KEYS if k in obj), None)
        args: Any = obj.get(key, {}) if key else {}
        if key is None and not explicit and registry.get(name) is None:
            return False  # {"name": "Bob"} in an answer is not a call
        if isinstance(args, str):
            parsed, why = _loads_object(args) if args.strip() else ({}, "")
            if parsed is None:
                out.unreadable.append(
                    Unreadable(
                        f"the arguments of your {name} call are a string that is not a JSON "
                        f"object: {why}",
                        name,
                    )
                )
                return True
            args = parsed
        if not isinstance(args, dict):
            out.unreadable.append(
                Unreadable(
                    f"the arguments of your {name} call must be a JSON object, got "
                    f"{type(args).__name__}",
                    name,
                )
            )
            return True
        _checked(name, args, registry, out, form)
        return True
    if len(obj) == 1:
        ((only, args),) = obj.items()
        if registry.get(only) is not None and isinstance(args, dict):
            _checked(only, args, registry, out, form)
            return True
    if explicit:
        out.unreadable.append(
            Unreadable(
                'the JSON in your <tool_call> has no "name" naming the tool (expected '
                '{"name": TOOL, "arguments": {...}})'
            )
        )
        return True
    return False


def _checked(
    name: str, args: dict[str, Any], registry: ToolRegistry, out: Salvage, form: str
) -> None:
    if registry.get(name) is None:
        out.unreadable.append(
            Unreadable(
                f"there is no tool named {name!r}; the tools are: {', '.join(registry.names)}", name
            )
        )
        return
    out.calls.append(Recovered(name, json.dumps(args, ensure_ascii=False), form))


def _bare(text: str, registry: ToolRegistry, out: Salvage) -> str:
    """Call-shaped JSON objects anywhere in ``text``; the text without them."""
    decoder = json.JSONDecoder()
    kept: list[str] = []
    i = last = 0
    while (i := text.find("{", i)) >= 0:
        try:
            obj, end = decoder.raw_decode(text, i)
        except (ValueError, RecursionError):
            i += 1
            continue
        if isinstance(obj, dict) and _from_object(obj, registry, out, "bare json", explicit=False):
            kept.append(text[last:i])
            last = end
        i = end
    kept.append(text[last:])
    return _FENCE_ANY.sub("", "".join(kept)) if out else text


_FENCE_ANY = re.compile(r"```[a-zA-Z]*\s*```")
"""A code fence left empty once the call inside it is cut out."""


def _loads_object(text: str) -> tuple[dict[str, Any] | None, str]:
    """A JSON object from text a model wrote, forgiving the usual slips; or why not."""
    text = text.strip()
    try:
        obj, end = json.JSONDecoder().raw_decode(text)
    except RecursionError:
        return None, "it is nested too deeply to read"
    except json.JSONDecodeError as exc:
        at = "" if exc.msg.endswith(" at") else " at"
        first = f"{exc.msg}{at} character {exc.pos}"
        for fixed in _repairs(text):
            try:
                obj = json.loads(fixed)
            except (ValueError, RecursionError):
                try:
                    obj = literal_eval(fixed)
                except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                    continue
            if isinstance(obj, dict):
                return obj, ""
        return None, first
    if not isinstance(obj, dict):
        return None, f"it is a JSON {type(obj).__name__}, not an object"
    return obj, ""


def _repairs(text: str) -> list[str]:
    """Candidate fixes: trailing commas, missing closing braces, Python literals."""
    no_commas = re.sub(r",\s*([}\]])", r"\1", text)
    out = [no_commas]
    depth = _open_depth(no_commas)
    if depth > 0:
        out.append(no_commas + "}" * depth)
    py = re.sub(
        r"\btrue\b", "True", re.sub(r"\bfalse\b", "False", re.sub(r"\bnull\b", "None", no_commas))
    )
    out.append(py)
    return out


def _open_depth(text: str) -> int:
    """Unclosed ``{`` outside strings (negative: too many ``}``); -1 if in a string."""
    braces, in_str, _ = _scan(text)
    return -1 if in_str else braces


def _top_keys(text: str) -> dict[str, str]:
    """The keys of the JSON object ``text`` begins, as far as it was written, each
    with the first character of its value ("" where the text ends first)."""
    return _scan(text)[2]


_COLON = re.compile(r"\s*:\s*")


def _scan(text: str) -> tuple[int, bool, dict[str, str]]:
    """One pass over JSON-like text: unclosed ``{`` outside strings, whether it
    ends inside a string, and the top-level object's keys (see :func:`_top_keys`)."""
    keys: dict[str, str] = {}
    braces = nested = start = 0
    in_str = esc = False
    for i, c in enumerate(text):
        if in_str:
            if esc:
                esc = False
            elif c == "\\":
                esc = True
            elif c == '"':
                in_str = False
                if nested == 1 and (colon := _COLON.match(text, i + 1)):
                    keys[text[start:i]] = text[colon.end() : colon.end() + 1]
        elif c == '"':
            in_str, start = True, i + 1
        elif c in "{[":
            nested += 1
            braces += c == "{"
        elif c in "}]":
            nested -= 1
            braces -= c == "}"
    return braces, in_str, keys


def _call_shaped(keys: dict[str, str]) -> bool:
    """Only a call's keys, and its arguments (if written yet) an object."""
    return keys.keys() <= {"name", "function", *_ARG_KEYS} and all(
        keys[k] in ("", "{", '"') for k in _ARG_KEYS if k in keys
    )


def _guess_name(body: str) -> str:
    m = re.search(r'"name"\s*:\s*"([^"]+)"', body)
    return m.group(1) if m else ""


@dataclass
class Outcome:
    """What the loop does with a response that had no parsed call."""

    calls: list[Recovered]
    unreadable: list[Unreadable]
    source: str
    """``content``, ``reasoning`` or ``held back`` (tokens the server streamed as nothing)."""
    content: str
    """The answer text to keep in the history (call text cut out)."""

    def notice(self) -> str:
        parts = []
        if self.calls:
            names = ", ".join(c.name for c in self.calls)
            forms = ", ".join(sorted({c.form for c in self.calls}))
            parts.append(
                f"recovered {len(self.calls)} tool call(s) ({names}) written as "
                f"{forms} in the model's {self.source}, which the server's parser "
                "did not return"
            )
        if self.unreadable:
            parts.append(
                f"{len(self.unreadable)} tool call(s) in the model's {self.source} "
                "could not be read; the model is told what was wrong"
            )
        return "; ".join(parts)


def recover(
    content: str, reasoning: str, hidden: str | None, registry: ToolRegistry
) -> Outcome | None:
    """Salvage from the answer, else the reasoning, else the held-back text."""
    for source, text in (
        ("content", content),
        ("reasoning", reasoning),
        ("held back", hidden or ""),
    ):
        if not text.strip():
            continue
        if source == "held back" and _OPEN not in text:
            # What the parser held back starts at the call's opening tag, which a
            # tokenizer may count as a special token and leave out of the text.
            text = _OPEN + text
        found = salvage(text, registry)
        if found:
            kept = found.text if source == "content" else content
            return Outcome(found.calls, found.unreadable, source, kept)
    return None
