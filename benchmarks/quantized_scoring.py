"""Scoring an int8 and an int4 model through their CPU kernels against the same products widened
(``prune/quantize/packed.py``), side by side on the default model: hellaswag's first N questions and WikiText-2 test
perplexity, as a frontier point is measured.

    .venv/bin/python -m benchmarks.quantized_scoring [--hellaswag 200] [--ppl_windows 16] [--rounds 2] [--name ...]

The models are the frontier's int8 point (int8 weights and embedding, the head tied to it) and int4 in groups of 32
with the int8 embedding (rounded to nearest: the same kernel as GPTQ's). Each round scores each with its own
products through its kernel (the code before they were widened), then with its long products widened (int4's forced
where this machine would keep its kernel; its int8 head widened in both), then the float32 original doing the same
work; the routes take turns, so the machine's drift falls on all alike. Writes each route's seconds a round, the
ratios, the rate reached (the perplexity's multiply-adds, as :func:`evaluation.measure.speed.forward_flops` counts
them, per second) beside this machine's float32 (and, where oneDNN has it, bfloat16) matrix-product peak timed in
the same run, and every route's scores, which differ only by the order of the kernels' sums. A machine's figures
differ with its vector instructions (``machine`` in the JSON); ``--name quantized_scoring_avx2`` with
``ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2`` runs the AVX2 code on an AVX-512
machine.
"""

from __future__ import annotations

import math
import statistics
import time

from benchmarks import harness
from benchmarks.record import write_result


def main() -> None:
    parser = harness.parser(__doc__, "hellaswag")
    parser.add_argument("--ppl_windows", type=int, default=16, help="WikiText-2 test windows of 512 tokens")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--name", default="quantized_scoring")
    args = parser.parse_args()
    harness.in_fresh_cache(lambda: run(args))


def peak_gflops(dtype) -> float:
    """The best of 3 rates of a 4,096 × 1,536 × 576 product in ``dtype`` (the default model's MLP shape), GFLOP/s."""
    import torch

    a, b = torch.randn(4096, 576).to(dtype), torch.randn(1536, 576).to(dtype)
    torch.nn.functional.linear(a, b)
    best = math.inf
    for _ in range(3):
        began = time.perf_counter()
        torch.nn.functional.linear(a, b)
        best = min(best, time.perf_counter() - began)
    return 2 * 4096 * 1536 * 576 / best / 1e9


def run(args) -> None:
    import torch

    from evaluation.core.settings import BATCH_SIZE
    from evaluation.measure.speed import forward_flops
    from evaluation.quality import lm_eval_adapter, perplexity
    from evaluation.quality.fast_lm import make_fast
    from evaluation.sweeps.cuts import evaluate_loaded, task_metrics
    from prune.core.recipe import Recipe
    from prune.quantize import packed
    from prune.quantize.step import Quantize

    backend, spec, _info = harness.default_model()
    original = backend.models.model(spec, Recipe())
    tokenizer = backend.models.base(spec).tokenizer
    int8 = backend.models.model(spec, Recipe((Quantize.of(8, embedding=True),)))
    int4 = backend.models.model(spec, Recipe((Quantize.of(4, 32, embedding=True),)))
    request = lm_eval_adapter.check_request(["hellaswag"], limit=args.hellaswag, data_dir=backend.models.data_dir)
    loaded = lm_eval_adapter.load_tasks(request)
    ids = perplexity.token_ids(tokenizer, perplexity.wikitext2_rows(backend.models.data_dir))
    windows = perplexity.windows(ids, 512, None)[:args.ppl_windows]

    def score(model) -> dict:
        began = time.perf_counter()
        metrics, _ = task_metrics(evaluate_loaded(make_fast(model, tokenizer, BATCH_SIZE), loaded, args.hellaswag),
                                  "hellaswag")
        task_s = time.perf_counter() - began
        nll = perplexity.mean_nll(model, windows, known=())[0]
        return {"task_s": task_s, "perplexity_s": time.perf_counter() - began - task_s,
                "acc_norm": metrics["acc_norm"], "perplexity": math.exp(nll)}

    wide = {"WIDEN_ROWS": packed.WIDEN_ROWS, "INT4_WIDENS": True}  # int4 widened even where it would not be
    # each pair differs in its own products only (int4's int8 embedding, the head tied to it, is widened in both)
    routes = {"int8 kernel": (int8, {**wide, "WIDEN_ROWS": 10 ** 9}), "int8 widened": (int8, wide),
              "int4 kernel": (int4, {**wide, "INT4_WIDENS": False}), "int4 widened": (int4, wide),
              "float32 original": (original, wide)}
    saved = {name: getattr(packed, name) for name in wide}
    rounds: dict[str, list[dict]] = {name: [] for name in routes}
    try:
        for _ in range(args.rounds):
            for name, (model, settings) in routes.items():
                for setting, value in settings.items():
                    setattr(packed, setting, value)
                rounds[name].append(score(model))
                print(name, rounds[name][-1], flush=True)
    finally:
        for setting, value in saved.items():
            setattr(packed, setting, value)
    flops = args.ppl_windows * forward_flops(original, 512)  # perplexity's: 2 × its multiply-adds
    columns = {}
    for name, found in rounds.items():
        seconds = [r["task_s"] + r["perplexity_s"] for r in found]
        columns[name] = {"seconds": [round(s, 2) for s in seconds], "median_s": round(statistics.median(seconds), 2),
                         "task_s": round(statistics.median(r["task_s"] for r in found), 2),
                         "perplexity_s": round(statistics.median(r["perplexity_s"] for r in found), 2),
                         "perplexity_gflops": round(flops / statistics.median(r["perplexity_s"] for r in found) / 1e9,
                                                    1),
                         "acc_norm": found[0]["acc_norm"], "perplexity": round(found[0]["perplexity"], 4)}
    float_s = columns["float32 original"]["median_s"]
    result = {"columns": columns, "hellaswag": args.hellaswag, "ppl_windows": args.ppl_windows, "rounds": args.rounds,
              "widen_rows": {"int8": saved["WIDEN_ROWS"], "int4": packed.INT4_WIDEN_ROWS},
              "int4_widens_here": saved["INT4_WIDENS"], "native_bfloat16": packed.NATIVE_BF16,
              "bits": {bits: {"widened_over_kernel_speedup": round(columns[f"{bits} kernel"]["median_s"]
                                                                   / columns[f"{bits} widened"]["median_s"], 3),
                              "kernel_over_float_time": round(columns[f"{bits} kernel"]["median_s"] / float_s, 3),
                              "widened_over_float_time": round(columns[f"{bits} widened"]["median_s"] / float_s, 3),
                              "perplexity_relative_difference": abs(columns[f"{bits} kernel"]["perplexity"]
                                                                    / columns[f"{bits} widened"]["perplexity"] - 1)}
                       for bits in ("int8", "int4")},
              "peak_gflops": {"float32": round(peak_gflops(torch.float32), 1),
                              **({"bfloat16": round(peak_gflops(torch.bfloat16), 1)} if packed.NATIVE_BF16 else {})},
              "threads": torch.get_num_threads()}
    path = write_result(args.name, result,
                        model="SmolLM2-135M-Instruct (embedded): int8, int4 (group 32), each with the int8 embedding",
                        how=f"hellaswag's first {args.hellaswag} (fast scorer, batch {BATCH_SIZE}) then WikiText-2 "
                            f"test perplexity over {args.ppl_windows} × 512 tokens; the routes in turns, "
                            f"{args.rounds} rounds; medians")
    print(path.read_text())


if __name__ == "__main__":
    main()
