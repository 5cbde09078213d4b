"""Side by side, in one run: the fast scorer vs HFLM, and the cut sweep vs evaluating each cut.

    python -m benchmarks.fast_scorer                 # default model, first 200 hellaswag docs, K = 6
    python -m benchmarks.fast_scorer --quick         # 20 docs, every 4th cut for the naive side

Targets (issue 5): fast ≤ 0.5× HFLM's time with identical accuracy; the sweep over every
start ≤ 0.55× evaluating each cut on its own (both sides use the fast scorer, so the
ratio measures only the reuse of the original's hidden states). Wall-clock and process
CPU seconds are both printed; torch runs one thread unless --threads says otherwise. Writes
``benchmarks/results/fast_scorer.json`` (``--quick``: ``fast_scorer_dry_run.json``).
"""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch
from lm_eval.models.huggingface import HFLM

import prune
from benchmarks import harness
from benchmarks.record import write_result
from evaluation.quality.fast_lm import FastLM
from evaluation.sweeps.cuts import evaluate_loaded, load_task, sweep, task_metrics
from prune.core.architectures import num_layers as len_layers


def recording(lm):
    """Keep every loglikelihood answer lm-eval gets, in order."""
    answers = []
    method = lm.loglikelihood

    def loglikelihood(requests, disable_tqdm=False):
        out = method(requests, disable_tqdm=True)
        answers.extend(out)
        return out

    lm.loglikelihood = loglikelihood
    return lm, answers


def timed_eval(lm, loaded, name, limit):
    with harness.Clock() as clock:
        metrics, _ = task_metrics(evaluate_loaded(lm, loaded, limit), name)
    return metrics, clock


def fmt(metrics: dict) -> str:
    return ", ".join(f"{k} {v:.4f}" for k, v in sorted(metrics.items()))


def compare_scorers(model, tokenizer, loaded, name, limit, batch_size) -> dict:
    """Fast vs HFLM on the same requests; HFLM first, then fast (a warm-up run precedes both)."""
    for lm in (HFLM(pretrained=model, tokenizer=tokenizer, batch_size=batch_size),
               FastLM(model, tokenizer, batch_size)):
        timed_eval(lm, loaded, name, 2)  # warm-up: first-call allocations, lazy imports
    slow, slow_ll = recording(HFLM(pretrained=model, tokenizer=tokenizer, batch_size=batch_size))
    fast, fast_ll = recording(FastLM(model, tokenizer, batch_size))
    slow_metrics, slow_clock = timed_eval(slow, loaded, name, limit)
    fast_metrics, fast_clock = timed_eval(fast, loaded, name, limit)
    diff = max(abs(a[0] - b[0]) for a, b in zip(fast_ll, slow_ll))
    greedy_same = all(a[1] == b[1] for a, b in zip(fast_ll, slow_ll))
    print(f"\n== fast scorer vs HFLM ({len(slow_ll)} loglikelihood requests, batch size {batch_size})")
    print(f"HFLM : {slow_clock.wall:7.1f} s wall  {slow_clock.cpu:7.1f} s CPU   {fmt(slow_metrics)}")
    print(f"fast : {fast_clock.wall:7.1f} s wall  {fast_clock.cpu:7.1f} s CPU   {fmt(fast_metrics)}")
    print(f"max |Δ loglikelihood| {diff:.2e}; is_greedy identical: {greedy_same}; "
          f"metrics identical: {fast_metrics == slow_metrics}")
    print(f"RATIO fast/HFLM: {fast_clock.wall / slow_clock.wall:.3f} wall, {fast_clock.cpu / slow_clock.cpu:.3f} CPU "
          f"(speed-up {slow_clock.wall / fast_clock.wall:.2f}x; target ≤ 0.5)")
    return {"hflm_s": slow_clock.wall, "fast_s": fast_clock.wall, "hflm_cpu_s": slow_clock.cpu,
            "fast_cpu_s": fast_clock.cpu, "hflm": slow_metrics, "fast": fast_metrics, "max_ll_diff": diff,
            "identical": fast_metrics == slow_metrics and greedy_same, "fast_original_s": fast_clock.wall,
            "fast_original_cpu_s": fast_clock.cpu}


def compare_sweep(model, tokenizer, loaded, name, task, limit, block_size, batch_size, every, original) -> dict:
    """The sweep vs each cut evaluated on its own with the fast scorer (every ``every``-th start timed)."""
    count = len_layers(model)
    starts = list(range(count - block_size + 1))
    with harness.Clock() as clock:
        result = sweep(model, tokenizer, task, block_size, limit=limit, batch_size=batch_size)
    naive_wall = naive_cpu = 0.0
    timed = starts[::every]
    mismatches = []
    for start in timed:
        lm = FastLM(prune.cut(model, start, start + block_size), tokenizer, batch_size)
        metrics, c = timed_eval(lm, loaded, name, limit)
        naive_wall, naive_cpu = naive_wall + c.wall, naive_cpu + c.cpu
        if metrics != {m: v[start] for m, v in result.metrics.items()}:
            mismatches.append(start)
    scale = len(starts) / len(timed)  # extrapolated when only every n-th cut is timed
    naive_wall, naive_cpu = naive_wall * scale, naive_cpu * scale
    metric = result.primary_metric
    print(f"\n== sweep K={block_size} over {len(starts)} starts vs each cut on its own ({task}, limit {limit})")
    print(f"sweep : {clock.wall:7.1f} s wall  {clock.cpu:7.1f} s CPU (original included)")
    print(f"naive : {naive_wall:7.1f} s wall  {naive_cpu:7.1f} s CPU "
          f"({len(timed)} of {len(starts)} cuts timed{'' if every == 1 else ', extrapolated'})")
    print(f"sweep metrics identical to the independent runs: {not mismatches}"
          + (f" (differ at starts {mismatches})" if mismatches else ""))
    print(f"RATIO sweep/naive: {clock.wall / naive_wall:.3f} wall, {clock.cpu / naive_cpu:.3f} CPU (target ≤ 0.55)")
    with_base = (naive_wall + original["fast_original_s"], naive_cpu + original["fast_original_cpu_s"])
    print(f"RATIO sweep/(naive + original's run): {clock.wall / with_base[0]:.3f} wall, "
          f"{clock.cpu / with_base[1]:.3f} CPU")
    print(f"baseline {metric} {result.baseline[metric]:.4f}; best cut [{result.best_start()}, "
          f"{result.best_start() + block_size}) {metric} {result.metrics[metric][result.best_start()]:.4f}; "
          f"worst [{result.worst_start()}, {result.worst_start() + block_size}) "
          f"{result.metrics[metric][result.worst_start()]:.4f}")
    print(f"{metric} per start: " + " ".join(f"{v:.3f}" for v in result.metrics[metric]))
    return {"sweep_s": clock.wall, "sweep_cpu_s": clock.cpu, "naive_s": naive_wall, "naive_cpu_s": naive_cpu,
            "naive_timed_starts": timed, "mismatches": mismatches, "sweep": result.to_json()}


def main(argv=None) -> None:
    parser = harness.parser(__doc__)
    parser.add_argument("--limit", type=int, default=200, help="documents of the task (first N, file order)")
    parser.add_argument("--task", default="hellaswag")
    parser.add_argument("--block-size", type=int, default=6)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--naive-every", type=int, default=1,
                        help="time every n-th cut for the naive side and extrapolate (1 = all cuts)")
    parser.add_argument("--quick", action="store_true", help="20 docs, every 4th cut on the naive side")
    parser.add_argument("--skip-sweep", action="store_true")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (0: torch's default). One by default: on a shared machine "
                             "oversubscribed OpenMP threads make wall times swing several-fold")
    parser.add_argument("--json", type=Path, help="write the numbers here instead of benchmarks/results/")
    args = parser.parse_args(argv)
    if args.quick:
        args.limit, args.naive_every = min(args.limit, 20), max(args.naive_every, 4)
    if args.threads:
        torch.set_num_threads(args.threads)

    model, tokenizer = prune.load_model()
    loaded, name = load_task(args.task)
    print(f"model {model.layercut_name}: {len_layers(model)} layers; "
          f"{args.task} limit {args.limit}; torch threads {torch.get_num_threads()}")
    report = {"args": {k: str(v) for k, v in vars(args).items()}}
    report["scorer"] = compare_scorers(model, tokenizer, loaded, name, args.limit, args.batch_size)
    if not args.skip_sweep:
        report["sweep"] = compare_sweep(model, tokenizer, loaded, name, args.task, args.limit, args.block_size,
                                        args.batch_size, args.naive_every, report["scorer"])
    name = args.json.stem if args.json else "fast_scorer_dry_run" if args.quick else "fast_scorer"
    write_result(name, report, folder=args.json.parent if args.json else None,
                 model=f"{model.layercut_name}, {len_layers(model)} layers",
                 how=f"{args.task}, first {args.limit} documents; HFLM first, then the fast scorer, a warm-up before "
                     f"both; torch threads {torch.get_num_threads()}")


if __name__ == "__main__":
    main()
