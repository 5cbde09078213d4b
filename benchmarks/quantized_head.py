"""What quantizing the LM head too costs and buys on the default model: int8 and int4, each without and with an int8
head (``Quantize(head=True)``, as llama.cpp stores the output matrix), side by side.

    .venv/bin/python -m benchmarks.quantized_head [--ppl_windows 64] [--hellaswag 200]

Rows per column: WikiText-2 test perplexity (the first windows of 128 tokens), hellaswag acc_norm on the first N
questions, the weights' bytes as stored (``weight_bytes``: a tied model's untied head adds its int8 copy beside the
original's embedding) and the bytes one decoded token reads (``bandwidth.decode_bytes`` at a 144-token context).
Everything goes through the Backend the app uses, in a fresh cache. Speed is ``benchmarks/deployed.py``'s. Writes
``benchmarks/results/quantized_head.json``.
"""

from __future__ import annotations

from benchmarks import harness
from benchmarks.record import write_result


def main() -> None:
    parser = harness.parser(__doc__, "ppl_windows")
    parser.add_argument("--hellaswag", type=int, default=200, help="hellaswag questions")
    args = parser.parse_args()
    harness.in_fresh_cache(lambda: run(args))


def run(args) -> None:
    import torch

    from evaluation.measure import bandwidth
    from evaluation.measure.measurement import ORIGINAL
    from prune.core.storage import weight_bytes
    from evaluation.quality import lm_eval_adapter
    from prune.core.recipe import Recipe
    from prune.quantize.step import Quantize

    backend, spec, _info = harness.default_model()
    chosen = {step.short(): Recipe((step,)) for head in (False, True) for step in
              (Quantize.of(8, head=head), Quantize.of(4, head=head))}
    models = {name: backend.models.model(spec, recipe) for name, recipe in chosen.items()}
    models[ORIGINAL] = backend.models.model(spec, Recipe())
    found = {name: {"weights_MiB": round(weight_bytes(m) / 2**20, 1),
                    "read_per_token_MiB": round(bandwidth.decode_bytes(m, 144) / 2**20, 1)}
             for name, m in models.items()}
    names = list(chosen)
    pairs = harness.pairs(chosen)
    request = lm_eval_adapter.check_request(["hellaswag"], limit=args.hellaswag, data_dir=backend.models.data_dir)
    for pair in pairs:
        for m in backend.measure.perplexity(spec, pair, seq_lens=(128,), bos=(False,), max_windows=args.ppl_windows):
            found[m.model]["wikitext2_ppl"] = round(m.value, 2)
        for m in backend.measure.benchmarks(spec, pair, request, batch_size=16):
            if m.name == "hellaswag acc_norm":
                found[m.model]["hellaswag_acc_norm"] = [round(m.value, 1), round(m.spread, 1)]
    result = {"columns": {k: found[k] for k in [ORIGINAL, *names]}, "threads": torch.get_num_threads()}
    path = write_result("quantized_head", result, model="SmolLM2-135M-Instruct (embedded), float32",
                        how=f"WikiText-2 test perplexity, first {args.ppl_windows} windows of 128 tokens; hellaswag "
                            f"acc_norm ± stderr on the first {args.hellaswag}; bytes as stored and read per decoded "
                            "token")
    print(path.read_text())


if __name__ == "__main__":
    main()
