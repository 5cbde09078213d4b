"""GPTQ against round-to-nearest at identical bytes: the default model in int4 (groups of 32) and int8 (a scale per
row), each rounded to nearest and solved by GPTQ, and a 50 % SparseGPT model quantized to int4 both ways (SparseGPT's
joint mode: GPTQ keeps the zeros), side by side.

    .venv/bin/python -m benchmarks.gptq [--ppl_windows 64] [--hellaswag 200] [--cal_samples 32] [--cal_len 128]

GPTQ calibrates on WikiText-2 *validation* (``--cal_samples`` windows of ``--cal_len`` tokens, spread over the text);
perplexity is WikiText-2 *test*, the first ``--ppl_windows`` windows of 128 tokens (the issue's 64 × 128). The gap
recovered is (RTN − GPTQ) / (RTN − unquantized) in perplexity. Build times are each variant's, on this machine's
threads. Everything goes through the Backend the app uses, in a fresh cache. Writes ``benchmarks/results/gptq.json``.
"""

from __future__ import annotations

from benchmarks import harness
from benchmarks.record import write_result
from benchmarks.repair_rows import print_table


def main() -> None:
    parser = harness.parser(__doc__, "ppl_windows", "hellaswag", "data_dir")
    parser.add_argument("--cal_samples", type=int, default=32, help="GPTQ's calibration windows (the app's 32)")
    parser.add_argument("--cal_len", type=int, default=128, help="tokens per calibration window (the app's 128)")
    args = parser.parse_args()
    harness.in_fresh_cache(lambda: run(args))


def variants(calibration) -> dict:
    from prune.core.recipe import Recipe
    from prune.quantize.step import Quantize
    from prune.sparsity.step import Sparsify

    sparse = Sparsify.of("sparsegpt", 0.5, calibration=calibration)
    return {"int4 rtn": Recipe((Quantize.of(4),)),
            "int4 gptq": Recipe((Quantize.of(4, method="gptq", calibration=calibration),)),
            "int8 rtn": Recipe((Quantize.of(8),)),
            "int8 gptq": Recipe((Quantize.of(8, method="gptq", calibration=calibration),)),
            "sparsegpt50": Recipe((sparse,)),
            "sparsegpt50 + int4 rtn": Recipe((sparse, Quantize.of(4))),
            "sparsegpt50 + int4 gptq": Recipe((sparse, Quantize.of(4, method="gptq", calibration=calibration)))}


def recovered(original: float, rtn: float, gptq: float) -> float:
    """The share of round-to-nearest's perplexity gap that GPTQ closes, in %."""
    return 100 * (rtn - gptq) / (rtn - original)


def run(args) -> None:
    import torch

    from prune.core.storage import weight_bytes

    backend, spec, info = harness.default_model(args.data_dir)
    calibration = harness.wikitext2(backend, n_samples=args.cal_samples, seq_len=args.cal_len)
    chosen = variants(calibration)
    print(f"{info.name}: {info.num_layers} layers; threads {torch.get_num_threads()}", flush=True)
    built, size = {}, {}
    for name, recipe in chosen.items():
        with harness.Clock() as clock:
            model = backend.models.model(spec, recipe)
        built[name], size[name] = clock.wall, weight_bytes(model)
        print(f"{name} ({built[name]:.1f} s): {recipe.describe()}", flush=True)
    ppl, acc = harness.perplexity_and_hellaswag(backend, spec, chosen, "original", args.ppl_windows, args.hellaswag)
    gaps = {"int4": recovered(ppl["original"], ppl["int4 rtn"], ppl["int4 gptq"]),
            "int8": recovered(ppl["original"], ppl["int8 rtn"], ppl["int8 gptq"]),
            "sparsegpt50 + int4": recovered(ppl["sparsegpt50"], ppl["sparsegpt50 + int4 rtn"],
                                            ppl["sparsegpt50 + int4 gptq"])}
    names = ["original", *chosen]
    rows = {f"WikiText-2 test ppl ({args.ppl_windows} × 128)": {k: f"{ppl[k]:.2f}" for k in names},
            "weight MiB": {k: f"{size[k] / 2**20:.1f}" for k in chosen},
            "build time (s)": {k: f"{built[k]:.1f}" for k in chosen}}
    if acc:
        rows[f"hellaswag acc_norm ({args.hellaswag})"] = {k: f"{acc[k].value:.1f} ± {acc[k].spread:.1f}" for k in names}
    print_table(rows, names)
    for name, share in gaps.items():
        print(f"{name}: GPTQ closes {share:.0f} % of round-to-nearest's perplexity gap to the unquantized model")
    columns = {k: {"wikitext2_ppl": round(ppl[k], 3),
                   **({"weight_MiB": round(size[k] / 2**20, 1), "build_s": round(built[k], 1)} if k in chosen else {}),
                   **({"hellaswag_acc_norm": [acc[k].value, acc[k].spread]} if acc else {})} for k in names}
    write_result("gptq", {"columns": columns, "gap_recovered_pct": {k: round(v, 1) for k, v in gaps.items()},
                          "recipes": {k: r.describe() for k, r in chosen.items()}, "threads": torch.get_num_threads()},
                 model=f"{info.name}, {info.num_layers} layers",
                 how=f"GPTQ calibrated on WikiText-2 validation, {args.cal_samples} × {args.cal_len} tokens; "
                     f"WikiText-2 test perplexity, first {args.ppl_windows} windows of 128 tokens; hellaswag acc_norm "
                     f"± stderr on the first {args.hellaswag}; the gap recovered is (RTN − GPTQ) / (RTN − unquantized)")


if __name__ == "__main__":
    main()
