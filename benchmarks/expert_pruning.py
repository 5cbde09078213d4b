"""Expert pruning on a mixture of experts whose experts were learned (``benchmarks/learned_moe.py``): WikiText-2 test
perplexity with 25 % and 50 % of every layer's experts removed by REAP, frequency, activation norm, mean gate and
random, and merged (REAP's merging baseline), side by side; the expert heatmap's analysis time and the seconds a keep
choice's numbers take, through the app's Backend.

    .venv/bin/python -m benchmarks.expert_pruning [--ppl_windows 64] [--fractions 0.25,0.5]

Calibration: WikiText-2 validation (64 windows of 128 tokens, the app's default calibration), the same text the learned
MoE was split on; perplexity: WikiText-2 test, the first windows of 128 tokens, no BOS. Results go to a fresh cache.
Writes ``benchmarks/results/expert_pruning.json``.
"""

from __future__ import annotations

from benchmarks import harness, learned_moe
from benchmarks.record import write_result

CRITERIA = ("reap", "frequency", "ean", "gate", "merge", "random")


def main() -> None:
    parser = harness.parser(__doc__, "data_dir", "ppl_windows")
    parser.add_argument("--fractions", type=lambda text: tuple(float(f) for f in text.split(",")),
                        default=(0.25, 0.5), help="comma list of the shares of each layer's experts removed")
    args = parser.parse_args()
    harness.in_fresh_cache(lambda: run(args))


def run(args) -> None:
    from evaluation.core.pool import ModelSpec
    from evaluation.measure.measurement import ORIGINAL
    from evaluation.serving.backend import Backend
    from prune.core.recipe import Recipe
    from prune.experts.step import CRITERIA as WORDS, ExpertPrune

    backend = Backend(data_dir=args.data_dir)
    path = learned_moe.folder(backend.models.data_dir)
    spec = ModelSpec(str(path))
    backend.models.load(spec)
    calibration = backend.models.default_calibration
    with harness.Clock() as analysis:
        found = backend.experts.saliency(spec, "reap")  # a fresh cache: one pass over the calibration windows
    first = Recipe((ExpertPrune.of("reap", args.fractions[0], calibration),))
    with harness.Clock() as feedback:  # the slider's numbers: built from the map's pass, then run on the slice
        numbers = backend.explain.cut_feedback(spec, first)
    with harness.Clock() as again:  # the next choice: the original's states on the slice are known by then
        backend.explain.cut_feedback(spec, Recipe((ExpertPrune.of("reap", args.fractions[-1], calibration),)))
    variants = {f"{name} {round(100 * f)} %": Recipe((ExpertPrune.of(name, f, calibration),))
                for f in args.fractions for name in CRITERIA}
    ppl = {}
    for pair in harness.pairs(variants):
        ppl.update({m.model: m.value for m in backend.measure.perplexity(spec, pair, seq_lens=(128,), bos=(False,),
                                                                         max_windows=args.ppl_windows)})
    columns = {WORDS[name]: {f"{round(100 * f)} % removed": round(ppl[f"{name} {round(100 * f)} %"], 2)
                             for f in args.fractions} for name in CRITERIA}
    write_result("expert_pruning", {
        "columns": columns, "original_perplexity": round(ppl[ORIGINAL], 2), "experts": found.experts,
        "top_k": found.top_k, "layers": len(found.layers), "ppl_windows": args.ppl_windows, "ppl_seq_len": 128,
        "analysis_s": round(analysis.wall, 2), "feedback_s": round(feedback.wall, 2),
        "feedback_again_s": round(again.wall, 2),
        "feedback": numbers.summary()},
        how="the learned MoE of benchmarks/learned_moe.py through the app's Backend: the expert heatmap's REAP pass "
            "timed from a fresh cache, then a 25 % choice's numbers against the original (agreement, perplexity, "
            "drift on 2 × 128 tokens), then the next choice's, then every criterion's WikiText-2 test perplexity",
        model=path.name)


if __name__ == "__main__":
    main()
