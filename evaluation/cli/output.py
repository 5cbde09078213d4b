"""What the command line reads from its arguments and writes for each mode: calibration and levels, results
JSON, the explain, sweep and healing reports."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import prune
from prune.core.calibration import BOS_CHOICES, Calibration
from prune.core.errors import InvalidInput
from prune.core.paths import write_atomic
from prune.core.recipe import Recipe
from prune.sparsity.masks import METHODS as SPARSITY_METHODS
from prune.drop.sublayers import ATTENTION, MLP

from evaluation.explain import cut as explain
from evaluation.serving.backend import Backend
from evaluation.measure.measurement import ORIGINAL, PRUNED, to_markdown
from evaluation.core.pool import ModelSpec
from evaluation.sweeps.sparsity import DEFAULT_LEVELS, format_table
from evaluation.frontier import plan as frontier_plan, result as frontier_text
from evaluation.frontier.result import format_table as frontier_table
from evaluation.core.jobs import final
from evaluation.core.settings import PERPLEXITY


def results_json(entries: dict[str, dict], config: dict) -> dict:
    """lm-eval's results layout: results (groups' subtasks flattened in), higher_is_better, n-samples, config."""
    results, better, sizes, shots, versions = {}, {}, {}, {}, {}
    for task, entry in entries.items():
        results[task] = entry["results"]
        results.update(entry.get("subtasks", {}))
        better[task] = entry.get("higher_is_better")
        sizes[task] = entry.get("n-samples")
        shots[task] = entry.get("n-shot")
        versions[task] = entry.get("version")
    return {"results": results, "higher_is_better": better, "n-samples": sizes, "n-shot": shots,
            "versions": versions, "config": config}


def print_healing(args, backend: Backend, spec: ModelSpec, cuts: dict[str, Recipe]) -> None:
    """WikiText-2 test perplexity (never trained on) of the original and of each compared model before and after
    healing, and what each heal did."""
    unhealed = {f"{mode} before healing": Recipe(recipe.steps[:-1], recipe.origin) for mode, recipe in cuts.items()}
    found = backend.measure.perplexity(spec, {**unhealed, **cuts}, seq_lens=(args.ppl_seq_len,), bos=(False,),
                                       max_windows=args.ppl_windows)
    ppl = {m.model: m.value for m in found}
    windows = found[0].details["windows"]
    print(f"\nHealing trained on WikiText-2 validation (its last windows held out); perplexity below is on "
          f"WikiText-2 test, never trained on ({windows} windows of {args.ppl_seq_len} tokens). Zero-shot tasks "
          f"above are not what healing on WikiText targets.")
    print(f"| model | WikiText-2 test perplexity |\n|---|---|\n| {ORIGINAL} | {ppl[ORIGINAL]:.2f} |")
    for mode, recipe in cuts.items():
        record = getattr(backend.models.model(spec, recipe).config, "layercut_healed", {})
        before, after = ppl[f"{mode} before healing"], ppl[mode]
        gap = before - ppl[ORIGINAL]
        won = f", {100 * (before - after) / gap:.0f} % of the gap to the original won back" if gap > 0 else ""
        print(f"| {mode} before healing | {before:.2f} |\n| {mode} healed | {after:.2f}{won} |")
        print(f"{mode}: {recipe.steps[-1].describe()}; {record.get('steps_done')} steps done, held-out loss "
              f"{pair(record.get('heldout_loss'))}, training loss {pair(record.get('train_loss'))}")


def pair(values) -> str:
    return " → ".join(f"{v:.3f}" for v in values) if values and None not in values else "?"


def explain_report(args, backend: Backend, spec: ModelSpec, info, cuts: dict[str, Recipe], out_dir: Path,
             progress) -> Path:
    """--explain: each compressed model beside the original on the feedback slice; no task runs."""
    calibration = calibration_of(args, backend)
    measurements, record = [], {}
    for mode, recipe in cuts.items():
        found = backend.explain.cut_feedback(spec, recipe, calibration=calibration, use_cache=not args.no_cache,
                                             progress=progress)
        how = f"resumed from layer {found.resumed_at}" if found.resumed else "run whole"
        print(f"{mode}: {recipe.describe()}: {found.summary()} ({found.tokens} tokens, {how})", flush=True)
        measurements += found.measurements(PRUNED if len(cuts) == 1 else mode)
        record[mode] = {"cut": recipe.describe(), "recipe": recipe.to_json(), **found.to_json()}
    slice_ = explain.feedback_slice(calibration)
    write_json(out_dir / "explain.json", {
        "model": info.name, "num_layers": info.num_layers,
        "slice": {"source": slice_.source, "windows": slice_.n_samples, "seq_len": slice_.seq_len},
        "kl": "KL(original || compressed), nats per token", "cuts": record, "layercut_version": prune.__version__})
    print(to_markdown(measurements))
    print(f"Results in {out_dir}", file=sys.stderr)
    return out_dir


def sweep_report(args, backend: Backend, spec: ModelSpec, request, out_dir: Path, progress) -> Path:
    """--sweep K: the measured quality of every cut of K layers and each method's rank agreement."""
    from evaluation.sweeps.cuts import format_sweep

    report = final(backend.sweeps.cuts(spec, request, args.sweep, batch_size=args.batch_size,
                                       use_cache=not args.no_cache,
                           progress=progress))
    write_json(out_dir / f"sweep_{request.names[0]}_{args.sweep}.json", {
        "sweep": report.sweep.to_json(), "rank_agreement": report.agreement, "method_scores": report.scores,
        "failed_methods": report.failed, "model": backend.models.load(spec).name,
        "layercut_version": prune.__version__})
    print(format_sweep(report.sweep, report.agreement))
    for method, reason in report.failed.items():
        print(f"layercut-benchmark: {method} failed: {reason}", file=sys.stderr)
    print(f"Results in {out_dir}", file=sys.stderr)
    return out_dir


def sparsity_sweep_report(args, backend: Backend, spec: ModelSpec, request, out_dir: Path, progress) -> Path:
    """--sparsity_sweep: the first task's metric and WikiText-2 perplexity at each level, per method."""
    methods = SPARSITY_METHODS if args.methods is None else [m.strip() for m in args.methods.split(",") if m.strip()]
    result = final(backend.sweeps.sparsity(spec, request, levels=levels(args.levels), methods=methods,
                                    calibration=calibration_of(args, backend), ppl_seq_len=args.ppl_seq_len,
                                    ppl_windows=args.ppl_windows, batch_size=args.batch_size,
                                    use_cache=not args.no_cache, progress=progress))
    write_json(out_dir / f"sparsity_sweep_{request.names[0]}.json", {
        "sparsity_sweep": result.to_json(), "model": backend.models.load(spec).name,
        "layercut_version": prune.__version__})
    print(format_table(result))
    print(f"Results in {out_dir}", file=sys.stderr)
    return out_dir


def frontier_report(args, backend: Backend, spec: ModelSpec, request, out_dir: Path, progress) -> Path:
    """--frontier: the table and ``frontier_<axis>.json``; with --target the best model under it (saved with
    --export_dir)."""
    if args.sizes is not None:
        sizes = frontier_plan.check_sizes(args.sizes)
    else:  # a target alone plans its own size only, not the defaults too
        sizes = () if args.target is not None else frontier_plan.DEFAULT_SIZES
    result = final(backend.frontier.run(spec, request, axis=args.axis or frontier_plan.DEFAULT_AXIS, sizes=sizes,
                              target=args.target, method=args.frontier, calibration=calibration_of(args, backend),
                              ppl_seq_len=args.ppl_seq_len, ppl_windows=args.ppl_windows,
                              families=args.plan.families, repair=args.plan.repair, engine=args.engine,
                              screen=not args.frontier_all, batch_size=args.batch_size,
                              use_cache=not args.no_cache, progress=progress))
    data = {"frontier": result.to_json(), "model": backend.models.load(spec).name,
            "layercut_version": prune.__version__}
    print(frontier_table(result))
    if args.target is not None:
        chosen = result.best_under(args.target)
        data["target"] = {"axis": args.target.axis, "value": args.target.value,
                          "of_original": args.target.of_original,
                          "best": None if chosen is None else chosen.to_json()}
        print(f"\n{frontier_text.target_line(result, args.target, chosen)}")
        if chosen is not None:
            print(json.dumps(chosen.recipe.to_json()))
    write_json(out_dir / f"frontier_{result.axis}.json", data)
    if args.target is not None and chosen is not None and args.export_dir:
        if chosen.recipe.is_original:
            raise InvalidInput("The original itself is the best under this target: there is nothing to save.")
        saved = backend.exports.write(spec, chosen.recipe, Path(args.export_dir).expanduser().resolve(), gguf=args.gguf,
                                      progress=progress)
        progress(1.0, f"Saved the best model under {args.target.words()} to {saved}")
    print(f"Results in {out_dir}", file=sys.stderr)
    return out_dir


def dropped_blocks(recipe: Recipe) -> dict[str, list[int]]:
    drop = recipe.sublayer_drop
    return {ATTENTION: list(drop.attention), MLP: list(drop.mlp)} if drop else {ATTENTION: [], MLP: []}


def write_json(path: Path, data: dict) -> None:
    write_atomic(path, json.dumps(data, indent=2, default=str))


def joined(levels) -> str:
    return ",".join(f"{level:g}" for level in levels)


def levels(text: str | None) -> tuple[float, ...]:
    """--levels as numbers (the sweep checks their range)."""
    if text is None:
        return DEFAULT_LEVELS
    try:
        return tuple(float(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise InvalidInput(f"--levels takes fractions separated by commas ({joined(DEFAULT_LEVELS)}), "
                           f"not '{text}'.") from None


def calibration_of(args, backend: Backend) -> Calibration:
    """The default calibration with the --bos choice: for analyses and the steps that calibrate."""
    return replace(backend.models.default_calibration, bos=BOS_CHOICES[args.bos])


SPEED = {"batch_sizes": (1,), "prompt_len": 128, "new_tokens": (32,), "repeats": 3}  # --speed: the page's speed step
MEMORY_NEW_TOKENS = 16  # tokens each model generates while its peak memory is watched (as on the page)


def speed_and_memory(backend: Backend, spec: ModelSpec, variants: dict[str, Recipe], progress, *,
                     engine: str | None = None, int4_type: str | None = None) -> list:
    """--speed: the page's speed rows (prefill, decode with its bytes per token, floor and share of the limit,
    throughput) and memory rows for the original and each variant; more variants than the page compares at once are
    timed in pairs beside the original (its rows from the first pair). ``engine``: each column in llama.cpp too, its
    speed rows and its WikiText-2 perplexity (the page's default windows) with top-1 agreement."""
    in_engine = {} if engine is None else {"engine": engine, "int4_type": int4_type}
    labels = list(variants)
    pairs = [labels[i:i + 2] for i in range(0, len(labels), 2)] or [[]]
    found = []
    for i, pair in enumerate(pairs):
        chosen = {label: variants[label] for label in pair}
        rows = backend.measure.speed(spec, chosen, **SPEED, **in_engine, progress=progress)
        rows += backend.measure.memory(spec, chosen, new_tokens=MEMORY_NEW_TOKENS, progress=progress)
        if engine is not None:  # the page's windows, shorter where the model's positions end sooner
            positions = getattr(backend.models.model(spec).config, "max_position_embeddings", None)
            rows += backend.measure.perplexity(spec, chosen, seq_lens=(min(PERPLEXITY.seq_len, positions or 10**9),),
                                               bos=(False,), max_windows=PERPLEXITY.windows, **in_engine,
                                               progress=progress)
        found += [m for m in rows if i == 0 or m.model != ORIGINAL]
    return found
