"""Peak memory of Taylor+ over the weight memory, on a 1B-class random Llama and on the default model.

    .venv/bin/python -m benchmarks.taylor_memory [--only 1b|default] [--reference] [--folder DIR]

Peak is measured the way evaluation/memory.py measures it on a CPU: the kernel's high-water
mark of the resident set (VmHWM) after resetting it with /proc/self/clear_refs, taken over
the scoring alone; the figure is weights + that growth, over the weights. The 1B-class model
has Llama-3.2-1B's shape with the default model's tokenizer (vocabulary 49,152, tied
embeddings), random weights, float32; the calibration is the default one. ``--reference``
also runs the textbook computation (one backward keeping every gradient and activation) and
checks that the scores agree. Each model is also scored with the loss from whole-sequence logits (the
computation before ``prune.core.chunked_loss``), side by side; ``--folder`` measures one model folder
(Gemma 3 270M's 262k-token vocabulary is where the chunks matter most). Writes
``benchmarks/results/taylor_memory.json`` (``--only``: ``taylor_memory_<only>.json``; ``--folder``:
``taylor_memory_folder.json``).
"""

from __future__ import annotations

import gc
from pathlib import Path

import numpy as np
import torch

from benchmarks import harness
from benchmarks.record import write_result


def main() -> None:
    parser = harness.parser(__doc__)
    parser.add_argument("--only", choices=["1b", "default"], help="measure one model only")
    parser.add_argument("--reference", action="store_true", help="also measure the plain full backward pass")
    parser.add_argument("--folder", help="measure this model folder only (e.g. Gemma 3 270M: a 262k vocabulary)")
    args = parser.parse_args()
    from transformers import AutoTokenizer

    import prune
    from prune.core.loading import default_checkpoint

    print(f"torch threads: {torch.get_num_threads()}")
    found = {}
    chosen = () if args.folder else (args.only,) if args.only else ("1b", "default")
    if args.folder:
        model, tokenizer = prune.load_model(args.folder, device="cpu", dtype="float32")
        name = Path(args.folder).name  # the model's name, not where this machine keeps it
        found[name] = report(name, model, tokenizer, args.reference)
    if "1b" in chosen:
        tokenizer = AutoTokenizer.from_pretrained(default_checkpoint())
        model = one_billion_llama(len(tokenizer))
        found["1B-class random Llama"] = report("1B-class random Llama", model, tokenizer, args.reference)
        del model
        gc.collect()
    if "default" in chosen:
        model, tokenizer = prune.load_model()
        found["default model (SmolLM2-135M)"] = report("default model (SmolLM2-135M)", model, tokenizer,
                                                       args.reference)
    write_result("taylor_memory_folder" if args.folder else f"taylor_memory{'_' + args.only if args.only else ''}",
                 {"models": found, "threads": torch.get_num_threads()},
                 how="peak: VmHWM after /proc/self/clear_refs, over the scoring alone; weights + that growth, over the "
                     "weights; the default calibration")


def one_billion_llama(vocab_size: int):
    """Llama-3.2-1B's shape (16 layers, hidden 2048, MLP 8192, GQA 32/8), tied embeddings, random float32 weights."""
    from transformers import AutoModelForCausalLM, LlamaConfig

    config = LlamaConfig(vocab_size=vocab_size, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                         num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=2048,
                         tie_word_embeddings=True)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    model.layercut_name = "random-llama-1b"
    return model


def report(label: str, model, tokenizer, reference: bool) -> dict:
    import prune
    from prune.core.storage import weight_bytes

    weights = weight_bytes(model)
    print(f"\n{label}: {sum(p.numel() for p in model.parameters()) / 1e9:.3f} B parameters, "
          f"weights {weights / 2**20:,.0f} MiB")
    whole, extra, seconds = peak_while(lambda: whole_sequence_taylor(model, tokenizer))
    found = {"parameters": sum(p.numel() for p in model.parameters()), "weights_MiB": round(weights / 2**20, 1),
             "whole_sequence_logits": {"peak_MiB": round((weights + extra) / 2**20), "seconds": round(seconds, 1),
                                       "peak_over_weights": round((weights + extra) / weights, 3)}}
    print(f"  whole-seq. logits  peak {(weights + extra) / 2**20:8,.0f} MiB = "
          f"{(weights + extra) / weights:.2f}x weights"
          f"  ({seconds:.0f} s)  (measured first: a process's first peak runs higher)")
    result, extra, seconds = peak_while(lambda: prune.score(model, tokenizer, "taylor", use_cache=False))
    found["taylor"] = {"peak_MiB": round((weights + extra) / 2**20), "seconds": round(seconds, 1),
                       "peak_over_weights": round((weights + extra) / weights, 3),
                       "best_6_layer_block": list(result.best_block(6))}
    found["same_scores"] = bool(np.allclose(whole.layer_scores, result.layer_scores, rtol=1e-4))
    print(f"  Taylor+            peak {(weights + extra) / 2**20:8,.0f} MiB = "
          f"{(weights + extra) / weights:.2f}x weights"
          f"  ({seconds:.0f} s)  best 6-layer block {result.best_block(6)}")
    print(f"  the same scores both ways: {np.allclose(whole.layer_scores, result.layer_scores, rtol=1e-4)}")
    if reference:
        ids = prune.Context(model, tokenizer, prune.Calibration()).input_ids[:result.params["max_samples"]]
        plain, extra, seconds = peak_while(lambda: plain_saliency(model, ids))
        print(f"  plain full backward peak {(weights + extra) / 2**20:8,.0f} MiB = "
              f"{(weights + extra) / weights:.2f}x weights"
              f"  ({seconds:.0f} s)  max relative difference {np.max(np.abs(result.layer_scores / plain - 1)):.1e}")
        found["plain_backward"] = {"peak_MiB": round((weights + extra) / 2**20), "seconds": round(seconds, 1),
                                   "peak_over_weights": round((weights + extra) / weights, 3),
                                   "max_relative_difference": float(np.max(np.abs(result.layer_scores / plain - 1)))}
    return found


def whole_sequence_taylor(model, tokenizer):
    """Taylor+ with the loss from whole-sequence logits (``model(labels=…).loss``): the computation before
    ``prune.core.chunked_loss``, for the peak side by side."""
    from unittest import mock

    import prune

    whole = lambda m, ids: m(input_ids=ids, labels=ids, use_cache=False).loss  # noqa: E731
    with mock.patch("prune.core.gradients.mean_loss", whole):  # where Taylor+ (and LLM-Pruner) take the loss
        return prune.score(model, tokenizer, "taylor", use_cache=False)


def peak_while(run):
    """(result, growth of peak RSS over the RSS before, seconds) of ``run()``."""
    from evaluation.measure.memory import _proc_status, _reset_peak_rss

    gc.collect()
    if not _reset_peak_rss():
        raise SystemExit("This benchmark needs /proc/self/clear_refs (Linux).")
    base = _proc_status("VmRSS")
    with harness.Clock() as clock:
        result = run()
    return result, _proc_status("VmHWM") - base, clock.wall


def plain_saliency(model, ids) -> np.ndarray:
    """The textbook computation: one backward keeping every gradient, then Σ |W·g| per layer's weights."""
    from prune.core.architectures import decoder_layers

    with torch.enable_grad():
        model(input_ids=ids, labels=ids, use_cache=False).loss.backward()
    scores = np.array([
        sum(float((p.detach().float() * p.grad.float()).abs().sum()) for name, p in layer.named_parameters()
            if name.endswith("weight"))
        for layer in decoder_layers(model)
    ])
    model.zero_grad(set_to_none=True)
    return scores


if __name__ == "__main__":
    main()
