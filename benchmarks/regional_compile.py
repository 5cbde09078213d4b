"""Compile time of the compiled decode mode against the depth: the whole model in one graph, or each layer (regional).

    python -m benchmarks.regional_compile [--layers 8,16,32] [--hidden 2048] [--intermediate 8192] [--heads 32]
                                          [--kv_heads 8] [--dtype bfloat16] [--methods whole,regional]

A random Llama of the given width (default: Llama 3.2 1B's, a 32,000-token vocabulary) at each depth, built from its
transformers config (no download). Each point runs in a process of its own with an empty inductor cache, so no point
reads kernels an earlier one compiled: the compile time is the wall time of the first decode run (an eager prefill
of 16 tokens, then ``evaluation.measure.compiled.COMPILE_STEPS`` compiled steps), as the speed step reports it; the
decode ms per token of a second run come with it. Issue 53 asks the regional compile to stay flat (±20 %) from 8 to
32 layers on a CPU. Written to ``benchmarks/results/regional_compile.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch

from benchmarks import REPO, harness
from benchmarks.record import write_result

PROMPT, NEW_TOKENS = 16, 8
METHODS = ("whole", "regional")


def point(method: str, layers: int, shape: dict, dtype: str) -> dict:
    """One method at one depth, in this process: compile seconds, then decode ms per token."""
    from transformers import AutoModelForCausalLM, LlamaConfig, StaticCache

    from evaluation.measure import compiled

    config = LlamaConfig(vocab_size=32000, max_position_embeddings=256, num_hidden_layers=layers,
                         hidden_size=shape["hidden"], intermediate_size=shape["intermediate"],
                         num_attention_heads=shape["heads"], num_key_value_heads=shape["kv_heads"])
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype)).eval()
    ids = torch.arange(PROMPT)[None] % config.vocab_size  # [1, T]
    cache = StaticCache(config=config, max_cache_len=PROMPT + NEW_TOKENS)
    how = compiled.regionally_compiled if method == "regional" else compiled.wholly_compiled
    with harness.Clock() as clock:
        compiled.generate(model, ids, compiled.COMPILE_STEPS + 1, cache, how)
    _, decode_ms, _ = compiled.generate(model, ids, NEW_TOKENS, cache, how)
    return {"method": method, "layers": layers, "compile_s": clock.wall, "decode_ms": decode_ms / (NEW_TOKENS - 1)}


def in_own_process(method: str, layers: int, args) -> dict:
    """:func:`point` in a new Python with its own empty inductor cache; a failure or a time-out is said in the row."""
    command = [sys.executable, "-m", "benchmarks.regional_compile", "--point", method, "--layers", str(layers),
               *(f"--{key}={getattr(args, key)}" for key in ("hidden", "intermediate", "heads", "kv_heads", "dtype"))]
    with tempfile.TemporaryDirectory(prefix="layercut-inductor-") as cache:
        try:
            done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=args.timeout,
                                  env={**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache})
        except subprocess.TimeoutExpired:
            return {"method": method, "layers": layers, "error": f"stopped at the {args.timeout} s limit"}
    lines = done.stdout.strip().splitlines()
    if done.returncode or not lines:
        reason = (done.stderr.strip().splitlines() or ["no output"])[-1][:200]
        return {"method": method, "layers": layers, "error": reason}
    return json.loads(lines[-1])


def flatness(rows: list[dict], method: str) -> float | None:
    """The deepest point's compile time over the shallowest's, for ``method`` (1.0: flat)."""
    found = sorted((r["layers"], r["compile_s"]) for r in rows if r["method"] == method and "compile_s" in r)
    return found[-1][1] / found[0][1] if len(found) > 1 else None


def main() -> None:
    parser = harness.parser(__doc__)
    parser.add_argument("--layers", default="8,16,32", help="depths, comma-separated")
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--intermediate", type=int, default=8192)
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--kv_heads", type=int, default=8)
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
    parser.add_argument("--methods", default=",".join(METHODS), help="whole, regional or both, comma-separated")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds one point may take")
    parser.add_argument("--point", choices=METHODS, help=argparse.SUPPRESS)  # a child's one point
    args = parser.parse_args()
    depths = [int(n) for n in args.layers.split(",")]
    shape = {key: getattr(args, key) for key in ("hidden", "intermediate", "heads", "kv_heads")}
    if args.point:  # a child process: one point, printed as JSON on the last line
        print(json.dumps(point(args.point, depths[0], shape, args.dtype)))
        return
    methods = [m for m in args.methods.split(",") if m]
    if set(methods) - set(METHODS):
        parser.error(f"--methods takes {', '.join(METHODS)}")
    rows = []
    for method in methods:
        for layers in depths:
            rows.append(in_own_process(method, layers, args))
            print(rows[-1], flush=True)
    figures = {"shape": {**shape, "dtype": args.dtype, "vocab": 32000}, "rows": rows,
               "deepest_over_shallowest": {m: flatness(rows, m) for m in methods}}
    print(f"written to {write_result('regional_compile', figures, how=HOW)}")


HOW = (f"each point in its own process with an empty inductor cache; compile: the wall time of the first run (a "
       f"{PROMPT}-token eager prefill, then the compiling decode steps); decode: ms per token of the second run "
       f"({NEW_TOKENS} tokens)")

if __name__ == "__main__":
    main()
