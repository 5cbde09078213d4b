"""Default-model figures: load times, and per method its time and the N layers it cuts under both rules.

    .venv/bin/python benchmarks/analysis.py [--block 6] [--data_dir ../shared/benchdata]

The first load runs against an empty cache folder (GGUF → safetensors), the second reads the
cache. Each method runs with a fresh context (its own residual stream), no analysis cache, on
the default calibration (WikiText-2 validation from the data folder, else the built-in text).
"paper" is the method's paper's rule (the N least important layers, or a block for angular);
"block" the best contiguous block. Writes ``benchmarks/results/analysis.json``.
"""

from __future__ import annotations

import argparse
import time

from fresh_cache import in_fresh_cache  # benchmarks/fresh_cache.py, beside this script
from record import write_result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--block", type=int, default=6, help="how many layers to cut")
    parser.add_argument("--data_dir", default=None, help="benchmark data folder (default: as the app finds it)")
    args = parser.parse_args()
    in_fresh_cache(lambda: run(args.block, args.data_dir))


def run(block: int, data_dir: str | None) -> None:
    import prune
    from prune.core.paths import default_data_dir
    from prune.core.calibration import default_calibration
    from prune.depth.selection import chosen_layers

    calibration = default_calibration(data_dir or default_data_dir())
    started = time.perf_counter()
    prune.load_model()
    first = time.perf_counter() - started
    started = time.perf_counter()
    model, tokenizer = prune.load_model()
    second = time.perf_counter() - started
    print(f"load: first (dequantize GGUF + cache) {first:.1f} s, second (from cache) {second:.1f} s")
    print(f"calibration: {calibration.source}, {calibration.n_samples} × {calibration.seq_len} tokens")
    print(f"{'method':<20} {'time (s)':>9}  {block} layers: paper's rule | best block")
    methods = {}
    for name in prune.METHODS:
        result = prune.score(model, tokenizer, name, calibration=calibration, use_cache=False)
        cuts = "  cuts " + ", ".join(f"{k}: {v}" for k, v in result.cuts.items()) if result.cuts else ""
        print(f"{name:<20} {result.elapsed_s:>9.1f}  {chosen_layers(result, block, 'paper')} | "
              f"{chosen_layers(result, block, 'block')}{'' if result.block_exact else ' (sum of layers)'}{cuts}")
        methods[name] = {"time_s": round(result.elapsed_s, 2), "paper": chosen_layers(result, block, "paper"),
                         "block": chosen_layers(result, block, "block"), "block_exact": result.block_exact,
                         "cuts": result.cuts}
    write_result("analysis", {"load_first_s": round(first, 1), "load_cached_s": round(second, 1), "block": block,
                              "calibration": f"{calibration.source}, {calibration.n_samples} × {calibration.seq_len} "
                                             "tokens", "methods": methods},
                 model="SmolLM2-135M-Instruct (embedded)", how="each method with a fresh context and no analysis "
                 "cache; paper: the method's paper's rule, block: the best contiguous block")


if __name__ == "__main__":
    main()
