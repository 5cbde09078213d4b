"""Recovering a cut of the default model: the linear patch (no training) against healing on the text and by
distillation from the original, at the same number of steps.

    .venv/bin/python -m benchmarks.recovery [--start 15 --end 21] [--steps 30] [--ppl_windows 64] [--hellaswag 200]

The cut removes layers ``[start, end)`` (end exclusive). Each column repairs that same cut:

* ``patch``: ReplaceMe's least-squares map (``prune.patch``), fitted on 64 × 256 tokens of WikiText-2 validation;
* ``patch-cos``: its cosine variant (Adam on the map only);
* ``lora``, ``lora+kd``, ``lora+kd0.5``, ``last-3+kd``: ``prune.healing`` with ``--steps`` optimizer steps each (the
  LoRA default) of 4 × 256 tokens of WikiText-2 validation, on the next-token loss, on the forward KL to the original
  (KD), half each, and the last three layers with the head by KD.

Perplexity is on WikiText-2 *test* (never trained or fitted on), the first windows of 128 tokens; "gap won" is the
share of the perplexity lost to the cut that the repair won back. hellaswag acc_norm on the first N questions.
Everything goes through the Backend the app uses; results go to a fresh cache. The held-out next-token loss of each
trained column is printed every 10 steps (the curves). Writes ``benchmarks/results/recovery.json``.
"""

from __future__ import annotations

from benchmarks import harness
from benchmarks.record import write_result
from benchmarks.repair_rows import print_table, quality_rows


def main() -> None:
    parser = harness.parser(__doc__, "ppl_windows", "hellaswag", "data_dir")
    parser.add_argument("--start", type=int, default=15, help="first layer cut (0-based)")
    parser.add_argument("--end", type=int, default=21, help="end of the cut, exclusive")
    parser.add_argument("--steps", type=int, default=30, help="optimizer steps of every trained column")
    parser.add_argument("--columns", default="patch,patch-cos,lora,lora+kd,lora+kd0.5,last-3+kd",
                        help="comma list of the repairs to run")
    args = parser.parse_args()
    harness.in_fresh_cache(lambda: run(args))


LABELS = {"patch": "patch (least squares)", "patch-cos": "patch (cosine)", "lora": "LoRA, next-token loss",
          "lora+kd": "LoRA + KD", "lora+kd0.5": "LoRA + KD, half next-token", "last-3+kd": "last layers + KD"}


def repairs(steps: int, text, calibration) -> dict:
    from prune.healing.step import Heal
    from prune.patch.step import Patch

    return {"patch": Patch.of("lstsq", calibration), "patch-cos": Patch.of("cosine", calibration),
            "lora": Heal.of("lora", steps, text=text),
            "lora+kd": Heal.of("lora", steps, text=text, teacher="forward_kl"),
            "lora+kd0.5": Heal.of("lora", steps, text=text, teacher="forward_kl", kd_ratio=0.5),
            "last-3+kd": Heal.of("last_layers", steps, text=text, teacher="forward_kl")}


def run(args) -> None:
    import torch

    from evaluation.measure.measurement import ORIGINAL
    from prune.core.recipe import Recipe
    from prune.patch.step import CALIBRATION

    backend, spec, info = harness.default_model(args.data_dir)
    cut = Recipe.block(info.num_layers, args.start, args.end, origin="by hand")
    every = repairs(args.steps, harness.wikitext2(backend), harness.wikitext2(backend, **CALIBRATION))
    chosen = {k: v for k, v in every.items() if k in args.columns.split(",")}
    variants, timing, records = {"cut": cut}, {}, {}
    print(f"{info.name}: {info.num_layers} layers; cut {cut.describe()}; threads {torch.get_num_threads()}")
    for name, step in chosen.items():
        recipe = cut.then(step)
        with harness.Clock() as clock:
            model = backend.models.model(spec, recipe)
        timing[name] = clock.wall
        records[name] = getattr(model.config, "layercut_healed", None) or getattr(model.config, "layercut_patched")
        variants[name] = recipe
        print(f"{name} ({timing[name]:.1f} s): {step.describe()}", flush=True)
        if "heldout_loss" in records[name]:
            print(f"  held-out next-token loss: {' → '.join(f'{v:.3f}' for v in records[name]['heldout_loss'])}; "
                  f"training loss {' → '.join(f'{v:.3f}' for v in records[name]['train_loss'])}", flush=True)

    rows = quality_rows(backend, spec, variants, timing, args.ppl_windows, args.hellaswag)
    rows["wall time to build (s)"] = {k: f"{s:.1f}" for k, s in timing.items()}
    rows["gradient steps"] = {k: str(r.get("steps_done", 0)) for k, r in records.items()}
    rows["held-out next-token loss (before → after)"] = {
        k: f"{r['heldout_loss'][0]:.3f} → {r['heldout_loss'][-1]:.3f}"
        for k, r in records.items() if "heldout_loss" in r}
    rows["training loss, first → last batch (KD columns: the divergence)"] = {
        k: f"{r['train_loss'][0]:.3f} → {r['train_loss'][-1]:.3f}" for k, r in records.items() if "train_loss" in r}
    rows["patch fit error ‖XT − Y‖/‖Y‖ (plain cut)"] = {
        k: " ".join(f"{b['error']:.3f} ({b['unpatched_error']:.3f})" for b in r["blocks"])
        for k, r in records.items() if "blocks" in r}

    print_table(rows, [ORIGINAL, "cut", *timing])
    write_result("recovery", {"cut": [args.start, args.end], "steps": args.steps,
                              "columns": {ORIGINAL: "original", "cut": f"cut [{args.start}, {args.end})",
                                          **{k: LABELS.get(k, k) for k in timing}}, "rows": rows,
                              "repairs": {k: {"wall_s": round(s, 1), **records[k]} for k, s in timing.items()},
                              "threads": torch.get_num_threads()},
                 model=f"{info.name}, {info.num_layers} layers",
                 how=f"WikiText-2 test perplexity, first {args.ppl_windows} windows of 128 tokens; hellaswag acc_norm "
                     f"± stderr on the first {args.hellaswag}; trained columns: {args.steps} steps of 4 × 256 tokens "
                     "of WikiText-2 validation")


if __name__ == "__main__":
    main()
