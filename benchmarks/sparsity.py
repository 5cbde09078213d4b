"""Seed 001's sparsity table on the default model: WikiText-2 perplexity of dense, magnitude, Wanda and
SparseGPT at 50 % unstructured and at 2:4, the time each takes to prune, and what zeros stored
densely do to decode speed.

    .venv/bin/python -m benchmarks.sparsity [--windows 16] [--seq-len 512]

Perplexity: the first ``--windows`` non-overlapping windows of ``--seq-len`` tokens of the raw
WikiText-2 test split (evaluation/perplexity.py, no BOS), the same windows for every model; the
papers read the whole split in 2048-token windows, which takes about 7 minutes per model on 2
busy CPU cores, so the default reads 16 × 512 tokens.
Calibration: LayerCut's default, WikiText-2 validation, 32 windows × 128 tokens
(the papers: 128 × 2048 tokens of C4). Speed: evaluation/speed.py, the dense model and a
dense-with-zeros one taking turns run by run; ratio = dense latency / sparse latency. Writes
``benchmarks/results/sparsity.json``.
"""

from __future__ import annotations

import torch

from benchmarks import harness
from benchmarks.record import write_result


def main() -> None:
    parser = harness.parser(__doc__)
    parser.add_argument("--windows", type=int, default=16, help="perplexity windows per model")
    parser.add_argument("--seq-len", type=int, default=512, help="tokens per perplexity window")
    parser.add_argument("--repeats", type=int, default=5, help="speed runs per model and batch size")
    args = parser.parse_args()

    import prune
    from evaluation.quality import perplexity
    from evaluation.measure import speed
    from prune.core.paths import default_data_dir
    from prune.core.calibration import default_calibration
    from prune.sparsity.masks import zero_fraction

    data_dir = default_data_dir()
    if data_dir is None:
        raise SystemExit("No benchmark data folder: set LAYERCUT_DATA_DIR.")
    model, tokenizer = prune.load_model()
    calibration = default_calibration(data_dir)
    ids = perplexity.token_ids(tokenizer, perplexity.wikitext2_rows(data_dir))
    print(f"torch threads: {torch.get_num_threads()}; calibration: {calibration.source}, "
          f"{calibration.n_samples} × {calibration.seq_len} tokens; perplexity: {args.windows} windows × "
          f"{args.seq_len} tokens of WikiText-2 test ({len(ids):,} tokens in all)")

    def ppl(m, label):
        found = perplexity.measure_perplexity(m, tokenizer, ids, label=label, seq_lens=(args.seq_len,), bos=(False,),
                                              max_windows=args.windows)[0]
        return found.value, found.details["windows"]

    rows = [("dense", "—", 0.0, zero_fraction(model), *ppl(model, "dense"))]
    print(f"  {rows[-1]}", flush=True)
    sparse_for_speed = None
    for pattern in ("unstructured", "2:4"):
        for method in prune.sparsity.masks.METHODS:
            with harness.Clock() as clock:
                sparse = prune.sparsify(model, tokenizer, method, 0.5 if pattern == "unstructured" else None,
                                        pattern=pattern, calibration=calibration)
            rows.append((method, "50 % unstructured" if pattern == "unstructured" else pattern, clock.wall,
                         zero_fraction(sparse), *ppl(sparse, method)))
            print(f"  {rows[-1]}", flush=True)
            if method == "wanda" and pattern == "unstructured":
                sparse_for_speed = sparse
            del sparse

    print("\n| method | sparsity | prune time (s) | zero weights in layers | WikiText-2 perplexity |")
    print("|---|---|---:|---:|---:|")
    for method, what, seconds, zeros, value, windows in rows:
        print(f"| {method} | {what} | {seconds:.1f} | {100 * zeros:.1f} % | {value:.2f} |")
    print(f"\n(perplexity over {rows[0][5]} windows × {args.seq_len} tokens)")

    found = speed.measure_speed({"dense": model, "dense with zeros": sparse_for_speed}, batch_sizes=(1, 8),
                                prompt_len=128, new_tokens=(32,), repeats=args.repeats)
    print("\nDecode latency per token, dense against Wanda 50 % stored densely (median of "
          f"{args.repeats} alternating runs, IQR):")
    print("| batch | dense (ms) | dense with zeros (ms) | speed ratio (dense / zeros) |")
    print("|---:|---:|---:|---:|")
    decode = []
    for batch in (1, 8):
        pair = {m.model: m for m in found if m.name.startswith(speed.DECODE) and m.details["batch"] == batch}
        dense, zeros = pair["dense"], pair["dense with zeros"]
        print(f"| {batch} | {dense.value:.1f} ± {dense.spread:.1f} | {zeros.value:.1f} ± {zeros.spread:.1f} "
              f"| {dense.value / zeros.value:.2f}× |")
        decode.append({"batch": batch, "dense_ms": dense.value, "dense_iqr_ms": dense.spread,
                       "zeros_ms": zeros.value, "zeros_iqr_ms": zeros.spread, "ratio": dense.value / zeros.value})
    write_result("sparsity", {
        "rows": [{"method": method, "sparsity": what, "prune_s": round(seconds, 1), "zero_fraction": zeros,
                  "perplexity": value, "windows": windows} for method, what, seconds, zeros, value, windows in rows],
        "decode": decode, "threads": torch.get_num_threads()},
        model="SmolLM2-135M-Instruct (embedded)",
        how=f"perplexity: the first {args.windows} windows of {args.seq_len} tokens of WikiText-2 test; calibration "
            f"{calibration.source}, {calibration.n_samples} × {calibration.seq_len} tokens; decode: dense and Wanda "
            f"50 % stored densely taking turns, median of {args.repeats}")


if __name__ == "__main__":
    main()
