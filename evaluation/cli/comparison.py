"""A comparison (--full, a cut mode, a step or --recipe): the tasks on the original and each compared model, their
``results_<mode>.json`` (lm-eval style), speed and memory, the exports, ``comparison.md`` and ``comparison.csv``."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import prune
from prune.core.recipe import Recipe

from evaluation.cli import output, tasks
from evaluation.core.pool import ModelSpec
from evaluation.exports import scale_out
from evaluation.measure.measurement import ORIGINAL, PRUNED, to_csv, to_markdown
from evaluation.quality import lm_eval_adapter
from evaluation.serving.backend import Backend
from evaluation.serving.engine import NOTE as ENGINE_NOTE


def compare(args, backend: Backend, spec: ModelSpec, info, cuts: dict[str, Recipe], request, judged, out_dir: Path,
            progress) -> Path:
    """Every compared model measured, written, saved with --export_dir and printed; returns the output folder."""
    config = _config(args, backend, info, judged)
    results = {label: {} for label in (ORIGINAL, *cuts)} if request is None else backend.measure.benchmark_results(
        spec, cuts, request, batch_size=args.batch_size, scorer=args.scorer, seed=args.seed,
        use_cache=not args.no_cache, progress=progress)
    judged_report = tasks.run(args, backend, spec, cuts, results, judged, info, out_dir, progress)
    measurements = _write_results(results, cuts, config, info, out_dir)
    if args.speed:
        measurements += _speed(args, backend, spec, cuts, config, out_dir, progress)
    if args.export_dir:
        _export(args, backend, spec, cuts, measurements, progress)
    _write_comparison(info, cuts, measurements, judged_report, out_dir)
    if args.heal:
        output.print_healing(args, backend, spec, cuts)
    print(f"Results in {out_dir}", file=sys.stderr)
    return out_dir


def _label(mode: str, cuts: dict[str, Recipe]) -> str:
    """A compared model's name in the table: "pruned" when it is the only one, else its mode."""
    return PRUNED if len(cuts) == 1 else mode


def _config(args, backend: Backend, info, judged) -> dict:
    """The run's settings, recorded in each results file."""
    standard, own = tasks.split(args.task)
    config = {"model": info.name, "num_layers": info.num_layers, "device": info.device, "dtype": info.dtype,
              "tasks": [*standard, *own], "limit": args.limit, "num_fewshot": args.num_fewshot,
              "batch_size": args.batch_size, "scorer": args.scorer, "seed": args.seed,
              "data_dir": str(backend.models.data_dir) if backend.models.data_dir else "hub",
              "layercut_version": prune.__version__, "date": time.strftime("%Y-%m-%d %H:%M:%S")}
    if judged is not None:
        config["mt_bench"] = {**judged.judge.to_json(), "turns": judged.turns, "questions": len(judged.questions)}
    return config


def _write_results(results: dict[str, dict], cuts: dict[str, Recipe], config: dict, info, out_dir: Path) -> list:
    """``results_full.json`` and one ``results_<mode>.json`` per compared model; the table's measurements."""
    output.write_json(out_dir / "results_full.json",
                      output.results_json(results[ORIGINAL], {**config, "mode": "full", "removed_layers": []}))
    measurements = lm_eval_adapter.to_measurements(results[ORIGINAL], model=ORIGINAL)
    for mode, recipe in cuts.items():
        output.write_json(out_dir / f"results_{mode}.json", output.results_json(results[mode], {
            **config, "mode": mode, "removed_layers": list(recipe.depth_cut.layers) if recipe.depth_cut else [],
            "dropped_blocks": output.dropped_blocks(recipe), "cut": recipe.describe(),
            "recipe": recipe.to_json(),
            "params_removed_pct": round(100 * info.removed_params(recipe) / info.num_params, 3)}))
        measurements += lm_eval_adapter.to_measurements(results[mode], model=_label(mode, cuts))
    return measurements


def _speed(args, backend: Backend, spec: ModelSpec, cuts: dict[str, Recipe], config: dict, out_dir: Path,
           progress) -> list:
    """--speed: the page's speed and memory rows, also written to ``speed_memory.json``."""
    labelled = {_label(mode, cuts): recipe for mode, recipe in cuts.items()}
    timed = output.speed_and_memory(backend, spec, labelled, progress, engine=args.engine, int4_type=args.int4_type)
    output.write_json(out_dir / "speed_memory.json", {"config": {**config, **output.SPEED},
                                                      "measurements": [m.to_dict() for m in timed]})
    return timed


def _export(args, backend: Backend, spec: ModelSpec, cuts: dict[str, Recipe], measurements: list, progress) -> None:
    """--export_dir: each compared model saved (a folder per mode when there are several), with its scale-out
    commands printed."""
    target = Path(args.export_dir).expanduser().resolve()
    for mode, recipe in cuts.items():
        saved = backend.exports.write(spec, recipe, target / mode if len(cuts) > 1 else target,
                                      scores=[m for m in measurements if m.model in (ORIGINAL, PRUNED, mode)],
                                      gguf=args.gguf)
        progress(1.0, f"Saved the {mode} checkpoint to {saved}")
        print(scale_out.scale_out(str(saved), json.loads((saved / "config.json").read_text()), recipe).markdown())


def _write_comparison(info, cuts: dict[str, Recipe], measurements: list, judged_report: str, out_dir: Path) -> None:
    """``comparison.md`` (the models, the table, MT-Bench's report) and ``comparison.csv``; the table printed."""
    header = f"# LayerCut comparison\n\nModel: {info.name} ({info.num_layers} layers)\n\n"
    header += "".join(f"- {mode}: {recipe.describe()}\n" for mode, recipe in cuts.items())
    table = to_markdown(measurements)
    notes = {m.model: m.details[ENGINE_NOTE] for m in measurements if m.details and m.details.get(ENGINE_NOTE)}
    table += "".join(f"\n{model}: {note}" for model, note in notes.items())  # a column llama.cpp could not run
    (out_dir / "comparison.md").write_text(header + "\n" + table + ("\n" + judged_report if judged_report else ""))
    (out_dir / "comparison.csv").write_text(to_csv(measurements))
    print(table)
    if judged_report:
        print(judged_report)
