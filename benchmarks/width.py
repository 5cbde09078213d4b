"""Width against depth at the same size on the default model: perplexity, decode speed, hellaswag, time to prune.

    .venv/bin/python benchmarks/width.py [--ratio 0.8] [--ppl_windows 64] [--ppl_len 128] [--hellaswag 200]
                                         [--criteria wanda-sp,llm-pruner]

The width side is ``prune.shrink_width`` at ``--ratio`` of the parameters, once per criterion (Wanda-sp, and
LLM-Pruner's Taylor criterion); the depth side removes
``prune.width.shrink.matching_depth_layers`` whole layers, the best contiguous block of angular distance,
both on the default calibration (WikiText-2 validation). Everything is measured through the
Backend the app uses, the three models side by side in one run: WikiText-2 test perplexity on
the first windows of 128 tokens, decode speed at batch 1 and 8 after a 128-token prompt (the
models take turns run by run) with the FLOPs and parameter ideals, and hellaswag acc_norm on the first N questions.
Results go to a fresh cache. Writes ``benchmarks/results/width.json``.
"""

from __future__ import annotations

import argparse
import time

from fresh_cache import in_fresh_cache  # benchmarks/fresh_cache.py, beside this script
from record import write_result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ratio", type=float, default=0.8, help="fraction of the parameters kept")
    parser.add_argument("--ppl_windows", type=int, default=64, help="WikiText-2 test windows (0: skip)")
    parser.add_argument("--ppl_len", type=int, default=128, help="tokens per perplexity window")
    parser.add_argument("--criteria", type=lambda text: tuple(text.split(",")), default=("wanda-sp", "llm-pruner"),
                        help="comma list of width criteria, each a column")
    parser.add_argument("--hellaswag", type=int, default=200, help="hellaswag questions (0: skip)")
    parser.add_argument("--repeats", type=int, default=5, help="decode runs per model")
    parser.add_argument("--batch_sizes", type=lambda text: tuple(int(b) for b in text.split(",")), default=(1, 8),
                        help="comma list of batch sizes for the decode speed")
    parser.add_argument("--data_dir", default=None, help="benchmark data folder (default: as the app finds it)")
    args = parser.parse_args()
    in_fresh_cache(lambda: run(args))


def run(args) -> None:
    from evaluation.quality import lm_eval_adapter
    from evaluation.serving.backend import Backend
    from evaluation.measure.measurement import ORIGINAL
    from evaluation.core.pool import ModelSpec
    from prune.core.recipe import Recipe
    from prune.width.step import WidthPrune
    from prune.width.shrink import matching_depth_layers

    backend = Backend(data_dir=args.data_dir)
    spec = ModelSpec()
    info = backend.models.load(spec)
    base = backend.models.model(spec)
    cal = backend.models.default_calibration
    n = matching_depth_layers(info.size, args.ratio)

    started = time.perf_counter()
    scores = backend.analysis.score(spec, "angular", calibration=cal, use_cache=False)
    start, end = scores.best_block(n)
    depth = Recipe.block(info.num_layers, start, end, origin="angular distance, best block")
    backend.models.model(spec, depth)
    depth_s = time.perf_counter() - started
    print(f"{info.name}: {info.num_layers} layers, {info.num_params:,} parameters; calibration {cal.source}, "
          f"{cal.n_samples} × {cal.seq_len} tokens; threads {__import__('torch').get_num_threads()}")
    variants, width_s = {"depth": depth}, {}
    for criterion in args.criteria:
        width = Recipe((WidthPrune.of(args.ratio, cal, criterion),))
        started = time.perf_counter()
        narrow = backend.models.model(spec, width)
        width_s[criterion] = time.perf_counter() - started
        variants[criterion] = width
        config = narrow.config
        print(f"width by {criterion}: {config.num_attention_heads} heads ({config.num_key_value_heads} KV), "
              f"MLP {config.intermediate_size} of {base.config.intermediate_size} channels per layer")
    labels = {ORIGINAL: "original", "depth": f"depth {depth.short()}",
              **{c: variants[c].short() for c in args.criteria}}

    rows: dict[str, dict[str, str]] = {}
    params = {ORIGINAL: info.num_params, **{k: info.num_params - info.removed_params(r) for k, r in variants.items()}}
    rows["parameters"] = {k: f"{v / 1e6:.1f} M ({100 * v / info.num_params:.1f} %)" for k, v in params.items()}
    rows["time to prune (s)"] = {ORIGINAL: "—", "depth": f"{depth_s:.1f} (angular scores)",
                                 **{c: f"{t:.1f} (scores + rebuild)" for c, t in width_s.items()}}

    # the backend compares at most two models with the original: the rest in further runs beside it
    pairs = [dict(list(variants.items())[i:i + 2]) for i in range(0, len(variants), 2)]
    if args.ppl_windows:
        ppl = [m for pair in pairs for m in backend.measure.perplexity(spec, pair, seq_lens=(args.ppl_len,),
                                                                       bos=(False,),
                                                               max_windows=args.ppl_windows)]
        windows = ppl[0].details["windows"]
        rows[f"WikiText-2 ppl ({windows} × {args.ppl_len} tokens)"] = {m.model: f"{m.value:.2f}" for m in ppl}

    for batch in args.batch_sizes:
        row, ideal = {}, {}
        for pair in pairs:  # each pair against the original timed in the same run, taking turns
            speed = backend.measure.speed(spec, pair, batch_sizes=(batch,), prompt_len=128, new_tokens=(32,),
                                  repeats=args.repeats)
            decode = {m.model: m for m in speed if m.name.startswith(f"decode latency per token (batch {batch},")}
            rate = {k: batch * 1000 / m.value for k, m in decode.items()}  # tokens/s from the median ms per step
            row.update({k: f"{v:.1f} (×{v / rate[ORIGINAL]:.2f}; ±{decode[k].spread:.0f})" for k, v in rate.items()
                        if k not in row})
            ideal.update({k: "×1 / ×1" if k == ORIGINAL else
                          f"×{m.details['ideal_speedup']:.2f} / ×{info.num_params / params[k]:.2f}"
                          for k, m in decode.items()})
        rows[f"decode tokens/s (batch {batch}; ms/step IQR)"] = row
    rows["ideal speedup: FLOPs / parameters"] = ideal

    if args.hellaswag:
        request = lm_eval_adapter.check_request(["hellaswag"], limit=args.hellaswag, data_dir=backend.models.data_dir)
        started = time.perf_counter()
        found = [m for pair in pairs for m in backend.measure.benchmarks(spec, pair, request, batch_size=16)]
        acc = {m.model: m for m in found if m.name == "hellaswag acc_norm"}
        rows[f"hellaswag acc_norm ({args.hellaswag})"] = {k: f"{m.value:.1f} ± {m.spread:.1f}" for k, m in acc.items()}
        print(f"hellaswag: {time.perf_counter() - started:.0f} s for the {len(variants) + 1} models")

    columns = [ORIGINAL, "depth", *args.criteria]
    print()
    print("| | " + " | ".join(labels[c] for c in columns) + " |")
    print("|---|" + "---|" * len(columns))
    for name, row in rows.items():
        print(f"| {name} | " + " | ".join(row.get(c, "") for c in columns) + " |")
    write_result("width", {"ratio": args.ratio, "columns": {c: labels[c] for c in columns}, "rows": rows,
                           "parameters": params, "prune_s": {"depth": depth_s, **width_s}},
                 model=f"{info.name}, {info.num_layers} layers",
                 how=f"the app's Backend, in a fresh cache; WikiText-2 test perplexity, first {args.ppl_windows} "
                     f"windows of {args.ppl_len} tokens; decode after a 128-token prompt, 32 new tokens, models "
                     f"taking turns, median of {args.repeats}; hellaswag acc_norm on the first {args.hellaswag}")


if __name__ == "__main__":
    main()
