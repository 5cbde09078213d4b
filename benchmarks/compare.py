"""Original vs a cut on the default model: WikiText-2 perplexity, speed (measured vs ideal), memory.

    .venv/bin/python benchmarks/compare.py [--start 20 --end 26] [--ppl_windows 8] [--batch_sizes 1,8]

Everything goes through the same Backend the app and the CLI use, and prints the same tables. Writes
``benchmarks/results/compare.json``.
"""

from __future__ import annotations

import argparse

from evaluation.measure.measurement import to_markdown
from evaluation.serving.backend import Backend
from evaluation.core.pool import ModelSpec
from prune.core.recipe import Recipe
from record import write_result  # beside this script


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--start", type=int, default=20, help="first layer cut (0-based)")
    parser.add_argument("--end", type=int, default=26, help="first layer kept after the cut (end exclusive)")
    parser.add_argument("--ppl_windows", type=int, default=8,
                        help="WikiText-2 windows per length (0 = all: slow on CPU)")
    parser.add_argument("--batch_sizes", default="1,8", help="comma list of batch sizes for the speed run")
    parser.add_argument("--new_tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    backend, spec = Backend(), ModelSpec()  # the embedded default model
    info = backend.models.load(spec)
    compared = {"cut": Recipe.block(info.num_layers, args.start, args.end)}  # beside the original in every table
    print(f"{info.name}, {info.num_layers} layers; cut {info.describe_cut(compared['cut'])}")
    ppl = backend.measure.perplexity(spec, compared, seq_lens=(128, 2048), bos=(False, True),
                             max_windows=args.ppl_windows or None)
    print(to_markdown(ppl))
    speed = backend.measure.speed(spec, compared, batch_sizes=tuple(int(b) for b in args.batch_sizes.split(",")),
                          new_tokens=(args.new_tokens,), repeats=args.repeats)
    print(to_markdown(speed))
    memory = backend.measure.memory(spec, compared)
    print(to_markdown(memory))
    write_result("compare", {"cut": [args.start, args.end], "perplexity": [m.to_dict() for m in ppl],
                             "speed": [m.to_dict() for m in speed], "memory": [m.to_dict() for m in memory]},
                 model=f"{info.name}, {info.num_layers} layers",
                 how=f"the app's Backend; perplexity: WikiText-2, {args.ppl_windows or 'all'} windows per length; "
                     f"speed: batch {args.batch_sizes}, {args.new_tokens} new tokens, {args.repeats} repeats")


if __name__ == "__main__":
    main()
