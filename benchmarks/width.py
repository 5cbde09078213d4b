"""Width against depth at the same size on the default model: perplexity, decode speed, hellaswag, time to prune.

    .venv/bin/python -m benchmarks.width [--ratio 0.8] [--ppl_windows 64] [--ppl_len 128] [--hellaswag 200]
                                         [--criteria wanda-sp,llm-pruner]

The width side is ``prune.shrink_width`` at ``--ratio`` of the parameters, once per criterion (Wanda-sp, and
LLM-Pruner's Taylor criterion); the depth side removes
``prune.width.shrink.matching_depth_layers`` whole layers, the best contiguous block of angular distance,
both on the default calibration (WikiText-2 validation). Everything is measured through the
Backend the app uses, the three models side by side in one run: WikiText-2 test perplexity on
the first windows of 128 tokens (``--ppl_windows 0``: none), decode speed at batch 1 and 8 after a 128-token prompt (the
models take turns run by run) with the FLOPs and parameter ideals, and hellaswag acc_norm on the first N questions.
Results go to a fresh cache. Writes ``benchmarks/results/width.json``.
"""

from __future__ import annotations

from benchmarks import harness
from benchmarks.record import write_result
from benchmarks.repair_rows import print_table


def main() -> None:
    parser = harness.parser(__doc__, "ppl_windows", "hellaswag", "data_dir")
    parser.add_argument("--ratio", type=float, default=0.8, help="fraction of the parameters kept")
    parser.add_argument("--ppl_len", type=int, default=128, help="tokens per perplexity window")
    parser.add_argument("--criteria", type=lambda text: tuple(text.split(",")), default=("wanda-sp", "llm-pruner"),
                        help="comma list of width criteria, each a column")
    parser.add_argument("--repeats", type=int, default=5, help="decode runs per model")
    parser.add_argument("--batch_sizes", type=lambda text: tuple(int(b) for b in text.split(",")), default=(1, 8),
                        help="comma list of batch sizes for the decode speed")
    args = parser.parse_args()
    harness.in_fresh_cache(lambda: run(args))


def run(args) -> None:
    from evaluation.measure.measurement import ORIGINAL

    loaded = harness.default_model(args.data_dir)
    backend, spec, info = loaded
    variants, seconds = pruned(loaded, args)
    labels = {ORIGINAL: "original", "depth": f"depth {variants['depth'].short()}",
              **{c: variants[c].short() for c in args.criteria}}

    rows: dict[str, dict[str, str]] = {}
    params = {ORIGINAL: info.num_params, **{k: info.num_params - info.removed_params(r) for k, r in variants.items()}}
    rows["parameters"] = {k: f"{v / 1e6:.1f} M ({100 * v / info.num_params:.1f} %)" for k, v in params.items()}
    rows["time to prune (s)"] = {ORIGINAL: "—", "depth": f"{seconds['depth']:.1f} (angular scores)",
                                 **{c: f"{t:.1f} (scores + rebuild)" for c, t in seconds.items() if c != "depth"}}

    pairs = harness.pairs(variants)
    if args.ppl_windows:
        ppl = [m for pair in pairs for m in backend.measure.perplexity(spec, pair, seq_lens=(args.ppl_len,),
                                                                       bos=(False,), max_windows=args.ppl_windows)]
        windows = ppl[0].details["windows"]
        rows[f"WikiText-2 ppl ({windows} × {args.ppl_len} tokens)"] = {m.model: f"{m.value:.2f}" for m in ppl}
    rows.update(decode_rows(loaded, pairs, params, args))
    if args.hellaswag:
        rows.update(hellaswag_row(loaded, pairs, args.hellaswag))

    columns = [ORIGINAL, "depth", *args.criteria]
    print_table(rows, columns, labels, missing="")
    write_result("width", {"ratio": args.ratio, "columns": {c: labels[c] for c in columns}, "rows": rows,
                           "parameters": params, "prune_s": seconds},
                 model=f"{info.name}, {info.num_layers} layers",
                 how=f"the app's Backend, in a fresh cache; WikiText-2 test perplexity, first {args.ppl_windows} "
                     f"windows of {args.ppl_len} tokens; decode after a 128-token prompt, 32 new tokens, models "
                     f"taking turns, median of {args.repeats}; hellaswag acc_norm on the first {args.hellaswag}")


def pruned(loaded: harness.Loaded, args) -> tuple[dict, dict]:
    """The depth cut of the same size and one width variant per criterion, built: their recipes, and the seconds
    each took to prune (its scores included)."""
    import torch

    from prune.core.recipe import Recipe
    from prune.width.shrink import matching_depth_layers
    from prune.width.step import WidthPrune

    backend, spec, info = loaded
    base = backend.models.model(spec)
    cal = backend.models.default_calibration
    n = matching_depth_layers(info.size, args.ratio)
    with harness.Clock() as depth_clock:
        scores = backend.analysis.score(spec, "angular", calibration=cal, use_cache=False)
        start, end = scores.best_block(n)
        depth = Recipe.block(info.num_layers, start, end, origin="angular distance, best block")
        backend.models.model(spec, depth)
    print(f"{info.name}: {info.num_layers} layers, {info.num_params:,} parameters; calibration {cal.source}, "
          f"{cal.n_samples} × {cal.seq_len} tokens; threads {torch.get_num_threads()}")
    variants, seconds = {"depth": depth}, {"depth": depth_clock.wall}
    for criterion in args.criteria:
        width = Recipe((WidthPrune.of(args.ratio, cal, criterion),))
        with harness.Clock() as clock:
            narrow = backend.models.model(spec, width)
        seconds[criterion] = clock.wall
        variants[criterion] = width
        config = narrow.config
        print(f"width by {criterion}: {config.num_attention_heads} heads ({config.num_key_value_heads} KV), "
              f"MLP {config.intermediate_size} of {base.config.intermediate_size} channels per layer")
    return variants, seconds


def decode_rows(loaded: harness.Loaded, pairs: list[dict], params: dict, args) -> dict:
    """Decode tokens/s per batch size, each pair timed against the original in the same run (taking turns), and
    the FLOPs and parameter ideals."""
    from evaluation.measure.measurement import ORIGINAL

    backend, spec, info = loaded
    rows = {}
    for batch in args.batch_sizes:
        row, ideal = {}, {}
        for pair in pairs:
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
    return rows


def hellaswag_row(loaded: harness.Loaded, pairs: list[dict], questions: int) -> dict:
    """hellaswag acc_norm ± stderr of every model on the first ``questions``."""
    from evaluation.quality import lm_eval_adapter

    backend, spec, _info = loaded
    request = lm_eval_adapter.check_request(["hellaswag"], limit=questions, data_dir=backend.models.data_dir)
    with harness.Clock() as clock:
        found = [m for pair in pairs for m in backend.measure.benchmarks(spec, pair, request, batch_size=16)]
    acc = {m.model: m for m in found if m.name == "hellaswag acc_norm"}
    print(f"hellaswag: {clock.wall:.0f} s for the {sum(len(pair) for pair in pairs) + 1} models")
    return {f"hellaswag acc_norm ({questions})": {k: f"{m.value:.1f} ± {m.spread:.1f}" for k, m in acc.items()}}


if __name__ == "__main__":
    main()
