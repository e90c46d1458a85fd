"""Fidelity of the W2 codec on a real model: RTN vs GPTQ on SmolLM2-135M-Instruct.

Quantizes every MLP projection (gate/up/down of all 30 layers) to W2 (2-bit
codes {-4,-1,1,4}, ue5m3 scale per 32 inputs), leaves everything else as is,
and compares each variant with the original model on held-out Python source:
mean KL divergence KL(P_orig || P_quant) per token and top-1 agreement.

GPTQ is calibrated on other Python stdlib files: the inputs of every MLP are
captured with forward pre-hooks in one pass of the original model; gate/up
share the layer's Hessian, down gets its own.

    .venv/bin/python bench/quant_fidelity_smollm2.py [--model DIR] [--calib-tokens 4096]

Target: GPTQ KLD <= 0.7x RTN KLD. Sized for a couple of minutes on 2 CPU cores.
"""

from __future__ import annotations

import argparse
import sysconfig
import time
from pathlib import Path

import torch

from engine.codecs import w2
from engine.quant.gptq import HessianAccumulator, gptq_quantize

PROJ = ("gate_proj", "up_proj", "down_proj")


def model_dir(arg: str | None) -> Path:
    if arg:
        return Path(arg)
    from engine.models import convert_gguf, smollm2_gguf_path
    from engine.paths import Paths

    target = Paths.from_env().models_dir / "smollm2-135m-instruct"
    if not (target / "config.json").is_file():
        convert_gguf(smollm2_gguf_path(), target, progress=print)
    return target


def stdlib_text(names: list[str]) -> str:
    root = Path(sysconfig.get_paths()["stdlib"])
    return "\n\n".join((root / n).read_text(encoding="utf-8") for n in names)


# Disjoint code for calibration and evaluation.
CALIB_FILES = ["argparse.py", "subprocess.py", "typing.py", "dataclasses.py", "pathlib.py",
               "functools.py"]
EVAL_FILES = ["json/decoder.py", "shutil.py", "tempfile.py", "heapq.py"]


def chunks(tokenizer: object, text: str, seq: int, tokens: int) -> list[torch.Tensor]:
    ids = tokenizer(text, return_tensors="pt").input_ids[0]  # type: ignore[operator]
    n = min(tokens // seq, len(ids) // seq)
    return [ids[i * seq:(i + 1) * seq].unsqueeze(0) for i in range(n)]


def capture_hessians(model: torch.nn.Module, batches: list[torch.Tensor]
                     ) -> dict[str, HessianAccumulator]:
    """Hessians of every MLP's input (shared by gate/up) and of every down_proj input."""
    accs: dict[str, HessianAccumulator] = {}
    handles = []
    for i, layer in enumerate(model.model.layers):  # type: ignore[union-attr, arg-type]
        for key, module in ((f"{i}.mlp", layer.mlp), (f"{i}.down", layer.mlp.down_proj)):
            acc = accs[key] = HessianAccumulator(module.in_features if key.endswith("down")
                                                 else layer.mlp.gate_proj.in_features)
            handles.append(module.register_forward_pre_hook(
                lambda _m, args, acc=acc: acc.add(args[0].detach())))
    with torch.no_grad():
        for ids in batches:
            model(ids)
    for h in handles:
        h.remove()
    return accs


def quantize_mlps(model: torch.nn.Module, original: dict[str, torch.Tensor],
                  hessians: dict[str, HessianAccumulator] | None, act_order: bool,
                  damp: float) -> dict[str, torch.Tensor]:
    out = {}
    for i, _layer in enumerate(model.model.layers):  # type: ignore[union-attr, arg-type]
        for proj in PROJ:
            name = f"{i}.{proj}"
            w = original[name]
            if hessians is None:
                out[name] = w2.quantize_rtn(w).dequantize(torch.float32)
            else:
                h = hessians[f"{i}.down" if proj == "down_proj" else f"{i}.mlp"].hessian
                out[name] = gptq_quantize(w, h, damp=damp, act_order=act_order).dequantize()
    return out


def load_weights(model: torch.nn.Module, weights: dict[str, torch.Tensor]) -> None:
    with torch.no_grad():
        for i, layer in enumerate(model.model.layers):  # type: ignore[union-attr, arg-type]
            for proj in PROJ:
                getattr(layer.mlp, proj).weight.copy_(weights[f"{i}.{proj}"])


def evaluate(model: torch.nn.Module, batches: list[torch.Tensor],
             reference: list[torch.Tensor] | None) -> tuple[list[torch.Tensor], float, float]:
    """Log-probs per batch; with a reference, mean KLD(ref || model) and top-1 agreement."""
    logps, kl_sum, agree, count = [], 0.0, 0, 0
    with torch.no_grad():
        for b, ids in enumerate(batches):
            lp = torch.log_softmax(model(ids).logits[0].float(), dim=-1)
            logps.append(lp)
            if reference is not None:
                ref = reference[b]
                kl_sum += float((ref.exp() * (ref - lp)).sum())
                agree += int((ref.argmax(-1) == lp.argmax(-1)).sum())
                count += int(lp.shape[0])
    if reference is None:
        return logps, 0.0, 1.0
    return logps, kl_sum / count, agree / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", help="SmolLM2 safetensors dir (default: the cpu-demo model)")
    parser.add_argument("--calib-tokens", type=int, default=2048)
    parser.add_argument("--eval-tokens", type=int, default=1024)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--damp", type=float, default=0.01)
    parser.add_argument("--no-act-order", action="store_true",
                        help="GPTQ in natural column order (default: act-order, static groups)")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = model_dir(args.model)
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    calib = chunks(tok, stdlib_text(CALIB_FILES), args.seq, args.calib_tokens)
    held_out = chunks(tok, stdlib_text(EVAL_FILES), args.seq, args.eval_tokens)
    original = {f"{i}.{p}": getattr(layer.mlp, p).weight.detach().clone()
                for i, layer in enumerate(model.model.layers) for p in PROJ}
    n_params = sum(w.numel() for w in original.values())
    print(f"model {path.name}: {len(original)} MLP matrices, {n_params / 1e6:.1f}M weights -> W2; "
          f"calibration {len(calib) * args.seq} tokens, held-out {len(held_out) * args.seq} tokens "
          f"(Python stdlib)")

    t0 = time.perf_counter()
    ref_logps, _, _ = evaluate(model, held_out, None)
    hessians = capture_hessians(model, calib)
    t_capture = time.perf_counter() - t0

    t0 = time.perf_counter()
    rtn = quantize_mlps(model, original, None, False, args.damp)
    t_rtn = time.perf_counter() - t0
    t0 = time.perf_counter()
    gptq = quantize_mlps(model, original, hessians, not args.no_act_order, args.damp)
    t_gptq = time.perf_counter() - t0

    load_weights(model, rtn)
    _, kld_rtn, top1_rtn = evaluate(model, held_out, ref_logps)
    load_weights(model, gptq)
    _, kld_gptq, top1_gptq = evaluate(model, held_out, ref_logps)

    order = "act-order" if not args.no_act_order else "natural order"
    print(f"\n{'variant':<22} {'KLD':>8} {'top-1':>8} {'quantize s':>11}")
    print(f"{'W2 RTN':<22} {kld_rtn:>8.4f} {100 * top1_rtn:>7.2f}% {t_rtn:>11.1f}")
    print(f"{'W2 GPTQ (' + order + ')':<22} {kld_gptq:>8.4f} {100 * top1_gptq:>7.2f}% "
          f"{t_gptq:>11.1f}")
    ratio = kld_gptq / kld_rtn if kld_rtn > 0 else float("nan")
    verdict = "PASS" if ratio <= 0.7 else "FAIL"
    print(f"\nGPTQ/RTN KLD ratio: {ratio:.3f} (target <= 0.70: {verdict}); "
          f"capture + reference pass {t_capture:.1f}s")


if __name__ == "__main__":
    main()
