"""Seed 004's sparsity sweep on the default model: a task's accuracy and WikiText-2 perplexity at each
sparsity level, for magnitude, Wanda and SparseGPT, and the time each method takes.

    .venv/bin/python -m benchmarks.sparsity_sweep [--task arc_easy] [--limit 100]
        [--levels 0,0.1,0.5,0.9,0.99] [--methods magnitude,wanda,sparsegpt] [--windows 16] [--seq-len 512]
    # the seed's own table: its cloze rule on CBT-style questions (not CBT), magnitude and Wanda
    .venv/bin/python -m benchmarks.sparsity_sweep --task cbt_style_cn --methods magnitude,wanda

Everything goes through ``backend.sweeps.sparsity``, as the app and the CLI's ``--sparsity_sweep``
do: the task's primary metric (acc_norm for arc_easy and hellaswag, the cloze rule's acc for cbt_*) on its
first ``--limit`` documents, WikiText-2 test perplexity over the first ``--windows`` windows of ``--seq-len`` tokens
(no BOS), Wanda and SparseGPT calibrated on the default calibration (WikiText-2 validation, 32 ×
128 tokens). Points are cached as usual, so an interrupted run resumes; a cached point keeps the
times measured when it was computed (``--no_cache`` recomputes everything). Writes
``benchmarks/results/sparsity_sweep_<task>.json``.
"""

from __future__ import annotations

import sys

from benchmarks import harness
from benchmarks.record import write_result
from benchmarks.renderers import sparsity_sweep as table  # the docs' table of it


def main() -> None:
    parser = harness.parser(__doc__)
    parser.add_argument("--task", default="arc_easy",
                        help="a task with an accuracy (arc_easy, hellaswag, cbt_style_cn, …)")
    parser.add_argument("--limit", type=int, default=100, help="documents of the task")
    parser.add_argument("--levels", default="0,0.1,0.5,0.9,0.99", help="comma list of sparsity fractions")
    parser.add_argument("--methods", default="magnitude,wanda,sparsegpt", help="comma list of sparsity methods")
    parser.add_argument("--windows", type=int, default=16, help="perplexity windows per model")
    parser.add_argument("--seq-len", type=int, default=512, help="tokens per perplexity window")
    parser.add_argument("--no_cache", action="store_true", help="recompute every point")
    args = parser.parse_args()

    import torch

    from evaluation.core.jobs import final
    from evaluation.quality import lm_eval_adapter

    backend, spec, info = harness.default_model()
    request = lm_eval_adapter.check_request([args.task], limit=args.limit, data_dir=backend.models.data_dir)
    cal = backend.models.default_calibration
    print(f"{info.name}: {info.num_layers} layers, {info.num_params:,} parameters; torch threads "
          f"{torch.get_num_threads()}; calibration {cal.source}, {cal.n_samples} × {cal.seq_len} tokens", flush=True)
    last = [""]

    def progress(fraction: float, message: str) -> None:
        if message != last[0]:
            print(f"[{100 * fraction:5.1f}%] {message}", file=sys.stderr, flush=True)
            last[0] = message

    with harness.Clock() as clock:
        result = final(backend.sweeps.sparsity(spec, request, levels=[float(x) for x in args.levels.split(",")],
                                               methods=args.methods.split(","), calibration=cal,
                                               ppl_seq_len=args.seq_len, ppl_windows=args.windows,
                                               use_cache=not args.no_cache, progress=progress))

    figures = {"sweep": result.to_json(), "wall_s": round(clock.wall, 1), "threads": torch.get_num_threads()}
    print(f"\n{table(figures)}\n\n(A cached point keeps the seconds measured when it was computed and cost this run "
          "nothing.)")
    write_result(f"sparsity_sweep_{args.task}", figures,
                 model=f"{info.name}, {info.num_layers} layers",
                 how=f"backend.sweeps.sparsity: {args.task}'s primary metric on its first {args.limit} documents, "
                     f"WikiText-2 test perplexity over {args.windows} windows of {args.seq_len} tokens; calibration "
                     f"{cal.source}, {cal.n_samples} × {cal.seq_len} tokens; cached points keep the times measured "
                     "when they were computed")


if __name__ == "__main__":
    main()
