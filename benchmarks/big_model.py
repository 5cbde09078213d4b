"""An 8B-shaped model on this machine, within a memory budget: every forward-only job, with time and peak memory.

    .venv/bin/python -m benchmarks.big_model [--budget 8GiB] [--folder DIR] [--small] [--device cuda]

Writes (once) a random Llama of Llama-3-8B's shape (hidden 4096, 32 layers, MLP 14336, 32/8 heads, vocabulary
128256; ~15 GiB in bfloat16) to ``--folder``, then, in this process, with ``LAYERCUT_MEMORY_BUDGET`` at
``--budget``: loads it through the backend, scores the layers by angular distance, builds a Wanda 2:4 variant beside
it (layer by layer, into files of its own), and compares the original with two variants (A: the angular method's
best 4-layer cut, which shares its weights; B: the Wanda 2:4 variant, read from its own files) in generation,
speed, memory and a 20-question ARC-Easy benchmark. Each step prints its seconds and the process's peak resident
memory so far (VmHWM, memory-mapped file pages included). The embedded model's tokenizer feeds it (its ids lie
inside the larger vocabulary). ``--small`` runs the same on a small model, to check the script. Writes
``benchmarks/results/big_model.json`` (``--small``: ``big_model_dry_run.json``).
"""

from __future__ import annotations

import os
from pathlib import Path

from benchmarks import harness
from benchmarks.record import write_result

_GIB = 2**30


def vm_peak() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024 / _GIB
    return float("nan")


def gpu_peak() -> float:
    import torch

    return torch.cuda.max_memory_allocated() / _GIB if torch.cuda.is_available() else float("nan")


def write_model(folder: Path, small: bool) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig

    from prune.core.loading import default_checkpoint

    if (folder / "config.json").exists():
        return
    shape = dict(hidden_size=512, intermediate_size=1792, num_hidden_layers=8, num_attention_heads=8,
                 num_key_value_heads=2) if small else \
        dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
             num_key_value_heads=8)
    config = LlamaConfig(vocab_size=128256, max_position_embeddings=8192, tie_word_embeddings=False, **shape)
    torch.manual_seed(0)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):  # random weights: seconds on a GPU, minutes here
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.save_pretrained(folder, max_shard_size="2GB")
    AutoTokenizer.from_pretrained(default_checkpoint()).save_pretrained(folder)


def main() -> None:
    parser = harness.parser(__doc__)
    parser.add_argument("--budget", default="8GiB")
    parser.add_argument("--folder", type=Path, default=Path("/tmp/layercut-8b"))
    parser.add_argument("--small", action="store_true")
    parser.add_argument("--questions", type=int, default=20)
    parser.add_argument("--device", default="cpu", help="cpu, or cuda: the budget is then GPU memory")
    args = parser.parse_args()
    with harness.Clock() as clock:
        write_model(args.folder, args.small)
    print(f"model folder ready in {clock.wall:.0f} s: "
          f"{sum(f.stat().st_size for f in args.folder.glob('*.safetensors')) / _GIB:.2f} GiB of safetensors")
    os.environ["LAYERCUT_MEMORY_BUDGET"] = args.budget
    from evaluation.measure.memory import _reset_peak_rss

    _reset_peak_rss()  # the peaks below are the jobs', not the writing's

    from evaluation.quality import lm_eval_adapter
    from evaluation.serving.backend import Backend
    from evaluation.core.pool import ModelSpec
    from prune.core.calibration import Calibration
    from prune.core.recipe import Recipe
    from prune.sparsity.step import Sparsify
    from ui.text import model_markdown

    backend = Backend(device=args.device)
    spec = ModelSpec(str(args.folder), dtype="bfloat16")
    rows = []

    def step(name: str, work):
        with harness.Clock() as clock:
            result = work()
        rows.append((name, clock.wall, vm_peak(), gpu_peak()))
        print(f"  {name}: {rows[-1][1]:.0f} s, peak resident so far {rows[-1][2]:.2f} GiB, "
              f"GPU {rows[-1][3]:.2f} GiB", flush=True)
        return result

    info = step("load", lambda: backend.models.load(spec))
    print("  " + model_markdown(info))
    result = step("angular analysis (4 × 64 tokens)",
                  lambda: backend.analysis.score(spec, "angular", calibration=Calibration(n_samples=4, seq_len=64)))
    start, end = result.best_block(4)
    layers = info.num_layers
    wanda = Recipe((Sparsify.of("wanda", None, "2:4", Calibration(n_samples=4, seq_len=64)),))
    step("Wanda 2:4 variant built beside it (4 × 64 tokens)", lambda: backend.models.build(spec, wanda))
    compared = {"A": Recipe.block(layers, start, end), "B": wanda}
    answers = step("generation, 3 columns × 8 tokens",
                   lambda: list(backend.measure.generate(spec, compared, "The capital of France is",
                                                         max_new_tokens=8))[-1])
    speeds = step("speed (batch 1, 16 + 4 tokens)", lambda: backend.measure.speed(
        spec, compared, batch_sizes=(1,), prompt_len=16, new_tokens=(4,), repeats=1))
    memory = step("memory (8 tokens)", lambda: backend.measure.memory(spec, compared, new_tokens=8))
    request = lm_eval_adapter.check_request(["arc_easy"], limit=args.questions, data_dir=backend.models.data_dir)
    scores = step(f"ARC-Easy, {args.questions} questions × 3 models",
                  lambda: backend.measure.benchmarks(spec, compared, request))
    print(f"\nA: layers {start}–{end - 1} cut; B: Wanda 2:4; budget {args.budget}; "
          f"weights {info.weight_bytes / _GIB:.2f} GiB, {info.resident_bytes / _GIB:.2f} GiB of them in memory")
    print("\n| step | seconds | peak resident so far (GiB) | peak GPU memory so far (GiB) |\n|---|---|---|---|")
    for name, seconds, peak, gpu in rows:
        print(f"| {name} | {seconds:.0f} | {peak:.2f} | {gpu:.2f} |")
    print("\ntokens per column:", {label: state["tokens"] for label, state in answers.items()})
    shown = [m for m in [*speeds, *memory, *scores]
             if m.name.startswith(("decode latency", "peak memory", "arc_easy acc")) and "norm" not in m.name]
    for m in shown:
        print(f"  {m.model}: {m.name} = {m.value:,.2f} {m.unit}")
    figures = {"budget": args.budget, "cut": [start, end], "weights_GiB": round(info.weight_bytes / _GIB, 2),
               "resident_GiB": round(info.resident_bytes / _GIB, 2),
               "steps": [{"step": name, "seconds": round(seconds, 1), "peak_resident_GiB": round(peak, 2),
                          "peak_gpu_GiB": round(gpu, 2)} for name, seconds, peak, gpu in rows],
               "tokens": {label: state["tokens"] for label, state in answers.items()},
               "measurements": [m.to_dict() for m in shown]}
    write_result("big_model_dry_run" if args.small else "big_model", figures, device=args.device,
                 model="random Llama, Llama-3-8B's shape, bfloat16" if not args.small else "random small Llama",
                 how="in one process with LAYERCUT_MEMORY_BUDGET at the budget; peaks: VmHWM (and the GPU's) so far; "
                     "A: the angular method's best 4-layer cut, B: Wanda 2:4 from its own files")


if __name__ == "__main__":
    main()
