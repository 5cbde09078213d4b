"""llama.cpp as LayerCut's second engine, checked from outside: the Speed rows' llama.cpp ms/token against an
independent timing of the same GGUF by the same llama.cpp in a process of its own, and the quality llama.cpp computes.

    .venv/bin/python -m benchmarks.llama_engine [--model default|llama1b] [--layers 8] [--repeats 5] [--windows 8]

Columns: the original, a cut (the middle block of about a fifth of the layers), int8 and int4 (LayerCut's int4 timed
as Q4_0 in llama.cpp). **Timing**: ``backend.measure.speed(..., engine="llama.cpp")`` as the page runs it (batch 1,
a 128-token prompt, 32 new tokens), the columns compared two at a time; then each column's GGUF (the file those rows
timed) loaded in a separate process by ``benchmarks.engines.LlamaCpp`` and timed the same way, the columns taking
turns, median of ``--repeats``. **Quality**: WikiText-2 test perplexity (512-token windows) from llama.cpp's logits
beside LayerCut's own for each column (``backend.measure.perplexity(..., engine=...)``), and the original written as
Q4_0 (LayerCut's numpy writer) and as Q4_K_M (llama.cpp's quantizer, without and with an importance matrix from the
calibration text), each file's top-1 next tokens against the original in PyTorch on the same windows. ``llama1b`` is
``benchmarks.engines``' random Llama of Llama-3.2-1B's width.
Writes ``benchmarks/results/llama_engine_<model>.json``.
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

from benchmarks import harness
from benchmarks.engines import NEW, PROMPT, LlamaCpp, llama_1b_width
from benchmarks.record import write_result

PPL_SEQ = 512


def columns(num_layers: int) -> dict:
    import prune
    from prune.core.recipe import Recipe

    size = max(1, num_layers // 5)
    start = (num_layers - size) // 2
    return {"cut": Recipe.block(num_layers, start, start + size), "int8": Recipe((prune.Quantize.of(8),)),
            "int4": Recipe((prune.Quantize.of(4),))}


def timings(backend, spec, compared: dict, repeats: int) -> tuple[dict, dict]:
    """({column: LayerCut's llama.cpp decode ms/token}, {column: its GGUF}) as the Speed step measures them."""
    from evaluation.engines import llama_cpp

    rows = []
    for pair in harness.pairs(compared):
        found = backend.measure.speed(spec, pair, batch_sizes=(1,), prompt_len=PROMPT, new_tokens=(NEW,),
                                      repeats=repeats, engine=llama_cpp.LLAMA_CPP)
        rows += [m for m in found if m.name.startswith("decode latency") and m.name.endswith(llama_cpp.SUFFIX)
                 and (m.model != "original" or not rows)]
    base = backend.models.base(spec)
    recipes = {"original": None, **compared}
    files = {m.model: llama_cpp.cache_path(base.fingerprint, (recipes[m.model] or _original()).key,
                                           m.details["gguf_type"]) for m in rows}
    return {m.model: m for m in rows}, files


def _original():
    from prune.core.recipe import Recipe

    return Recipe()


def independent(files: dict, vocab: int, repeats: int) -> dict:
    """Each GGUF timed in a llama.cpp process of its own (the prompt LayerCut's engine used), turns taken."""
    import sys

    import torch

    prompt = torch.randint(0, vocab, (PROMPT,), generator=torch.Generator().manual_seed(0)).tolist()
    engines = {label: LlamaCpp(sys.executable, path, torch.get_num_threads(), prompt) for label, path in files.items()}
    found = {label: [] for label in files}
    try:
        for engine in engines.values():
            engine.run()
        for _ in range(repeats):
            for label, engine in engines.items():
                found[label].append(engine.run()["decode_ms"])
    finally:
        for engine in engines.values():
            engine.close()
    return {label: statistics.median(samples) for label, samples in found.items()}


def quality(backend, spec, compared: dict, windows: int) -> dict:
    """WikiText-2 perplexity in LayerCut and from llama.cpp's logits, per column."""
    from evaluation.engines import llama_cpp

    found = {}
    for pair in harness.pairs(compared):
        rows = backend.measure.perplexity(spec, pair, seq_lens=(PPL_SEQ,), bos=(False,), max_windows=windows,
                                          engine=llama_cpp.LLAMA_CPP)
        for m in rows:
            engine = m.name.endswith(llama_cpp.SUFFIX)
            key = "top1_agreement_pct" if m.name.startswith("top-1") else \
                ("llama_cpp_ppl" if engine else "layercut_ppl")
            found.setdefault(m.model, {})[key] = round(m.value, 4)
            if engine and m.name.startswith("WikiText"):
                found[m.model]["gguf_type"] = m.details["gguf_type"]
    for row in found.values():
        row["ppl_difference_pct"] = round(100 * (row["llama_cpp_ppl"] / row["layercut_ppl"] - 1), 3)
    return found


def int4_files(backend, spec, windows: int) -> dict:
    """The original as Q4_0 (numpy) and Q4_K_M (llama.cpp's quantizer): each file's top-1 agreement with the
    original in PyTorch, its size and perplexity, on the same windows."""
    import math

    from evaluation.engines import llama_cpp
    from evaluation.exports import gguf_file
    from evaluation.quality import perplexity
    from evaluation.serving.engine import top1

    base = backend.models.base(spec)
    ids = perplexity.token_ids(base.tokenizer, perplexity.wikitext2_rows(backend.models.data_dir))
    chunks = perplexity.windows(ids, PPL_SEQ, None)[:windows]
    reference = top1(base.model, chunks)
    folder = Path(tempfile.mkdtemp(prefix="layercut-int4-"))
    def written(name: str, file_type: str, **how) -> Path:
        return gguf_file.write(base.model, base.tokenizer, folder / f"{name}.gguf", file_type, **how).path

    files = {"Q4_0": written("q4_0", "Q4_0"), "Q4_K_M": written("q4_k_m", "Q4_K_M"),
             "Q4_K_M with an importance matrix": written("q4_k_m_imatrix", "Q4_K_M",
                                                         calibration=backend.models.default_calibration)}
    found = {}
    for name, path in files.items():
        scores = llama_cpp.window_scores(path, chunks, reference)
        found[name] = {"MiB": round(path.stat().st_size / 2**20, 1),
                       "top1_agreement_with_original_pct": round(100 * scores["agree"] / scores["tokens"], 2),
                       "ppl": round(math.exp(scores["nll"] / scores["tokens"]), 4)}
    for path in folder.iterdir():
        path.unlink()
    folder.rmdir()
    return found


def main() -> None:
    parser = harness.parser(__doc__, "data_dir")
    parser.add_argument("--model", choices=("default", "llama1b"), default="default")
    parser.add_argument("--layers", type=int, default=8, help="llama1b's layers")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--windows", type=int, default=8, help="WikiText-2 windows of 512 tokens")
    args = parser.parse_args()
    backend, spec, info = harness.default_model(args.data_dir)
    if args.model == "llama1b":
        model = llama_1b_width(args.layers, backend.models.base(spec).tokenizer)
        spec = backend.models.adopt(model, backend.models.base(spec).tokenizer, name=f"llama1b-{args.layers}")
        info = backend.models.load(spec)
    compared = columns(info.num_layers)
    with harness.Clock() as clock:
        ours, files = timings(backend, spec, compared, args.repeats)
        theirs = independent(files, backend.models.base(spec).model.config.vocab_size, args.repeats)
        scored = quality(backend, spec, compared, args.windows)
        int4 = int4_files(backend, spec, args.windows)
    timed = {label: {"gguf_type": m.details["gguf_type"], "speed_row_ms": round(m.value, 2),
                     "independent_ms": round(theirs[label], 2),
                     "difference_pct": round(100 * (m.value / theirs[label] - 1), 1),
                     "bytes_per_token_MiB": round(m.details["bytes_per_token"] / 2**20, 1),
                     "share_of_floor": round(m.details["limit_share"], 3)} for label, m in ours.items()}
    result = {"timing": timed, "quality": scored, "int4_files": int4, "seconds": round(clock.wall),
              "recipes": {label: recipe.short() for label, recipe in compared.items()}}
    write_result(f"llama_engine_{args.model}", result,
                 model=info.name if args.model == "default" else f"random Llama of Llama-3.2-1B's width, "
                                                                  f"{args.layers} layers",
                 how=f"batch 1, {PROMPT}-token prompt, {NEW} new tokens, median of {args.repeats}; WikiText-2 test, "
                     f"{args.windows} windows of {PPL_SEQ}")
    print(result)


if __name__ == "__main__":
    harness.in_fresh_cache(main)
