"""A small language server over stdio for the LSP client's protocol tests.

It reports one error per line containing ``BAD`` (its message names the word that
``workspace/configuration`` returned for section ``fake.word``, asked once after
``initialized``). Flags: ``--hang`` never answers ``initialize``; ``--no-version``
leaves ``version`` out of ``publishDiagnostics``; ``--exit-on-change`` exits with
code 3 at the first ``didChange``. The real server tests use basedpyright.
"""

from __future__ import annotations

import json
import sys
from typing import Any

FLAGS = set(sys.argv[1:])


def read() -> dict[str, Any] | None:
    length = None
    while True:
        line = sys.stdin.buffer.readline()
        if not line:
            return None
        if line in (b"\r\n", b"\n"):
            break
        name, _, value = line.decode().partition(":")
        if name.lower() == "content-length":
            length = int(value)
    assert length is not None
    return json.loads(sys.stdin.buffer.read(length))  # type: ignore[no-any-return]


def send(message: dict[str, Any]) -> None:
    body = json.dumps({"jsonrpc": "2.0", **message}).encode()
    sys.stdout.buffer.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
    sys.stdout.buffer.flush()


def publish(uri: str, version: int, text: str, word: str) -> None:
    diagnostics = [
        {
            "range": {
                "start": {"line": n, "character": line.index("BAD")},
                "end": {"line": n, "character": line.index("BAD") + 3},
            },
            "severity": 1,
            "source": "fake",
            "code": "bad",
            "message": f"{word} on this line",
        }
        for n, line in enumerate(text.splitlines())
        if "BAD" in line
    ]
    params: dict[str, Any] = {"uri": uri, "diagnostics": diagnostics}
    if "--no-version" not in FLAGS:
        params["version"] = version
    send({"method": "textDocument/publishDiagnostics", "params": params})


def main() -> None:
    word: str | None = None
    """Known once the client answered ``workspace/configuration``; documents wait for it."""
    waiting: list[dict[str, Any]] = []
    while (message := read()) is not None:
        method = message.get("method")
        if method == "initialize":
            if "--hang" in FLAGS:
                continue
            send({"id": message["id"], "result": {"capabilities": {"textDocumentSync": 1}}})
        elif method == "initialized":
            send(
                {
                    "id": "cfg",
                    "method": "workspace/configuration",
                    "params": {"items": [{"section": "fake.word"}]},
                }
            )
        elif message.get("id") == "cfg" and "result" in message:
            word = message["result"][0] or "BAD"
            for doc_message in waiting:
                document(doc_message, word)
            waiting.clear()
        elif method in ("textDocument/didOpen", "textDocument/didChange"):
            if "--exit-on-change" in FLAGS and method == "textDocument/didChange":
                sys.exit(3)
            if word is None:
                waiting.append(message)
            else:
                document(message, word)
        elif method == "shutdown":
            send({"id": message["id"], "result": None})
        elif method == "exit":
            return


def document(message: dict[str, Any], word: str) -> None:
    doc = message["params"]["textDocument"]
    text = (
        doc["text"]
        if message["method"] == "textDocument/didOpen"
        else message["params"]["contentChanges"][0]["text"]
    )
    publish(doc["uri"], doc["version"], text, word)


if __name__ == "__main__":
    main()
