"""P12-packed layers under tensor parallelism: each rank packs its own part (``p12_packed``).

Two gloo processes build real vLLM layers at TP=2 (a QKV layer whose 2 KV heads split one
per rank, a row-parallel linear, a vocab-parallel embedding with a padded shard) served by
the P12 methods, load whole checkpoint tensors as vLLM's model loader hands them over
(decoded, the packed form of the whole tensor attached), and compare what each rank
computes with the same slice of the dense BF16 weights: exactly for the embedding, to BF16
rounding for the linears.
"""

from __future__ import annotations

import multiprocessing
import os
import queue as queue_module
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

HIDDEN, HEAD, HEADS, KV_HEADS, VOCAB = 64, 16, 4, 2, 100


def _dense(rows: int, cols: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    w = (torch.randn(rows, cols, generator=g) * 0.05).to(torch.bfloat16)
    w[1, :3] = torch.tensor([1e30, -1e-30, 3e-38])  # escapes in P12
    return w


def _streamed(name: str, w: torch.Tensor) -> torch.Tensor:
    from engine.codecs import p12
    from engine.codecs.p12_stream import decode_stream

    ((_, tensor),) = list(decode_stream(p12.pack(w).to_state_dict(name).items()))
    return tensor


def _rank(rank: int, init: str, ident: str, out: Any) -> None:
    os.environ["VLLM_DIST_IDENT"] = ident  # names the ranks' shared memory (vLLM's CPU worker)
    os.environ["SPARKCODE_PLUGIN_FEATURES"] = "p12_packed"
    os.environ["SPARKCODE_P12_MIN_VALUES"] = "1"
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.distributed import init_distributed_environment, initialize_model_parallel
    from vllm.model_executor.layers.linear import QKVParallelLinear, RowParallelLinear
    from vllm.model_executor.layers.vocab_parallel_embedding import VocabParallelEmbedding

    torch.set_default_dtype(torch.bfloat16)
    with set_current_vllm_config(VllmConfig()):
        init_distributed_environment(
            world_size=2, rank=rank, distributed_init_method=init, local_rank=rank, backend="gloo"
        )
        initialize_model_parallel(tensor_model_parallel_size=2)
        from engine.codecs.format import FORMAT_VERSION
        from engine.plugin._w2_moe import SparkcodeW2Config

        cfg = SparkcodeW2Config.from_config(
            {  # what a sparkcode checkpoint's config builds
                "format_version": FORMAT_VERSION,
                "routed_experts": {"bits": 2, "group_size": 32},
            }
        )
        qkv: Any = QKVParallelLinear(
            HIDDEN, HEAD, HEADS, KV_HEADS, bias=False, quant_config=cfg, prefix="qkv"
        )
        row: Any = RowParallelLinear(
            HIDDEN, HIDDEN, bias=False, reduce_results=False, quant_config=cfg, prefix="o"
        )
        emb: Any = VocabParallelEmbedding(VOCAB, HIDDEN, quant_config=cfg, prefix="embed")
    q, k, v = (_dense(n * HEAD, HIDDEN, seed=i) for i, n in enumerate((HEADS, KV_HEADS, KV_HEADS)))
    o, table = _dense(HIDDEN, HIDDEN, seed=3), _dense(VOCAB, HIDDEN, seed=4)
    for sid, w in zip("qkv", (q, k, v), strict=True):
        qkv.weight.weight_loader(qkv.weight, _streamed("qkv.weight", w), sid)
    row.weight.weight_loader(row.weight, _streamed("o.weight", o))
    emb.weight.weight_loader(emb.weight, _streamed("embed.weight", table))
    for layer in (qkv, row, emb):
        layer.quant_method.process_weights_after_loading(layer)
    x = torch.randn(3, HIDDEN, generator=torch.Generator().manual_seed(5)).to(torch.bfloat16)
    half_q, half_kv = HEADS * HEAD // 2, KV_HEADS * HEAD // 2
    want_qkv = torch.cat(
        [
            q[rank * half_q : (rank + 1) * half_q],
            k[rank * half_kv : (rank + 1) * half_kv],
            v[rank * half_kv : (rank + 1) * half_kv],
        ]
    )
    cols = slice(rank * HIDDEN // 2, (rank + 1) * HIDDEN // 2)
    shard = emb.shard_indices
    ids = torch.arange(shard.org_vocab_end_index - shard.org_vocab_start_index)

    def off(got: torch.Tensor, want: torch.Tensor) -> str:
        """'' when ``got`` is ``want`` to BF16 rounding (per element: the escaped weights make
        some outputs huge), else what differs."""
        try:
            torch.testing.assert_close(got.float(), want, rtol=2e-2, atol=2e-2)
        except AssertionError as exc:
            return str(exc)
        return ""

    served = emb.quant_method.embedding(emb, ids)
    want_rows = table[shard.org_vocab_start_index : shard.org_vocab_end_index]
    # Plain values only: tensors would travel as file descriptors the exiting child closes.
    out.put(
        (
            rank,
            {
                "packed": [len(layer.p12_blocks[0]) for layer in (qkv, row, emb)],
                "qkv": off(qkv.quant_method.apply(qkv, x), F.linear(x.float(), want_qkv.float())),
                "row": off(
                    row.quant_method.apply(row, x[:, cols]),
                    F.linear(x[:, cols].float(), o[:, cols].float()),
                ),
                "embed_exact": bool(
                    torch.equal(served.view(torch.int16), want_rows.view(torch.int16))
                ),
                "embed_rows": int(emb.num_embeddings_per_partition),
            },
        )
    )


def test_each_rank_packs_and_serves_its_part(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    init = f"file://{tmp_path / 'rendezvous'}"
    ident = f"sparkcode-p12-tp-{os.getpid()}"
    procs = [ctx.Process(target=_rank, args=(r, init, ident, queue)) for r in (0, 1)]
    for p in procs:
        p.start()
    results: dict[int, Any] = {}
    deadline = time.monotonic() + 600
    while len(results) < 2 and time.monotonic() < deadline:
        try:  # read before joining: a child exits only once its queue is drained
            rank, got = queue.get(timeout=2)
            results[rank] = got
        except queue_module.Empty:
            if any(p.exitcode not in (None, 0) for p in procs):
                break
    for p in procs:
        p.join(timeout=60)
    assert [p.exitcode for p in procs] == [0, 0] and len(results) == 2
    for rank in (0, 1):
        got = results[rank]
        assert got["packed"] == [1, 1, 1]  # every layer held as P12 blocks
        assert got["qkv"] == "" and got["row"] == "", got
        assert got["embed_exact"]  # the rank's vocab rows, bit for bit
        assert got["embed_rows"] >= VOCAB // 2
