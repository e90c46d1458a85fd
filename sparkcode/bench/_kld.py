"""Teacher-forced comparison of targets on the same tokens (see docs/bench.md).

The first target is the reference. Its tokenizer cuts each text set into
chunks of token ids; every target gets exactly those ids as the prompt of a
``/v1/completions`` request with ``prompt_logprobs = k`` (the largest k the
server allows, up to ``--top-k``), so each position comes back with the log
probability of the real next token and the server's top k.

Per position, P (reference) and Q are compared on the union U of both top-k
sets plus one tail bucket holding the rest. A token one side did not report is
given that side's floor: its remaining mass shared equally by the missing
tokens and the tail, capped at its k-th probability. The estimate is exact when
the top k hold all the mass; otherwise it leans low (merging tokens into one
bucket can only lower KL), which the reported top-k coverage quantifies.
"""

from __future__ import annotations

import json
import math
import re
import secrets
from pathlib import Path
from typing import Any

from engine.errors import UserError

from ._http import Server
from ._run import Context
from ._stats import bootstrap_ratio
from ._texts import text_set

Position = tuple[float, list[int], list[float]]
"""(log p of the real token, top-k ids by rank, their log probs)."""


def _safe(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", label)[:80]


def kl_position(p: Position, q: Position) -> float:
    """KL(P || Q) over the union of the top-k sets and one tail bucket."""
    p_ids, p_lps = p[1], p[2]
    q_ids, q_lps = q[1], q[2]
    pk = dict(zip(p_ids, p_lps, strict=True))
    qk = dict(zip(q_ids, q_lps, strict=True))
    union = list(dict.fromkeys([*p_ids, *q_ids]))

    def side(known: dict[int, float]) -> tuple[dict[int, float], float]:
        probs = {t: math.exp(lp) for t, lp in known.items()}
        rest = max(0.0, 1.0 - sum(probs.values()))
        missing = [t for t in union if t not in probs]
        if missing:
            kth = min(probs.values()) if probs else rest
            floor = min(kth, rest / (len(missing) + 1))
            for t in missing:
                probs[t] = floor
            rest -= floor * len(missing)
        return probs, max(rest, 0.0)

    pp, p_tail = side(pk)
    qq, q_tail = side(qk)
    eps = 1e-12
    kl = sum(pp[t] * math.log(max(pp[t], eps) / max(qq[t], eps)) for t in union if pp[t] > 0)
    if p_tail > 0:
        kl += p_tail * math.log(max(p_tail, eps) / max(q_tail, eps))
    return max(kl, 0.0)


def compare(ref: list[Position], other: list[Position]) -> dict[str, Any]:
    """Per-chunk sums: KL, top-1 agreement, and both sides' negative log-likelihood."""
    if len(ref) != len(other):
        raise UserError(
            "the targets returned different numbers of prompt positions for the same token ids"
        )
    kl = [kl_position(a, b) for a, b in zip(ref, other, strict=True)]
    agree = sum(1 for a, b in zip(ref, other, strict=True) if a[1][:1] == b[1][:1])
    return {
        "n": len(kl),
        "kl_sum": sum(kl),
        "kl_max": max(kl, default=0.0),
        "top1_agree": agree,
        "kl": [round(x, 6) for x in kl],
    }


def _parse(data: dict[str, Any], ids: list[int], k: int, label: str) -> list[Position]:
    choices = data.get("choices") or [{}]
    rows = choices[0].get("prompt_logprobs")
    if not isinstance(rows, list) or len(rows) != len(ids):
        raise UserError(
            f"{label} returned no prompt log-probabilities (vLLM's "
            "prompt_logprobs on /v1/completions): KLD needs them"
        )
    out: list[Position] = []
    for token, row in zip(ids[1:], rows[1:], strict=True):
        if not isinstance(row, dict):
            raise UserError(f"{label} returned a malformed prompt_logprobs entry")
        entries = sorted(((int(t), v) for t, v in row.items()), key=lambda e: e[1]["rank"])
        actual = row.get(str(token))
        if actual is None:
            raise UserError(f"{label}'s prompt_logprobs lack the prompt's own token")
        top = [(t, float(v["logprob"])) for t, v in entries if int(v["rank"]) <= k][:k]
        out.append((float(actual["logprob"]), [t for t, _ in top], [lp for _, lp in top]))
    return out


async def _logprobs(server: Server, ids: list[int], k: int) -> tuple[list[Position], int]:
    """Prompt log-probs of ``ids`` at the largest allowed k (<= ``k``)."""
    while True:
        try:
            data = await server.completion(
                {
                    "prompt": ids,
                    "max_tokens": 1,
                    "temperature": 0.0,
                    "prompt_logprobs": k,
                    "cache_salt": secrets.token_hex(8),
                }
            )
        except UserError as exc:
            allowed = re.search(r"max allowed: (-?\d+)", str(exc))
            if allowed and 0 < int(allowed.group(1)) < k:
                k = int(allowed.group(1))
                continue
            if allowed:
                raise UserError(
                    f"{server.target.label} allows no prompt log-probabilities "
                    f"(max_logprobs {allowed.group(1)}): start it with "
                    "--max-logprobs 20 or more"
                ) from None
            raise
        return _parse(data, ids, k, server.target.label), k


async def _chunks(ctx: Context, server: Server) -> dict[str, list[int]]:
    """The reference's token-id chunks (made once, saved), checked against this target's
    tokenizer."""
    s = ctx.settings
    data = ctx.result.data
    texts = {name: text_set(name) for name in s["texts"]}
    if "chunks" not in data:
        chunks: dict[str, list[int]] = {}
        for name, text in texts.items():
            ids = await server.tokenize(text[: s["chunk_tokens"] * s["chunks"] * 12])
            size = s["chunk_tokens"]
            for i in range(s["chunks"]):
                piece = ids[i * size : (i + 1) * size]
                if len(piece) < 2:
                    break
                chunks[f"{Path(name).name}:{i}"] = piece
        data["chunks"] = chunks
        ctx.result.save()
    else:
        for name, text in texts.items():
            first = data["chunks"].get(f"{Path(name).name}:0")
            ids = await server.tokenize(text[: s["chunk_tokens"] * s["chunks"] * 12])
            if first is not None and ids[: len(first)] != first:
                raise UserError(
                    f"{ctx.label} tokenizes the {name} text differently from the "
                    "reference: KLD compares distributions over one vocabulary, "
                    "so both targets need the same tokenizer"
                )
    return dict(data["chunks"])


def _store(ctx: Context, run: str) -> Path:
    folder = ctx.result.path / "logprobs"
    folder.mkdir(exist_ok=True)
    return folder / f"{_safe(ctx.label)}-{run}.jsonl"


def load_run(path: Path) -> dict[str, list[Position]]:
    out: dict[str, list[Position]] = {}
    if not path.is_file():
        return out
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue  # a line cut by an interruption
        out[row["key"]] = [(a, i, lp) for a, i, lp in row["positions"]]
    return out


async def _collect(
    ctx: Context, server: Server, run: str, chunks: dict[str, list[int]], bar_name: str
) -> dict[str, list[Position]]:
    path = _store(ctx, run)
    have = load_run(path)
    bar = ctx.bar(bar_name, [f"{run}:{key}" for key in chunks])
    k = int(ctx.settings["top_k"])
    with path.open("a", encoding="utf-8") as fh:
        for key, ids in chunks.items():
            unit_key = f"{run}:{key}"
            if key in have and ctx.result.done(ctx.label, unit_key):
                continue
            positions, k = await _logprobs(server, ids, k)
            fh.write(json.dumps({"key": key, "positions": positions}) + "\n")
            fh.flush()
            have[key] = positions
            nll = -sum(p[0] for p in positions)
            coverage = sum(sum(math.exp(lp) for lp in p[2]) for p in positions)
            ctx.result.put(
                ctx.label,
                unit_key,
                {
                    "n": len(positions),
                    "nll_sum": nll,
                    "top_k": k,
                    "coverage_sum": coverage,
                    "file": str(path.relative_to(ctx.result.path)),
                },
            )
            bar.advance()
    return have


async def run(ctx: Context) -> None:
    s = ctx.settings
    reference = ctx.result.data["targets"][0]["label"]
    is_ref = ctx.label == reference
    async with Server(ctx.target) as server:
        chunks = await _chunks(ctx, server)
        mine = await _collect(ctx, server, "a", chunks, "prompt logprobs")
        if is_ref:
            if not s["floor"]:
                return
            again = await _collect(ctx, server, "b", chunks, "noise floor (second run)")
            pairs = (("floor", mine, again),)
        else:
            ref_path = ctx.result.path / "logprobs" / f"{_safe(reference)}-a.jsonl"
            ref = load_run(ref_path)
            if not ref:
                raise UserError(
                    f"the reference's log-probs ({ref_path}) are missing: KLD "
                    "needs the reference target run first"
                )
            pairs = (("cmp", ref, mine),)
    for prefix, left, right in pairs:
        for key in chunks:
            unit_key = f"{prefix}:{key}"
            if ctx.result.done(ctx.label, unit_key) or key not in left or key not in right:
                continue
            k = min(
                len(left[key][0][1]) if left[key] else 0, len(right[key][0][1]) if right[key] else 0
            )
            a = [(x[0], x[1][:k], x[2][:k]) for x in left[key]]
            b = [(x[0], x[1][:k], x[2][:k]) for x in right[key]]
            ctx.result.put(ctx.label, unit_key, {**compare(a, b), "top_k": k})


def summarize_pairs(units: dict[str, Any], prefix: str) -> dict[str, Any] | None:
    rows = [v for key, v in units.items() if key.startswith(prefix + ":")]
    if not rows:
        return None
    n = sum(r["n"] for r in rows)
    ci = bootstrap_ratio([r["kl_sum"] for r in rows], [r["n"] for r in rows])
    return {
        "positions": n,
        "chunks": len(rows),
        "kld_mean": sum(r["kl_sum"] for r in rows) / n,
        "kld_ci95": list(ci) if ci else None,
        "kld_max": max(r["kl_max"] for r in rows),
        "top1_agreement": sum(r["top1_agree"] for r in rows) / n,
        "top_k": min(r["top_k"] for r in rows),
    }
