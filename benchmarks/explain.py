"""Release-to-numbers time of the cut feedback (issue 12) on the default model, beside a full forward of each cut.

    python -m benchmarks.explain                 # SmolLM2-135M, the feedback slice, 10 releases

What a release costs: ``backend.explain.cut_feedback`` with the cache off (perplexity of the cut and of the
original, mean KL, top-1 agreement on the slice), the original's residual stream computed beforehand
(its one-off cost is printed first). Beside each release: a full forward of the same cut model on
the same ids (what the feedback would cost without resuming), and their ratio; each cut three times,
alternating. Target: median ≤ 2 s on 2 CPU cores (the first release of each cut). Wall and
process-CPU seconds are both printed, with the load average: on a shared machine the wall time also
counts other people's work, and the best of three is the least disturbed. Writes
``benchmarks/results/explain.json``.
"""

from __future__ import annotations

import os
import statistics

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch

import prune
from benchmarks import harness
from benchmarks.record import write_result
from evaluation.explain import cut as explain
from evaluation.serving.backend import Backend
from prune.core.calibration import token_windows
from prune.core.recipe import Recipe

CUTS = [(13, 16), (15, 21), (2, 8), (20, 26), (5, 9), (10, 14), (24, 30), (0, 4), (17, 19), (8, 12)]
SHOWN = [(13, 16), (15, 21), (2, 8)]


def spread(values: list[float]) -> str:
    q = statistics.quantiles(values, n=4) if len(values) > 1 else [values[0]] * 3
    return (f"median {statistics.median(values):.2f} (IQR {q[0]:.2f}–{q[2]:.2f}, "
            f"min {min(values):.2f}, max {max(values):.2f})")


def main() -> None:
    parser = harness.parser(__doc__)
    parser.add_argument("--releases", type=int, default=len(CUTS), help=f"cuts released (at most {len(CUTS)})")
    parser.add_argument("--repeats", type=int, default=3, help="releases (and full forwards) per cut, alternating")
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, load average {os.getloadavg()[0]:.1f}")
    model, tokenizer = prune.load_model()
    backend = Backend()
    spec = backend.models.adopt(model, tokenizer)
    num_layers = backend.models.load(spec).num_layers
    cal = explain.feedback_slice(backend.models.default_calibration)
    ids = token_windows(tokenizer, cal)
    print(f"model {spec.label}: {num_layers} layers; slice: {cal.source}, "
          f"{ids.shape[0]} windows × {ids.shape[1]} tokens")

    with harness.Clock() as once:
        backend.explain.cut_feedback(spec, Recipe(), use_cache=False)  # computes the original's states
    print(f"one-off: the original's residual stream and distributions: {once.wall:.2f} s wall, {once.cpu:.2f} s CPU")
    backend.explain.cut_feedback(spec, Recipe.block(num_layers, 14, 15), use_cache=False)  # warm-up, not counted

    rows = []
    for start, end in CUTS[: args.releases]:
        recipe = Recipe.block(num_layers, start, end)
        cut_model = recipe.apply(model)
        releases, fulls = [], []
        for _ in range(args.repeats):  # alternating, so a burst of other people's work hits both sides
            with harness.Clock() as release:
                found = backend.explain.cut_feedback(spec, recipe, use_cache=False)
            with harness.Clock() as full, torch.no_grad():
                cut_model(input_ids=ids, use_cache=False)
            releases.append(release)
            fulls.append(full)
        best, best_full = min(r.wall for r in releases), min(f.wall for f in fulls)
        rows.append((start, end, found, releases, fulls))
        print(f"[{start:2d}, {end:2d}): release {' '.join(f'{r.wall:.2f}' for r in releases)} s wall "
              f"({' '.join(f'{r.cpu:.2f}' for r in releases)} CPU) · full forward "
              f"{' '.join(f'{f.wall:.2f}' for f in fulls)} s · ratio (best of {args.repeats}) {best / best_full:.2f} · "
              f"{found.summary()}", flush=True)

    first = [r[3][0].wall for r in rows]
    best = [min(x.wall for x in r[3]) for r in rows]
    print(f"\nrelease-to-numbers, first release per cut, wall s: {spread(first)}")
    print(f"release-to-numbers, best of {args.repeats} per cut, wall s: {spread(best)}")
    print(f"release-to-numbers, best of {args.repeats} per cut, CPU s:  "
          f"{spread([min(x.cpu for x in r[3]) for r in rows])}")
    print(f"full forward of the cut model, best of {args.repeats}, wall s: "
          f"{spread([min(x.wall for x in r[4]) for r in rows])}")
    print(f"ratio release / full forward (best of {args.repeats} each): "
          f"{spread([min(x.wall for x in r[3]) / min(x.wall for x in r[4]) for r in rows])}")
    print(f"target ≤ 2 s: {'met' if statistics.median(first) <= 2 else 'NOT met'} "
          f"(median of the first releases {statistics.median(first):.2f} s); load average now {os.getloadavg()[0]:.1f}")
    print("\n| cut | perplexity | original | KL (nats/token) | top-1 agreement | resumed from |")
    print("|---|---|---|---|---|---|")
    for start, end, found, *_ in rows:
        if (start, end) in SHOWN:
            print(f"| [{start}, {end}) | {found.perplexity:.2f} | {found.original_perplexity:.2f} | {found.kl:.3f} | "
                  f"{found.agreement_pct:.1f} % | layer {found.resumed_at} |")
    cuts = [{"cut": [start, end], "release_wall_s": [round(r.wall, 3) for r in releases],
             "release_cpu_s": [round(r.cpu, 3) for r in releases],
             "full_forward_wall_s": [round(f.wall, 3) for f in fulls], "feedback": found.to_json()}
            for start, end, found, releases, fulls in rows]
    write_result("explain", {"one_off_wall_s": round(once.wall, 2), "one_off_cpu_s": round(once.cpu, 2),
                             "first_release_median_s": round(statistics.median(first), 3),
                             "target_met": statistics.median(first) <= 2, "threads": torch.get_num_threads(),
                             "load_average_end": os.getloadavg()[0], "cuts": cuts},
                 model=f"{spec.label}, {num_layers} layers",
                 how=f"backend.explain.cut_feedback with the cache off on the feedback slice ({cal.source}, "
                     f"{ids.shape[0]} × {ids.shape[1]} tokens), beside a full forward of the cut; {args.repeats} of "
                     "each per cut, alternating")


if __name__ == "__main__":
    main()
