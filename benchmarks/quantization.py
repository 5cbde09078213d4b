"""Prune, then quantize: the default model dense, 50 % Wanda and cut [15, 21), each without, with int8 and with int4
weights (torchao, weight-only), side by side.

    .venv/bin/python -m benchmarks.quantization [--ppl_windows 64] [--hellaswag 200] [--repeats 5]

Rows: WikiText-2 test perplexity (the first windows of 128 tokens), hellaswag acc_norm on the first N questions,
the weights' real bytes (a quantized weight's int8 values and scales; the embeddings and head are not quantized),
the bytes a variant owns beside the original, and decode latency per token at batch 1 (32 new tokens after a
128-token prompt; the nine models take turns run by run, so the machine's load falls on all alike; the median of
``--repeats`` runs). Everything goes through the Backend the app uses, in a fresh cache. Writes
``benchmarks/results/quantization.json``.
"""

from __future__ import annotations

from benchmarks import harness
from benchmarks.record import write_result
from benchmarks.repair_rows import print_table


def main() -> None:
    parser = harness.parser(__doc__, "ppl_windows", "hellaswag", "data_dir")
    parser.add_argument("--repeats", type=int, default=5, help="timed decode runs per model")
    args = parser.parse_args()
    harness.in_fresh_cache(lambda: run(args))


def variants(num_layers: int, calibration) -> dict:
    from prune.core.recipe import Recipe
    from prune.quantize.step import Quantize
    from prune.sparsity.step import Sparsify

    bases = {"dense": Recipe(), "wanda50": Recipe((Sparsify.of("wanda", 0.5, calibration=calibration),)),
             "cut": Recipe.block(num_layers, 15, 21)}
    found = {}
    for name, recipe in bases.items():
        found[name] = recipe
        for bits in (8, 4):
            found[f"{name}+int{bits}"] = recipe.then(Quantize.of(bits)) if recipe.steps else \
                Recipe((Quantize.of(bits),))
    return found


def run(args) -> None:
    import torch

    from prune.core.storage import weight_bytes
    from evaluation.measure.speed import measure_speed
    from evaluation.serving.variants import own_bytes

    backend, spec, info = harness.default_model(args.data_dir)
    chosen = variants(info.num_layers, harness.wikitext2(backend))
    print(f"{info.name}: {info.num_layers} layers; threads {torch.get_num_threads()}", flush=True)
    models, built = {}, {}
    for name, recipe in chosen.items():
        with harness.Clock() as clock:
            models[name] = backend.models.model(spec, recipe)
        built[name] = clock.wall
        print(f"{name} ({built[name]:.1f} s): {recipe.describe()}", flush=True)
    base = models["dense"]
    rows = {"weight MiB (real bytes)": {k: f"{weight_bytes(m) / 2**20:.1f}" for k, m in models.items()},
            "owned beside the original, MiB": {k: f"{own_bytes(m, base) / 2**20:.1f}" for k, m in models.items()}}

    compared = {k: v for k, v in chosen.items() if k != "dense"}
    ppl, acc = harness.perplexity_and_hellaswag(backend, spec, compared, "dense", args.ppl_windows, args.hellaswag)
    rows[f"WikiText-2 test ppl ({args.ppl_windows} × 128)"] = {k: f"{v:.2f}" for k, v in ppl.items()}
    if args.hellaswag:
        rows[f"hellaswag acc_norm ({args.hellaswag})"] = {k: f"{m.value:.1f} ± {m.spread:.1f}" for k, m in acc.items()}

    speed = measure_speed(models, batch_sizes=(1,), prompt_len=128, new_tokens=(32,), repeats=args.repeats)
    decode = {m.model: m for m in speed if m.name.startswith("decode latency")}
    rows["decode ms/token (batch 1, median)"] = {k: f"{m.value:.1f}" for k, m in decode.items()}
    rows["decode speed against dense"] = {k: f"{decode['dense'].value / m.value:.2f}×" for k, m in decode.items()}
    rows["build time (s)"] = {k: f"{s:.1f}" for k, s in built.items()}
    print_table(rows, list(chosen))
    columns = {k: {"weight_MiB": round(weight_bytes(m) / 2**20, 1), "owned_MiB": round(own_bytes(m, base) / 2**20, 1),
                   "wikitext2_ppl": ppl.get(k), "decode_ms_per_token": decode[k].value,
                   "decode_iqr_ms": decode[k].spread, "speed_vs_dense": decode["dense"].value / decode[k].value,
                   "build_s": round(built[k], 1),
                   **({"hellaswag_acc_norm": [acc[k].value, acc[k].spread]} if args.hellaswag else {})}
               for k, m in models.items()}
    write_result("quantization", {"columns": columns, "recipes": {k: r.describe() for k, r in chosen.items()},
                                  "threads": torch.get_num_threads()},
                 model=f"{info.name}, {info.num_layers} layers",
                 how=f"WikiText-2 test perplexity, first {args.ppl_windows} windows of 128 tokens; hellaswag acc_norm "
                     f"± stderr on the first {args.hellaswag}; decode at batch 1, 128-token prompt, 32 new tokens, "
                     f"models taking turns, median of {args.repeats}")


if __name__ == "__main__":
    main()
