"""Healing a cut of the default model: WikiText-2 test perplexity and hellaswag before and after, time per method.

    .venv/bin/python -m benchmarks.heal [--start 15 --end 21] [--ppl_windows 64] [--hellaswag 200]

The cut removes layers ``[start, end)`` (end exclusive); each method of :mod:`prune.healing.train` then
heals it with its default steps on WikiText-2 *validation* (its last windows held out for the
held-out loss). Perplexity is on WikiText-2 *test* (never trained on), the first windows of 128
tokens; "gap won" is the share of the perplexity lost to the cut that healing won back. hellaswag
acc_norm on the first N questions is a zero-shot task healing on WikiText does not target. Each
heal's wall time includes its held-out evaluations; steps/s is given on it and on the training steps alone.
Everything goes through the Backend the app uses; results go to a fresh cache. Writes
``benchmarks/results/heal.json``.
"""

from __future__ import annotations

from benchmarks import harness
from benchmarks.record import write_result
from benchmarks.repair_rows import print_table, quality_rows


def main() -> None:
    parser = harness.parser(__doc__, "ppl_windows", "hellaswag", "data_dir")
    parser.add_argument("--start", type=int, default=15, help="first layer cut (0-based)")
    parser.add_argument("--end", type=int, default=21, help="end of the cut, exclusive")
    parser.add_argument("--methods", default="lora,last_layers", help="comma list of healing methods")
    parser.add_argument("--steps", type=int, default=None, help="healing steps (default: each method's default)")
    args = parser.parse_args()
    harness.in_fresh_cache(lambda: run(args))


def run(args) -> None:
    import torch

    from evaluation.measure.measurement import ORIGINAL
    from prune.core.recipe import Recipe
    from prune.healing.step import Heal

    backend, spec, info = harness.default_model(args.data_dir)
    text = harness.wikitext2(backend)
    cut = Recipe.block(info.num_layers, args.start, args.end, origin="by hand")
    variants = {"cut": cut}
    timing = {}
    print(f"{info.name}: {info.num_layers} layers; cut {cut.describe()}; threads {torch.get_num_threads()}")
    for method in args.methods.split(","):
        recipe = cut.then(Heal.of(method, args.steps, text=text))
        with harness.Clock() as clock:
            healed = backend.models.model(spec, recipe)
        timing[method] = (clock.wall, healed.config.layercut_healed)
        variants[method] = recipe
        print(f"{method}: {recipe.steps[-1].describe()}", flush=True)

    rows = quality_rows(backend, spec, variants, timing, args.ppl_windows, args.hellaswag)
    rows["healing wall time (s)"] = {k: f"{s:.0f}" for k, (s, _) in timing.items()}
    rows["steps done (steps/s: wall; training steps only)"] = {
        k: f"{r['steps_done']} ({r['steps_done'] / s:.3f}; {r['steps_done'] / r['train_seconds']:.3f})"
        for k, (s, r) in timing.items()}
    rows["held-out loss (validation tail)"] = {
        k: " → ".join(f"{v:.3f}" for v in r["heldout_loss"]) for k, (_, r) in timing.items()}
    rows["training loss (first → last batch)"] = {
        k: " → ".join(f"{v:.3f}" for v in r["train_loss"]) for k, (_, r) in timing.items()}

    print_table(rows, [ORIGINAL, "cut", *timing])
    labels = {"lora": "healed by LoRA", "last_layers": "healed, last layers"}
    columns = {ORIGINAL: "original", "cut": f"cut [{args.start}, {args.end})", **{k: labels.get(k, k) for k in timing}}
    write_result("heal", {"cut": [args.start, args.end], "columns": columns, "rows": rows,
                          "healing": {k: {"wall_s": round(s, 1), **r} for k, (s, r) in timing.items()},
                          "threads": torch.get_num_threads()},
                 model=f"{info.name}, {info.num_layers} layers",
                 how=f"WikiText-2 test perplexity, first {args.ppl_windows} windows of 128 tokens; hellaswag acc_norm "
                     f"± stderr on the first {args.hellaswag}; each method's default steps on WikiText-2 validation")


if __name__ == "__main__":
    main()
