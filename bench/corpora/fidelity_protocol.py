"""The held-out protocol of issue 12's fidelity bench: which tokens calibrate and which score,
and how far the scores could move with another choice of chunks.

The standard library's top-level ``*.py`` files sorted by name: calibration from the
even-indexed files, held-out code from the odd-indexed ones, held-out prose from those files'
docstrings of 300+ characters. Chunks are 256 tokens.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import torch

SEQ = 256


def _head_chunks(tok: Any, files: list[Path], n: int) -> list[torch.Tensor]:
    out = []
    for path in files:
        ids = tok(path.read_text(encoding="utf-8"), add_special_tokens=False).input_ids
        if len(ids) >= SEQ:
            out.append(torch.tensor(ids[:SEQ]))
        if len(out) == n:
            return out
    raise SystemExit(f"only {len(out)} files with {SEQ}+ tokens; need {n}")


def _docstrings(files: list[Path]) -> str:
    docs = []
    for path in files:
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc and len(doc) >= 300:
                    docs.append(doc)
    return "\n\n".join(docs)


def _stream_chunks(tok: Any, files: list[Path], n: int) -> list[torch.Tensor]:
    ids: list[int] = []
    for path in files:
        ids += tok(path.read_text(encoding="utf-8"), add_special_tokens=False).input_ids
        if len(ids) >= n * SEQ:
            return [torch.tensor(ids[i * SEQ : (i + 1) * SEQ]) for i in range(n)]
    raise SystemExit(f"the files give {len(ids)} tokens; need {n * SEQ}")


def protocol(tok: Any, reading: str = "heads") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``heads``: one chunk from the start of each file; ``stream``: the files joined and cut
    into consecutive chunks (so the first few long files give all of them)."""
    from engine.quant.engine_capture import stdlib_files

    files = stdlib_files()
    even, odd = files[0::2], files[1::2]
    chunks = _head_chunks if reading == "heads" else _stream_chunks
    calib = chunks(tok, even, 64)
    code = chunks(tok, odd, 32)
    prose_ids = tok(_docstrings(odd), add_special_tokens=False).input_ids
    if len(prose_ids) < 32 * SEQ:
        raise SystemExit(f"docstrings give {len(prose_ids)} tokens; need {32 * SEQ}")
    prose = [torch.tensor(prose_ids[i * SEQ : (i + 1) * SEQ]) for i in range(32)]
    return torch.stack(calib), torch.stack(code), torch.stack(prose)


def spread(
    kld: torch.Tensor, other: torch.Tensor, draws: int = 10000
) -> tuple[list[float], list[float]]:
    """95% bootstrap intervals, over the held-out chunks, of the mean KLD and of its ratio to
    ``other``'s on the same draw: how much a different choice of chunks could move each."""
    gen = torch.Generator().manual_seed(0)
    pick = torch.randint(0, kld.numel(), (draws, kld.numel()), generator=gen)
    mean, ratio = kld[pick].mean(1), kld[pick].mean(1) / other[pick].mean(1)
    q = torch.tensor([0.025, 0.975], dtype=mean.dtype)
    return torch.quantile(mean, q).tolist(), torch.quantile(ratio, q).tolist()
