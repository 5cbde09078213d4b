"""Healing a cut of the default model: WikiText-2 test perplexity and hellaswag before and after, time per method.

    .venv/bin/python benchmarks/heal.py [--start 15 --end 21] [--ppl_windows 64] [--hellaswag 200]

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

import argparse
import time

from fresh_cache import in_fresh_cache  # benchmarks/fresh_cache.py, beside this script
from record import write_result
from repair_rows import print_table, quality_rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--start", type=int, default=15, help="first layer cut (0-based)")
    parser.add_argument("--end", type=int, default=21, help="end of the cut, exclusive")
    parser.add_argument("--methods", default="lora,last_layers", help="comma list of healing methods")
    parser.add_argument("--steps", type=int, default=None, help="healing steps (default: each method's default)")
    parser.add_argument("--ppl_windows", type=int, default=64, help="WikiText-2 test windows of 128 tokens")
    parser.add_argument("--hellaswag", type=int, default=200, help="hellaswag questions (0: skip)")
    parser.add_argument("--data_dir", default=None, help="benchmark data folder (default: as the app finds it)")
    args = parser.parse_args()
    in_fresh_cache(lambda: run(args))


def run(args) -> None:
    import torch

    from evaluation.serving.backend import Backend
    from evaluation.measure.measurement import ORIGINAL
    from evaluation.core.pool import ModelSpec
    from prune.core.calibration import Calibration
    from prune.healing.step import Heal
    from prune.core.recipe import Recipe

    backend = Backend(data_dir=args.data_dir)
    spec = ModelSpec()
    info = backend.models.load(spec)
    text = Calibration(source="wikitext2", path=str(backend.models.data_dir) if backend.models.data_dir else None)
    cut = Recipe.block(info.num_layers, args.start, args.end, origin="by hand")
    variants = {"cut": cut}
    timing = {}
    print(f"{info.name}: {info.num_layers} layers; cut {cut.describe()}; threads {torch.get_num_threads()}")
    for method in args.methods.split(","):
        recipe = cut.then(Heal.of(method, args.steps, text=text))
        started = time.perf_counter()
        healed = backend.models.model(spec, recipe)
        timing[method] = (time.perf_counter() - started, healed.config.layercut_healed)
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
