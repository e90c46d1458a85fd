"""A repro bundle: what an upstream bug report needs to reproduce a flagged turn.

Layout::

    README.md         what is flagged, how to run it, versions
    engine.sh         the engine's exact command line and environment (secrets redacted)
    repro.sh          the requests as curl calls, in order
    requests/NN.json  the request bodies, byte for byte as sent
    session.jsonl     the minimized session (sparkcode format: requests and responses)
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from engine.errors import UserError
from sparkcode.sessions import Redactor, Session, SessionRecorder
from sparkcode.target import Target

from ._minimize import MinimizeResult


def _engine_script(engine: dict[str, Any]) -> str:
    lines = [
        "#!/bin/sh",
        "# The engine that served the recorded session (secrets redacted).",
        "set -e",
    ]
    if engine.get("argv"):
        for key, value in sorted((engine.get("env") or {}).items()):
            lines.append(f"export {key}={shlex.quote(str(value))}")
        lines.append("exec " + shlex.join(str(a) for a in engine["argv"]))
    else:
        lines.append(f"# No managed engine: the session ran against {engine.get('base_url')}.")
        lines.append("echo 'start an OpenAI-compatible server and set BASE' >&2")
    return "\n".join(lines) + "\n"


def _repro_script(base_url: str, count: int) -> str:
    lines = [
        "#!/bin/sh",
        "# Send the requests in order; the last one is the flagged turn.",
        "# BASE is the engine's OpenAI-compatible root (ends in /v1).",
        f"BASE=${{BASE:-{base_url}}}",
        'cd "$(dirname "$0")"',
        "mkdir -p responses",
        "set -e",
    ]
    for n in range(1, count + 1):
        lines.append(
            f'curl -sSN "$BASE/chat/completions" -H "Content-Type: application/json" '
            f"--data-binary @requests/{n:02d}.json > responses/{n:02d}.sse"
        )
        lines.append(f'echo "request {n:02d}: $(wc -c < responses/{n:02d}.sse) bytes"')
    return "\n".join(lines) + "\n"


def write_bundle(directory: Path, session: Session, target: Target, result: MinimizeResult) -> Path:
    """Write the bundle for ``result`` into ``directory`` (created; must be empty)."""
    if directory.exists() and any(directory.iterdir()):
        raise UserError(f"bundle directory {directory} exists and is not empty")
    (directory / "requests").mkdir(parents=True, exist_ok=True)
    clean: list[bytes] = []
    for n, sent in enumerate(result.sent, start=1):
        body = json.loads(sent.body)
        body.pop("cache_salt", None)  # only isolated the minimizer's runs from each other
        data = json.dumps(body, indent=2, ensure_ascii=False).encode("utf-8")
        clean.append(data)
        (directory / "requests" / f"{n:02d}.json").write_bytes(data)
    engine = session.engine
    (directory / "engine.sh").write_text(_engine_script(engine), encoding="utf-8")
    (directory / "repro.sh").write_text(
        _repro_script(target.base_url, len(result.sent)), encoding="utf-8"
    )
    for script in ("engine.sh", "repro.sh"):
        (directory / script).chmod(0o755)

    recorder = SessionRecorder(
        directory,
        workspace=str(session.header.get("workspace", "")),
        engine=engine,
        redactor=Redactor.from_env(),
        session_id="session",
        origin="minimize",
        extra={"minimized_from": session.id, "flagged": result.to_json(), "target": target.label},
    )
    try:
        for sent, body in zip(result.sent, clean, strict=True):
            index = recorder.request(
                "POST",
                target.base_url + "/chat/completions",
                [("content-type", "application/json")],
                body,
            )
            recorder.response(index, sent.status or 0, sent.headers)
            for _t_ns, data in sent.chunks:
                recorder.chunk(index, data)
            recorder.end(
                index,
                usage=sent.output.usage,
                error=sent.output.error,
                chunks=len(sent.chunks),
                nbytes=sum(len(d) for _, d in sent.chunks),
            )
    finally:
        recorder.close()

    flagged = result.sent[-1].output
    why = (
        "trips the degeneration detector"
        if result.kind == "degenerate"
        else "differs from its reference output (the recording, or the same request "
        "sent alone on a cold prefix cache once tool outputs are trimmed)"
    )
    readme = f"""# Repro: turn {result.flagged_turn} of sparkcode session {session.id}

The last request (`requests/{len(result.sent):02d}.json`) {why} when the requests are
sent in order to a fresh engine started with `engine.sh`. Earlier turns that are not
needed were dropped; {len(result.trims)} tool output(s) were trimmed
({", ".join(f"{k}: {v} chars kept" for k, v in result.trims.items()) or "none"}).
Kept requests of the original session: {result.kept_requests} ({result.runs} runs to find).
{result.reason}

## Run

    ./engine.sh &            # wait until it answers /health
    BASE={target.base_url} ./repro.sh
    # responses/{len(result.sent):02d}.sse is the flagged turn

## Engine

- vLLM: {engine.get("vllm_version")}
- profile: {engine.get("profile")}
- model: {engine.get("model")} ({engine.get("model_path")}, revision {engine.get("model_revision")})
- prefix caching: {engine.get("prefix_caching")}
- plugin features: {", ".join(engine.get("plugin_features") or []) or "none"}
- rerun target: {target.label}

## Flagged output (first 400 characters)

```
{(flagged.reasoning + flagged.content)[:400]}
```

`session.jsonl` holds the same requests with the responses of the reproducing run,
with arrival times; `sparkcode replay session.jsonl --play` shows it.
"""
    (directory / "README.md").write_text(readme, encoding="utf-8")
    return directory
