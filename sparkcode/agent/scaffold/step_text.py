"""What a small-model step shows the user: its ``answer`` string, decoded as it streams.

In small-model mode (``_structured``) every reply is one JSON step, but the
transcript should read as in normal mode: an answer streams as its text and a
tool step shows only as its tool card. :class:`StepText` reads the step's JSON
as the deltas arrive and gives back the characters of the top-level ``answer``
string only, decoded (an escape such as ``\\n`` or a ``\\uXXXX`` surrogate pair
may be split across deltas). A reply that does not begin as a JSON object (a
server that ignored the schema) passes through as it came.
"""

from __future__ import annotations

from .structured import read_step

_WS = " \t\n\r"
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}

# Where the reader is in the step.
_START, _RAW, _KEY_OR_END, _KEY, _COLON, _VALUE, _ANSWER, _SKIP, _AFTER_VALUE, _DONE, _BAD = range(
    11
)


class _StringDecoder:
    """The inside of one JSON string, fed a character at a time (after its opening quote)."""

    def __init__(self) -> None:
        self.escaped = False
        self.hex: str | None = None
        """The digits of a ``\\u`` escape read so far."""
        self.high: int | None = None
        """A high surrogate waiting to see whether a low one follows."""

    def feed(self, c: str, out: list[str]) -> bool | None:
        """Decode ``c`` into ``out``: True at the closing quote, None on a bad escape."""
        if self.hex is not None:
            if c not in "0123456789abcdefABCDEF":
                return None
            self.hex += c
            if len(self.hex) == 4:
                self._code_point(int(self.hex, 16), out)
                self.hex = None
            return False
        if self.escaped:
            self.escaped = False
            if c == "u":
                self.hex = ""
                return False
            if c not in _ESCAPES:
                return None
            self._flush(out)
            out.append(_ESCAPES[c])
            return False
        if c == "\\":
            self.escaped = True
            return False
        self._flush(out)
        if c == '"':
            return True
        out.append(c)
        return False

    def _code_point(self, cp: int, out: list[str]) -> None:
        # As json.loads: a high surrogate escape and a low one make one character;
        # a lone surrogate stays as it is.
        if self.high is not None and 0xDC00 <= cp <= 0xDFFF:
            out.append(chr(0x10000 + ((self.high - 0xD800) << 10) + (cp - 0xDC00)))
            self.high = None
            return
        self._flush(out)
        if 0xD800 <= cp <= 0xDBFF:
            self.high = cp
        else:
            out.append(chr(cp))

    def _flush(self, out: list[str]) -> None:
        if self.high is not None:
            out.append(chr(self.high))
            self.high = None


class StepText:
    """Feed it a reply's content deltas; it returns the text the user should see.

    Only the first top-level ``answer`` key's string is shown (what
    :func:`~sparkcode.agent.scaffold.structured.read_step` reads as the answer); other
    keys' values (a tool's name and arguments) are skipped, however nested.
    """

    def __init__(self) -> None:
        self._mode = _START
        self._raw: list[str] = []
        self._shown: list[str] = []
        self._lead = ""
        self._string: _StringDecoder | None = None
        self._key: list[str] = []
        self._answer_key = False
        self.is_answer = False
        """The step has begun an ``answer`` string."""
        # Skipping a value: nesting depth, inside a string, after a backslash.
        self._depth = 0
        self._in_string = False
        self._escaped = False

    @property
    def shown(self) -> str:
        """All the text returned so far."""
        return "".join(self._shown)

    @classmethod
    def read(cls, text: str) -> StepText:
        """A reader that has read the whole of ``text``."""
        reader = cls()
        reader.feed(text)
        return reader

    def feed(self, delta: str) -> str:
        """The text ``delta`` adds for the user (often empty)."""
        self._raw.append(delta)
        if self._mode == _RAW:
            self._shown.append(delta)
            return delta
        out: list[str] = []
        i = 0
        while i < len(delta):
            c = delta[i]
            if self._step(c, out, delta[i:]):
                break  # passed the rest through
            i += 1
        text = "".join(out)
        if text:
            self._shown.append(text)
        return text

    def finish(self) -> str:
        """The stream has ended: what is left to show.

        A reply that read as a JSON object but is neither a step nor an answer
        (a server that did not hold the model to the schema) is shown as it
        was written, so the turn does not look empty; a step cut short (output
        limit, a stopped stream) adds nothing.
        """
        if self._mode in (_START, _RAW) or self.is_answer:
            return ""
        text = "".join(self._raw)
        if self._mode != _BAD and (self._mode != _DONE or read_step(text) is not None):
            return ""
        self._shown.append(text)
        return text

    def _step(self, c: str, out: list[str], rest: str) -> bool:
        """Read one character; True when it and the rest of the delta were passed through."""
        mode = self._mode
        if mode == _START:
            if c in _WS:
                self._lead += c
            elif c == "{":
                self._mode = _KEY_OR_END
            else:
                self._mode = _RAW
                out.append(self._lead + rest)
                return True
        elif mode == _KEY_OR_END:
            if c == '"':
                self._mode, self._string, self._key = _KEY, _StringDecoder(), []
            elif c == "}":
                self._mode = _DONE
            elif c not in _WS:
                self._mode = _BAD
        elif mode in (_KEY, _ANSWER):
            assert self._string is not None
            sink = self._key if mode == _KEY else out
            done = self._string.feed(c, sink)
            if done is None:
                self._mode = _BAD
            elif done:
                self._mode = _COLON if mode == _KEY else _AFTER_VALUE
        elif mode == _COLON:
            if c == ":":
                self._mode = _VALUE
                self._answer_key = "".join(self._key) == "answer" and not self.is_answer
            elif c not in _WS:
                self._mode = _BAD
        elif mode == _VALUE:
            if c in _WS:
                return False
            if c == '"' and self._answer_key:
                self.is_answer = True
                self._mode, self._string = _ANSWER, _StringDecoder()
                return False
            self._mode = _SKIP
            self._depth, self._in_string, self._escaped = 0, False, False
            self._skip(c)
        elif mode == _SKIP:
            self._skip(c)
        elif mode == _AFTER_VALUE:
            if c == ",":
                self._mode = _KEY_OR_END
            elif c == "}":
                self._mode = _DONE
            elif c not in _WS:
                self._mode = _BAD
        elif mode == _DONE and c not in _WS:
            self._mode = _BAD
        return False

    def _skip(self, c: str) -> None:
        """One character of a value that is not shown (a string, number, object...)."""
        if self._in_string:
            if self._escaped:
                self._escaped = False
            elif c == "\\":
                self._escaped = True
            elif c == '"':
                self._in_string = False
                if self._depth == 0:
                    self._mode = _AFTER_VALUE
        elif c == '"':
            self._in_string = True
        elif c in "{[":
            self._depth += 1
        elif c in "}]" and self._depth > 0:
            self._depth -= 1
            if self._depth == 0:
                self._mode = _AFTER_VALUE
        elif self._depth == 0 and (c in ",}" or c in _WS):
            # The end of a number or literal: the character belongs to the object.
            self._mode = _AFTER_VALUE
            self._step(c, [], "")


def shown_text(content: str) -> str:
    """What an assistant message's content shows in a transcript: a complete small-model
    step's answer, nothing for a tool step, any other text as it is."""
    step = read_step(content)
    if step is None:
        return content
    return step.answer or ""


__all__ = ["StepText", "shown_text"]
