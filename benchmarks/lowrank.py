"""Seed 003's comparison on the default model: feature- against weight-space low-rank decomposition at 80 % and
60 % of the parameters (WikiText-2 perplexity, time to decompose), and what factored projections do to speed,
measured against the FLOPs ideal.

    .venv/bin/python -m benchmarks.lowrank [--windows 16] [--seq-len 512] [--ratios 0.8,0.6]
        [--parts quality,speed,search] [--search-layers 2] [--search-on wikitext2|TASK] [--search-limit 40]

Perplexity: the first ``--windows`` non-overlapping windows of ``--seq-len`` tokens of the raw WikiText-2 test
split (evaluation/perplexity.py, no BOS), the same windows for every model. Calibration (feature space):
LayerCut's default, WikiText-2 validation, 32 windows × 128 tokens (the authors: one batch of 512 task texts
padded to 128 tokens). Every linear map of every layer is decomposed at the same fraction of its break-even rank
d·k/(d+k) (prune.lowrank.decomposition's uniform rule). Speed: evaluation/speed.py, the dense and the factored
models taking turns run by run, decode latency per token after a 128-token prompt, beside the ideal speedup (the
ratio of matmul FLOPs per token, LM head and attention included). Then one matrix alone (a SmolLM2 MLP projection,
1536 × 576), dense against factored at ranks around break-even: the time ratio against d·k / (r·(d + k)).
Last, the surgical rank search (prune.lowrank.rank_search) over the last ``--search-layers`` layers, as the app runs it
(evaluation.sweeps.search_splits): ``--search-on wikitext2`` (test windows of 256 tokens; the authors' bound,
perplexity ≤ original · (1 + tolerance %)^n after n projections) or a task's accuracy (at least the original's
minus ``--tolerance`` points), the first 20 % of ``--search-limit`` windows or shuffled documents the search
split, the rest the test split. Writes ``benchmarks/results/lowrank.json``.
"""

from __future__ import annotations

import statistics
import time

import torch

from benchmarks import harness
from benchmarks.record import write_result


def main() -> None:
    parser = harness.parser(__doc__)
    parser.add_argument("--windows", type=int, default=16, help="perplexity windows per model")
    parser.add_argument("--seq-len", type=int, default=512, help="tokens per perplexity window")
    parser.add_argument("--ratios", default="0.8,0.6", help="comma list of parameter ratios")
    parser.add_argument("--repeats", type=int, default=5, help="speed runs per model and batch size")
    parser.add_argument("--search-layers", type=int, default=2, help="rank search over this many last layers (0: skip)")
    parser.add_argument("--search-on", default="wikitext2", help="wikitext2 (perplexity) or a task (accuracy)")
    parser.add_argument("--search-limit", type=int, default=40,
                        help="WikiText-2 windows of 256 tokens, or task documents, to split 20 %% / 80 %%")
    parser.add_argument("--tolerance", type=float, default=0.5,
                        help="%% perplexity growth per projection, or accuracy points below the original")
    parser.add_argument("--parts", default="quality,speed,search",
                        help="comma list: quality (perplexity, time), speed, search (rank search)")
    args = parser.parse_args()

    import prune
    from evaluation.quality import perplexity
    from evaluation.measure import speed
    from prune.core.paths import default_data_dir
    from prune.lowrank import decomposition as lowrank
    from prune.core.calibration import default_calibration

    data_dir = default_data_dir()
    if data_dir is None:
        raise SystemExit("No benchmark data folder: set LAYERCUT_DATA_DIR.")
    parts = set(args.parts.split(","))
    model, tokenizer = prune.load_model()
    calibration = default_calibration(data_dir)
    ids = perplexity.token_ids(tokenizer, perplexity.wikitext2_rows(data_dir))
    total = sum(p.numel() for p in model.parameters())
    print(f"torch threads: {torch.get_num_threads()}; {total:,} parameters; calibration: {calibration.source}, "
          f"{calibration.n_samples} × {calibration.seq_len} tokens; perplexity: {args.windows} windows × "
          f"{args.seq_len} tokens of WikiText-2 test", flush=True)

    ratios = [float(r) for r in args.ratios.split(",")]
    found = {"parameters": total, "threads": torch.get_num_threads()}
    if "quality" in parts:
        factored = quality(model, tokenizer, ids, calibration, ratios, args.windows, args.seq_len, total, found)
    else:  # speed alone: the factors' shapes are the same in both spaces, and weight space reads no data
        factored = {f"factored {100 * ratio:g}%": lowrank.decompose(model, None, space="weight", param_ratio=ratio)
                    for ratio in ratios} if "speed" in parts else {}
    if "speed" in parts:
        found["decode"] = decode_speed(model, factored, args.repeats, speed)
        found["one_matrix"] = matrix_speed()
    if "search" in parts and args.search_layers:
        found["rank_search"] = rank_search(model, tokenizer, data_dir, calibration, args.search_layers, args.search_on,
                                           args.search_limit, args.tolerance)
    write_result("lowrank", found, model=getattr(model, "layercut_name", "default model"),
                 how=f"perplexity: {args.windows} windows × {args.seq_len} tokens of WikiText-2 test; calibration "
                     f"{calibration.source}, {calibration.n_samples} × {calibration.seq_len} tokens; speed: models "
                     f"taking turns, median of {args.repeats}")


def quality(model, tokenizer, ids, calibration, ratios, windows: int, seq_len: int, total: int, found: dict) -> dict:
    """Perplexity and time to decompose of the dense model and both spaces at each ratio (into ``found``); the
    feature-space models."""
    from evaluation.quality import perplexity
    from prune.lowrank import decomposition as lowrank

    def ppl(m):
        return perplexity.measure_perplexity(m, tokenizer, ids, label="m", seq_lens=(seq_len,), bos=(False,),
                                             max_windows=windows)[0].value

    rows = [("dense", "—", total, 0.0, ppl(model))]
    print(f"  {rows[-1]}", flush=True)
    factored = {}
    for ratio in ratios:
        for space in ("weight", "feature"):
            with harness.Clock() as clock:
                derived = lowrank.decompose(model, tokenizer, space=space, param_ratio=ratio, calibration=calibration)
            rows.append((space, f"{100 * ratio:g} %", sum(p.numel() for p in derived.parameters()), clock.wall,
                         ppl(derived)))
            print(f"  {rows[-1]}", flush=True)
            if space == "feature":
                factored[f"feature {100 * ratio:g}%"] = derived
            del derived
    print("\n| space | asked | parameters | decompose time (s) | WikiText-2 perplexity |")
    print("|---|---:|---:|---:|---:|")
    for space, asked, params, seconds, value in rows:
        print(f"| {space} | {asked} | {params:,} ({100 * params / total:.1f} %) | {seconds:.1f} | {value:.2f} |")
    ranks = lowrank.ranks_of(next(iter(factored.values())))
    first = {path: rank for (layer, path), rank in ranks.items() if layer == 0}
    print(f"\nranks in every layer at {next(iter(factored))}: " + ", ".join(f"{p.rpartition('.')[2]} {r}"
                                                                        for p, r in first.items()))
    found["quality"] = [{"space": space, "asked": asked, "parameters": params, "decompose_s": round(seconds, 1),
                         "perplexity": round(value, 3)} for space, asked, params, seconds, value in rows]
    found["ranks_per_layer"] = {next(iter(factored)): first}
    return factored


def decode_speed(model, factored: dict, repeats: int, speed) -> list[dict]:
    """Decode latency per token of the dense and factored models side by side, with the FLOPs ideal."""
    found = speed.measure_speed({"dense": model, **factored}, batch_sizes=(1, 8), prompt_len=128, new_tokens=(32,),
                                repeats=repeats)
    print(f"\nDecode latency per token after a 128-token prompt (median of {repeats} alternating runs, IQR):")
    print("| batch | model | ms / token | measured speedup | FLOPs ideal speedup |")
    print("|---:|---|---:|---:|---:|")
    rows = []
    for batch in (1, 8):
        decode = {m.model: m for m in found if m.name.startswith(f"decode latency per token (batch {batch},")}
        dense = decode["dense"]
        print(f"| {batch} | dense | {dense.value:.1f} ± {dense.spread:.1f} | 1.00× | 1.00× |")
        rows.append({"batch": batch, "model": "dense", "ms_per_token": dense.value, "iqr_ms": dense.spread})
        for label, derived in factored.items():
            (ideal,) = speed.with_ideal(model, derived, [dense], [decode[label]])
            print(f"| {batch} | {label} | {ideal.value:.1f} ± {ideal.spread:.1f} | {dense.value / ideal.value:.2f}× "
                  f"| {ideal.details['ideal_speedup']:.2f}× |")
            rows.append({"batch": batch, "model": label, "ms_per_token": ideal.value, "iqr_ms": ideal.spread,
                         "speedup": dense.value / ideal.value, "ideal_speedup": ideal.details["ideal_speedup"]})
    return rows


def matrix_speed(outputs: int = 1536, inputs: int = 576, repeats: int = 200) -> list[dict]:
    """One [outputs, inputs] matrix against its two factors, at ranks around break-even d·k/(d + k)."""
    torch.manual_seed(0)
    weight = torch.randn(outputs, inputs)
    even = outputs * inputs / (outputs + inputs)
    print(f"\nOne {outputs} × {inputs} matrix (break-even rank {even:.0f}), median of {repeats} alternating runs:")
    print("| tokens | rank | rank / break-even | dense (µs) | factored (µs) | measured speedup | FLOPs ideal |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    rows = []
    for tokens in (1, 128):
        x = torch.randn(tokens, inputs)
        for share in (0.125, 0.25, 0.5, 0.75, 1.0, 1.25):
            rank = round(share * even)
            first, second = torch.randn(rank, inputs), torch.randn(outputs, rank)
            dense, split = [], []
            with torch.no_grad():
                for _ in range(repeats):
                    started = time.perf_counter()
                    torch.nn.functional.linear(x, weight)
                    dense.append(time.perf_counter() - started)
                    started = time.perf_counter()
                    torch.nn.functional.linear(torch.nn.functional.linear(x, first), second)
                    split.append(time.perf_counter() - started)
            d, f = statistics.median(dense) * 1e6, statistics.median(split) * 1e6
            print(f"| {tokens} | {rank} | {share:g} | {d:.1f} | {f:.1f} | {d / f:.2f}× | "
                  f"{outputs * inputs / (rank * (outputs + inputs)):.2f}× |")
            rows.append({"matrix": [outputs, inputs], "tokens": tokens, "rank": rank, "rank_over_break_even": share,
                         "dense_us": round(d, 2), "factored_us": round(f, 2),
                         "ideal_speedup": outputs * inputs / (rank * (outputs + inputs))})
    return rows


def rank_search(model, tokenizer, data_dir, calibration, layers: int, criterion: str, limit: int,
                tolerance: float) -> dict:
    """The authors' search over the last ``layers`` layers (evaluation.sweeps.search_splits' criterion, as the app's),
    reported on the disjoint test split."""
    from dataclasses import asdict

    from evaluation.sweeps.search_splits import criterion_splits, format_search
    from prune.core.architectures import decoder_layers
    from prune.lowrank.rank_search import surgical_search

    search, test, bound = criterion_splits(criterion, tolerance, tokenizer, data_dir, limit=limit)
    count = len(decoder_layers(model))
    with harness.Clock() as clock:
        result = surgical_search(model, tokenizer, search=search, test=test, calibration=calibration,
                                 tolerance=bound, layers=range(count - layers, count), test_each_layer=True,
                                 progress=lambda fraction, message: print(f"  {message}", flush=True))
    seconds = clock.wall
    print(f"\nSurgical rank search over layers {count - layers}–{count - 1} on {criterion} ({limit} windows or "
          f"documents, 20 % search / 80 % test; tolerance {tolerance:g}), {seconds:.0f} s:")
    print(format_search(result, criterion))
    return {"layers": [count - layers, count], "criterion": criterion, "limit": limit, "tolerance": tolerance,
            "seconds": round(seconds, 1), "params": list(result.params), "search": list(result.search),
            "test": list(result.test), "points": [asdict(point) for point in result.points],
            "ranks": {f"{layer} {path}": rank for (layer, path), rank in result.ranks.items()}}


if __name__ == "__main__":
    main()
