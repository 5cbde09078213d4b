"""Default-model figures for the foundation: load times, and time and best block per method.

    .venv/bin/python benchmarks/analysis.py [--block 6]

The first load runs against an empty cache folder (GGUF → safetensors), the second reads the
cache. Each method runs with a fresh context (its own residual stream), no analysis cache.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--block", type=int, default=6, help="block size whose best start is reported")
    args = parser.parse_args()
    cache = tempfile.mkdtemp(prefix="layercut-bench-")
    os.environ["LAYERCUT_CACHE"] = cache
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        run(args.block)
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def run(block: int) -> None:
    import prune

    started = time.perf_counter()
    prune.load_model()
    first = time.perf_counter() - started
    started = time.perf_counter()
    model, tokenizer = prune.load_model()
    second = time.perf_counter() - started
    print(f"load: first (dequantize GGUF + cache) {first:.1f} s, second (from cache) {second:.1f} s")
    print(f"{'method':<20} {'time (s)':>9}  best {block}-layer block [start, end)  most removable layers")
    for name in prune.METHODS:
        result = prune.score(model, tokenizer, name, use_cache=False)
        start, end = result.best_block(block)
        cuts = "  cuts " + ", ".join(f"{k}: {v}" for k, v in result.cuts.items()) if result.cuts else ""
        print(f"{name:<20} {result.elapsed_s:>9.1f}  [{start}, {end}) = layers {start}…{end - 1}"
              f"{'' if result.block_exact else ' (sum of layers)'}  {result.best_layers(block)}{cuts}")


if __name__ == "__main__":
    main()
