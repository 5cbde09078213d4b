"""Models taking turns within a memory budget: a variant that fits only without the original, streamed or swapped in.

    .venv/bin/python -m benchmarks.turns [--folder DIR] [--tokens 16] [--device cuda]

Writes (once) a random Llama (hidden 1024, 12 layers, MLP 2816, vocabulary 49152: ~0.96 GiB in float32) and, with
``LAYERCUT_MEMORY_BUDGET`` at 1.3 × its weights, loads it whole through the backend and builds a Wanda 2:4 variant
B, which cannot fit beside it and so is built into files of its own. Then, in one process, side by side:

* **streamed**: B answers while the original stays in memory, reading each layer's weights from its files for
  every pass (what LayerCut did before models took turns);
* **turns**: the backend's side-by-side generation of the original and B: the original answers, then steps aside
  (on a CPU into a memory-mapped file of its own; beside a GPU into CPU memory) and B is brought in whole to answer.

It prints each one's decode speed, the swap's seconds and bytes, the process's resident memory after each, and the
ratios. The embedded model's tokenizer feeds it. Writes ``benchmarks/results/turns.json``.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import psutil

from benchmarks import harness
from benchmarks.record import write_result

_GIB = 2**30


def write_model(folder: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig

    from prune.core.loading import default_checkpoint

    if (folder / "config.json").exists():
        return
    config = LlamaConfig(vocab_size=49152, hidden_size=1024, intermediate_size=2816, num_hidden_layers=12,
                         num_attention_heads=16, num_key_value_heads=4, max_position_embeddings=2048,
                         tie_word_embeddings=False)
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config, dtype=torch.float32).save_pretrained(folder)
    AutoTokenizer.from_pretrained(default_checkpoint()).save_pretrained(folder)


def rss() -> float:
    return psutil.Process().memory_info().rss / _GIB


def main() -> None:
    parser = harness.parser(__doc__)
    parser.add_argument("--folder", default=str(Path(tempfile.gettempdir()) / "layercut-turns-model"))
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    folder = Path(args.folder)
    write_model(folder)
    os.environ.setdefault("LAYERCUT_CACHE", tempfile.mkdtemp(prefix="layercut-turns-cache-"))

    from prune.core.calibration import Calibration
    from prune.core.offload import resident_bytes
    from prune.core.recipe import Recipe
    from prune.sparsity.step import Sparsify

    from evaluation.measure import generation
    from evaluation.serving.backend import Backend
    from evaluation.core.pool import ModelSpec

    import torch
    from transformers import AutoConfig

    from prune.core.loading import weight_bytes_needed

    weights = weight_bytes_needed(AutoConfig.from_pretrained(folder), torch.float32)
    os.environ["LAYERCUT_MEMORY_BUDGET"] = str(int(1.3 * weights))
    print(f"weights {weights / _GIB:.2f} GiB; budget {1.3 * weights / _GIB:.2f} GiB; device {args.device}")
    backend = Backend(device=args.device, data_dir="")
    spec = ModelSpec(str(folder))
    with harness.Clock() as clock:
        info = backend.models.load(spec)
    found = {"weights_GiB": weights / _GIB, "budget_GiB": 1.3 * weights / _GIB, "tokens": args.tokens,
             "load_s": clock.wall, "loaded_resident_GiB": info.resident_bytes / _GIB}
    print(f"load {found['load_s']:.1f} s: {info.resident_bytes / _GIB:.2f} GiB in memory")
    recipe = Recipe((Sparsify.of("wanda", None, "2:4", Calibration(n_samples=4, seq_len=64)),))
    with harness.Clock() as clock:
        print(f"B into files: {backend.models.built_into_files(spec, recipe)}")
        backend.models.build(spec, recipe)
        base = backend.models.pool.get(spec)
        b = backend.models.variants.get(base, recipe)
    found["B"] = {"build_s": clock.wall, "resident_GiB": resident_bytes(b) / _GIB, "rss_GiB": rss()}
    print(f"B built in {found['B']['build_s']:.1f} s; B holds {found['B']['resident_GiB']:.2f} GiB in memory; "
          f"rss {found['B']['rss_GiB']:.2f} GiB")
    prompt = "The history of the city begins"

    states = list(generation.stream_side_by_side({"B": b}, base.tokenizer, prompt, max_new_tokens=args.tokens))[-1]
    streamed = states["B"]
    found["streamed"] = {"tokens_per_s": streamed["tokens_per_s"], "ttft_s": streamed["ttft_s"], "rss_GiB": rss()}
    print(f"streamed: B decodes {streamed['tokens_per_s']:.2f} tokens/s (first token {streamed['ttft_s']:.2f} s); "
          f"rss {found['streamed']['rss_GiB']:.2f} GiB")

    with harness.Clock() as clock:
        states = list(backend.measure.generate(spec, {"B": recipe}, prompt, max_new_tokens=args.tokens))[-1]
    took = clock.wall
    turn, swap = states["B"], backend.models.residency.last
    found["turns"] = {"original_tokens_per_s": states["original"]["tokens_per_s"], "tokens_per_s": turn["tokens_per_s"],
                      "ttft_s": turn["ttft_s"], "swap_s": swap.seconds, "brought_GiB": swap.brought_bytes / _GIB,
                      "parked_GiB": swap.parked_bytes / _GIB, "all_s": took, "rss_GiB": rss(),
                      "same_answer": turn["token_ids"] == streamed["token_ids"],
                      "over_streamed": turn["tokens_per_s"] / streamed["tokens_per_s"]}
    print(f"turns: original {states['original']['tokens_per_s']:.2f} tokens/s, then B {turn['tokens_per_s']:.2f} "
          f"tokens/s (first token {turn['ttft_s']:.2f} s); swap {swap.seconds:.2f} s "
          f"({swap.brought_bytes / _GIB:.2f} GiB in, {swap.parked_bytes / _GIB:.2f} GiB out); all {took:.1f} s; "
          f"rss {found['turns']['rss_GiB']:.2f} GiB")
    print(f"same answer: {turn['token_ids'] == streamed['token_ids']}")
    print(f"B's decode speed, turns ÷ streamed: {turn['tokens_per_s'] / streamed['tokens_per_s']:.2f} ×")
    print(backend.models.residency.summary())
    with harness.Clock() as clock:
        again = list(backend.measure.generate(spec, {"B": recipe}, prompt, max_new_tokens=args.tokens))[-1]
        swap = backend.models.residency.last
    found["again"] = {"all_s": clock.wall, "swap_s": swap.seconds, "rss_GiB": rss(),
                      "same_answers": [s["token_ids"] for s in again.values()] == [s["token_ids"]
                                                                                   for s in states.values()]}
    print(f"again: all {found['again']['all_s']:.1f} s; swap {swap.seconds:.2f} s; rss {found['again']['rss_GiB']:.2f} "
          f"GiB; same answers: {found['again']['same_answers']}")
    write_result("turns", found, device=args.device,
                 model="random Llama, hidden 1024, 12 layers, MLP 2816, vocabulary 49152, float32",
                 how="LAYERCUT_MEMORY_BUDGET at 1.3 × the weights; B: Wanda 2:4, built into files of its own; "
                     "streamed: B reads each layer from its files every pass; turns: the original steps aside and B "
                     "is brought in whole")


if __name__ == "__main__":
    main()
