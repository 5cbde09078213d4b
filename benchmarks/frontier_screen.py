"""The screened frontier against the exhaustive one, side by side in one run, each from a cold results cache.

    .venv/bin/python -m benchmarks.frontier_screen --target bytes=30%                     # screen_target
    .venv/bin/python -m benchmarks.frontier_screen --sizes 50,30,20 --name screen_sizes
    .venv/bin/python -m benchmarks.frontier_screen --target bytes=30% --model gemma3 --name screen_target_gemma3

Runs the frontier as ``layercut-benchmark --frontier`` does (hellaswag's first 200, WikiText-2 test perplexity over
16 × 512 tokens, decode at batch 1) twice on the default model (``--model gemma3``: Google's Gemma 3 270M, the second
real model, from its PyPI GGUF chunks as :mod:`benchmarks.gguf_roundtrip` assembles it; or a model's folder or
file): screened (the default) and with ``screen=False`` (``--frontier_all``), each in its own process with a new
results cache (the dequantized model is reused: its unpacking is no frontier's work), one after the other. Writes
each run's wall time, the seconds to its first early answer and to the end of its screen, both tables' fronts and
best under the target, and the screen's error per family against the full measurement of the same candidate: the
ratio of the screen's perplexity to the full one, over the original's same ratio (the screen's 4 windows are easier
or harder than the 16 for every model alike; what a screen decides by is how candidates compare), and how often the
screen ruled out a point the exhaustive run puts on the front (the goal: never).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import prune
from benchmarks import harness
from benchmarks.record import write_result


def one_run(args) -> None:
    """Child: one frontier (screened or not) in the cache the parent made; its timings and results to ``--out``."""
    from evaluation.core.pool import ModelSpec
    from evaluation.frontier.plan import check_sizes, check_target
    from evaluation.frontier.screen import Screening
    from evaluation.quality import lm_eval_adapter
    from evaluation.serving.backend import Backend

    began = time.perf_counter()
    backend = Backend()
    request = lm_eval_adapter.check_request([args.task], limit=args.limit, data_dir=backend.models.data_dir)
    target = check_target(args.target) if args.target else None
    first = screened_at = None
    screening = result = None
    for found in backend.frontier.run(ModelSpec(args.model), request, target=target,
                                      sizes=check_sizes(args.sizes) if args.sizes else (), screen=args.screened,
                                      progress=lambda f, m: print(f"[{100 * f:5.1f}%] {m}", file=sys.stderr,
                                                                  flush=True)):
        now = time.perf_counter() - began
        if isinstance(found, Screening):
            first = first or now
            screening = found
            screened_at = now if found.pending == 0 else None
        else:
            result = found
    Path(args.out).write_text(json.dumps({
        "wall_s": time.perf_counter() - began, "first_answer_s": first, "screened_s": screened_at,
        "frontier": result.to_json(),
        "screen": None if screening is None else [p.to_json() for p in screening.points],
        "screen_original": None if screening is None else screening.original.to_json(),
        "best": None if target is None or (b := result.best_under(target)) is None else b.recipe.key}))


def compared(screened: dict, exhaustive: dict) -> dict:
    """Fronts, best points and the screen's error per family, from the two runs' records."""
    from evaluation.frontier.result import FrontierResult
    from evaluation.frontier.screen import Screened

    full = FrontierResult.from_json(exhaustive["frontier"])
    quick = FrontierResult.from_json(screened["frontier"])
    measured = {p.recipe.key: p for p in full.everything()}
    front = {p.recipe.key for p in full.front()}
    out = {p.recipe.key for p in quick.screened}
    errors: dict[str, dict] = {}
    original = Screened.from_json(screened["screen_original"])
    shift = original.perplexity / full.dense.perplexity  # the screen's windows are easier or harder for every model
    for point in map(Screened.from_json, screened["screen"]):
        if point.recipe.key not in measured:
            continue
        ratio = point.perplexity / measured[point.recipe.key].perplexity / shift
        for family in point.families or ("original",):
            entry = errors.setdefault(family, {"points": 0, "max_ratio_error": 0.0, "screened_out": 0,
                                               "front_screened_out": 0})
            entry["points"] += 1
            entry["max_ratio_error"] = max(entry["max_ratio_error"], abs(math.log(ratio)))
            entry["screened_out"] += point.recipe.key in out
            entry["front_screened_out"] += point.recipe.key in out and point.recipe.key in front
    for entry in errors.values():
        entry["max_ratio_error"] = round(math.exp(entry["max_ratio_error"]) - 1, 4)  # at most, as a share
    return {"screen_over_full_original": shift,
            "same_front": [p.recipe.key for p in quick.front()] == [p.recipe.key for p in full.front()],
            "front_screened": [p.label for p in quick.front()], "front_exhaustive": [p.label for p in full.front()],
            "same_best": screened["best"] == exhaustive["best"], "screened_out": len(out),
            "measured_in_full": {"screened": len(quick.points), "exhaustive": len(full.points)},
            "front_points_screened_out": sum(e["front_screened_out"] for e in errors.values()),
            "error_by_family": errors}


def main() -> None:
    parser = harness.parser(__doc__)
    parser.add_argument("--target", default=None, help="e.g. bytes=30%%")
    parser.add_argument("--sizes", default=None, help="e.g. 50,30,20")
    parser.add_argument("--task", default="hellaswag")
    parser.add_argument("--limit", type=int, default=200)
    parser.add_argument("--name", default="screen_target")
    parser.add_argument("--model", default=prune.DEFAULT_MODEL, help="gemma3, or a model folder or GGUF file")
    parser.add_argument("--one", choices=("screened", "exhaustive"), default=None, help=argparse.SUPPRESS)
    parser.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        args.screened = args.one == "screened"
        return one_run(args)
    if args.model == "gemma3":  # assembled in the persistent cache, not in each run's cold one
        from benchmarks.gguf_roundtrip import gguf_path

        args.model = str(gguf_path("gemma3"))
    prune.load_model(None if args.model == prune.DEFAULT_MODEL else args.model)  # unpacked once, before either run
    runs = {}
    for mode in ("screened", "exhaustive"):
        folder = Path(tempfile.mkdtemp(prefix="layercut-screen-bench-"))
        cache = harness.cache_reusing_models(folder / "cache")
        command = [sys.executable, "-m", "benchmarks.frontier_screen", "--one", mode, "--out", str(folder / "run.json"),
                   "--model", args.model,
                   "--task", args.task, "--limit", str(args.limit),
                   *(["--target", args.target] if args.target else []),
                   *(["--sizes", args.sizes] if args.sizes else [])]
        subprocess.run(command, check=True, env={**os.environ, "LAYERCUT_CACHE": str(cache)})
        runs[mode] = json.loads((folder / "run.json").read_text())
        print(f"{mode}: {runs[mode]['wall_s']:.0f} s", flush=True)
    figures = {"target": args.target, "sizes": args.sizes, "task": args.task, "limit": args.limit,
               **{f"{mode}_{k}": runs[mode][k] for mode in runs for k in ("wall_s", "first_answer_s", "screened_s")},
               "speedup": runs["exhaustive"]["wall_s"] / runs["screened"]["wall_s"],
               **compared(runs["screened"], runs["exhaustive"]),
               "screened": runs["screened"], "exhaustive": runs["exhaustive"]}
    print(json.dumps({k: v for k, v in figures.items() if k not in ("screened", "exhaustive")}, indent=1))
    write_result(args.name, figures, model=prune.DEFAULT_MODEL if args.model == prune.DEFAULT_MODEL else
                 Path(args.model).name,
                 how="layercut's frontier screened and with --frontier_all, each in its own process from a cold "
                     "results cache (the dequantized model reused), one after the other on this machine")


if __name__ == "__main__":
    main()
