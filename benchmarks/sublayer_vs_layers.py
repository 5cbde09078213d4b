"""Attention-only drop against whole-layer cuts of about the same parameter count, on the default model.

    .venv/bin/python -m benchmarks.sublayer_vs_layers [--drop 10] [--limit 200] [--data_dir DIR]

Scores the attention and MLP blocks with the sub-layer method (He et al. 2024) on the default
calibration, drops the ``--drop`` lowest-scored attention blocks (a third of the layers by
default), and compares it, through the evaluation backend in one run, with the two whole-layer
cuts that bracket its parameter count (the best contiguous blocks of angular distance):
hellaswag acc_norm, decode throughput at batch 1 (measured side by side; ratios to the
original) beside the FLOPs ideal, and the KV cache measured after generating. Writes
``benchmarks/results/sublayer_vs_layers.json``.
"""

from __future__ import annotations

from benchmarks import harness
from benchmarks.record import write_result


def main() -> None:
    parser = harness.parser(__doc__, "data_dir")
    parser.add_argument("--drop", type=int, default=10, help="attention blocks to drop")
    parser.add_argument("--limit", type=int, default=200, help="hellaswag questions")
    args = parser.parse_args()

    from evaluation.quality import lm_eval_adapter
    from prune.core.recipe import Recipe

    backend, spec, info = harness.default_model(args.data_dir)
    drop = backend.analysis.score(spec, "sublayer")
    angular = backend.analysis.score(spec, "angular")
    attention = drop.best_sublayers("attention", args.drop)
    variants = {"attention": Recipe.drop(info.num_layers, attention=attention, origin="sublayer")}
    removed = info.removed_params(variants["attention"])
    per_layer = removed / max(1, args.drop)
    for_layers = sorted({int(removed // info.layer_params[0]), int(-(-removed // info.layer_params[0]))})
    for n in for_layers:
        start, end = angular.best_block(n)
        variants[f"cut{n}"] = Recipe.block(info.num_layers, start, end, origin="angular")
    print(f"attention drop of {args.drop}: layers {attention}; {removed / 1e6:.2f} M parameters "
          f"({per_layer / 1e6:.3f} M per block)")
    for label, recipe in variants.items():
        print(f"  {label:<10} {recipe.describe():<55} removes {info.removed_params(recipe) / 1e6:6.2f} M")

    request = lm_eval_adapter.check_request(["hellaswag"], limit=args.limit, data_dir=backend.models.data_dir)

    def value(found, model, word):
        hits = [m for m in found if m.model == model and word in m.name]
        return hits[0] if hits else None

    print(f"\n{'model':<11} {'hellaswag acc_norm':>19} {'decode ms/token':>16} {'speedup':>8} {'ideal':>6} "
          f"{'KV cache':>12}")
    labels = list(variants)
    found = {}
    for group in (labels[:2], labels[2:]):  # the backend compares at most two with the original at once
        if not group:
            continue
        compared = {label: variants[label] for label in group}
        scores = backend.measure.benchmarks(spec, compared, request)
        speed = backend.measure.speed(spec, compared, batch_sizes=(1,), prompt_len=128, new_tokens=(64,), repeats=5)
        memory = backend.measure.memory(spec, compared)
        base = value(speed, "original", "decode latency")
        for label in ("original", *group):
            acc, dec, kv = value(scores, label, "acc_norm"), value(speed, label, "decode latency"), value(memory, label,
                                                                                                          "KV")
            ideal = dec.details.get("ideal_speedup", 1.0) if dec else float("nan")
            print(f"{label:<11} {acc.value:>19.1f} {dec.value:>16.1f} {base.value / dec.value:>7.2f}× {ideal:>5.2f}× "
                  f"{(f'{kv.value:.2f} {kv.unit}') if kv else '—':>12}")
            found[label] = {"hellaswag_acc_norm": [acc.value, acc.spread], "decode_ms_per_token": dec.value,
                            "speedup": base.value / dec.value, "ideal_speedup": ideal,
                            "kv_cache": [kv.value, kv.unit] if kv else None,
                            "removed_params": info.removed_params(variants[label]) if label in variants else 0,
                            "recipe": variants[label].describe() if label in variants else None}
    write_result("sublayer_vs_layers", {"attention_dropped": attention, "columns": found},
                 model=f"{info.name}, {info.num_layers} layers",
                 how=f"hellaswag acc_norm on the first {args.limit}; decode at batch 1 after a 128-token prompt, 64 "
                     "new tokens, median of 5, measured beside the original; the KV cache after generating")


if __name__ == "__main__":
    main()
