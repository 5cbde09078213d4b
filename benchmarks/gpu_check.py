"""The CUDA paths in one command: a Llama-2-7B-shaped random model in bf16 through every kind of job, one table.

    python -m benchmarks.gpu_check [--device cuda] [--data_dir ../shared/benchdata] [--small]
                                   [--questions N] [--encoders_only] [--decode_only] [--eager_only] [--skip_decode]

Steps (each timed, with the peak GPU memory it reached): bf16 load of a random model of Llama-2-7B's shape
(hidden 4096, 32 layers, MLP 11008, 32 heads; the embedded model's tokenizer and vocabulary), angular-distance
and Taylor+ analyses, a cut of the angular method's best 8-layer block, a Wanda 2:4 variant built beside it,
generation of the three side by side, speed and memory per column (the 2:4 variant timed with PyTorch's
semi-structured kernels where the GPU has them), a benchmark of the three on 100 ARC-Easy
questions and 100 CBT-style cloze questions, width pruning to
80 % by Wanda-sp and by LLM-Pruner's criterion (its backward pass), then the cut in int8 and the original in int4
(torchao) timed and measured beside the original; then batch-1 decode of the original, the cut, the original in
int8 and in int4, each eager and compiled (a static KV cache, CUDA graphs; compile time apart), against the
memory-bandwidth floor, written to ``benchmarks/results/gpu_decode_<card>.json`` (``benchmarks/decode_floor.py``;
``--decode_only``: the load, then that step alone, the cut being the last quarter of the layers; ``--skip_decode``:
every step but that one, which ``benchmarks/gpu_session.sh`` runs first on its own); last, a random
BERT-large-shaped encoder and a T5-base-shaped
encoder-decoder, each analysed (T5: each stack on its own), cut, Wanda-sparsified, timed and scored on the cloze task
beside its original (``--encoders_only``: those steps alone). ``--small`` runs the same on tiny models (a check that
the script works, on any device). On one H100 (PyTorch 2.11) the steps took 158 s in all, on one H200 148 s (with
the width step), the encoders' 35 s on an H100; the README gives the tables. Each run's table is also written as
JSON, one file per run: ``benchmarks/results/gpu/<date>-<time>-<card>.json`` (``--small``: ``gpu_check_dry_run.json``).
"""

from __future__ import annotations

import re
import time

import torch

from benchmarks import harness
from benchmarks.record import device_name, write_result

_GIB = 2**30


def main() -> None:
    parser = harness.parser(__doc__, "data_dir")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--small", action="store_true", help="a tiny model: check the script, not the GPU")
    parser.add_argument("--questions", type=int, default=100)
    parser.add_argument("--encoders_only", action="store_true", help="only the encoder and T5 steps")
    parser.add_argument("--decode_only", action="store_true", help="only the load and the eager/compiled decode step")
    parser.add_argument("--eager_only", action="store_true", help="the decode step without its compiled runs")
    parser.add_argument("--skip_decode", action="store_true", help="every step but the eager/compiled decode step")
    args = parser.parse_args()
    rows: list[tuple[str, float, float, str]] = []
    finished = False
    try:
        if args.encoders_only:
            dtype = torch.bfloat16 if args.device.startswith("cuda") else torch.float32
            encoders(args, timed_step(args, rows), rows, dtype)
        else:
            run(args, rows)
        finished = True
    finally:
        print_table(rows, args)
        print(f"\nwritten to {write_run(rows, args, finished)}")


def run(args, rows: list) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig

    from evaluation.quality import lm_eval_adapter
    from evaluation.serving.backend import Backend
    from prune.core.loading import default_checkpoint
    from prune.core.recipe import Recipe
    from prune.quantize.step import Quantize
    from prune.sparsity.step import Sparsify
    from prune.width.step import WidthPrune

    cuda = args.device.startswith("cuda")
    dtype = torch.bfloat16 if cuda else torch.float32
    step = timed_step(args, rows)

    tokenizer = AutoTokenizer.from_pretrained(default_checkpoint())
    shape = dict(hidden_size=256, intermediate_size=688, num_hidden_layers=8, num_attention_heads=4) if args.small \
        else dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32)
    config = LlamaConfig(vocab_size=len(tokenizer), max_position_embeddings=4096, **shape)

    def load():
        torch.manual_seed(0)
        with torch.device(args.device):
            model = AutoModelForCausalLM.from_config(config, dtype=dtype).eval()
        model.layercut_name = "random Llama-2-7B shape" if not args.small else "random tiny Llama"
        return model, f"{sum(p.numel() for p in model.parameters()) / 1e9:.2f} B parameters, {dtype}"

    model = step("load (random weights)", load)
    backend = Backend(data_dir=args.data_dir, device=args.device)
    spec = backend.models.adopt(model, tokenizer)
    layers = config.num_hidden_layers
    if args.decode_only:
        return decode_modes(args, step, rows, backend, spec, Recipe.block(layers, layers - layers // 4, layers))
    angular = step("angular analysis",
                   lambda: (backend.analysis.score(spec, "angular", use_cache=False), "the default calibration"))
    step("Taylor+ analysis", lambda: (backend.analysis.score(spec, "taylor", use_cache=False), "one backward pass"))
    start, end = angular.best_block(max(1, layers // 4))
    compared = {"A": Recipe.block(layers, start, end), "B": Recipe((Sparsify.of("wanda", 0.5, "2:4"),))}
    step("cut and Wanda 2:4 built", lambda: ([backend.models.model(spec, r) for r in compared.values()],
                                             f"A: layers {start}–{end - 1}; B: Wanda 2:4"))
    step("generation side by side", lambda: (list(backend.measure.generate(spec, compared, "The capital of France is",
                                                                            max_new_tokens=32)),
                                             "32 tokens × 3 models"))
    lengths = timing(args.small)
    speed = {**lengths, "new_tokens": (lengths["new_tokens"],)}
    speeds = step("speed", lambda: (backend.measure.speed(spec, compared, batch_sizes=(1, 8), **speed),
                                    f"batch 1 and 8, {tokens_note(lengths)}"))
    for m in speeds:
        if m.name.startswith(("decode latency", "prefill latency")):
            rows.append((f"  {m.model}: {m.name}", float("nan"), float("nan"), f"{m.value:.1f} {m.unit}"))
    for label, note in {m.model: m.details.get("sparsity_note") for m in speeds}.items():
        if note:
            rows.append((f"  {label}: 2:4 kernels", float("nan"), float("nan"), note))
    memory = step("memory", lambda: (backend.measure.memory(spec, compared, new_tokens=32), "weights, peak, KV cache"))
    for m in memory:
        if m.name.startswith("peak memory"):
            rows.append((f"  {m.model}: {m.name}", float("nan"), float("nan"), f"{m.value:,.0f} {m.unit}"))
    request = lm_eval_adapter.check_request(["arc_easy", "cbt_style_cn"], limit=args.questions,
                                            data_dir=backend.models.data_dir)
    scores = step("benchmark", lambda: (backend.measure.benchmarks(spec, compared, request, use_cache=False),
                                        f"ARC-Easy and CBT-style CN (cloze), {args.questions} questions each"))
    for m in scores:
        if m.name in ("arc_easy acc", "cbt_style_cn acc"):
            rows.append((f"  {m.model}: {m.name}", float("nan"), float("nan"), f"{m.value:.1f}"))
    kept = 0.9 if args.small else 0.8  # the tiny model's embeddings alone are 80 % of it
    widths = {"A": Recipe((WidthPrune.of(kept),)), "B": Recipe((WidthPrune.of(kept, criterion="llm-pruner"),))}
    step(f"width {kept:.0%} built: Wanda-sp, LLM-Pruner", lambda: ([backend.models.model(spec,
                                                                                         r) for r in widths.values()],
                                                           "A: Wanda-sp (forward); B: LLM-Pruner (one backward)"))
    quantized = {"A": compared["A"].then(Quantize.of(8)), "B": Recipe((Quantize.of(4),))}
    step("int8 cut and int4 built", lambda: ([backend.models.model(spec, r) for r in quantized.values()],
                                             "A: the cut in int8; B: the original in int4 (torchao)"))
    found = step("quantized speed and memory", lambda: (
        backend.measure.speed(spec, quantized, batch_sizes=(1,), **speed)
        + backend.measure.memory(spec, quantized, new_tokens=32), f"batch 1, {tokens_note(lengths)}"))
    for m in found:
        if m.name.startswith(("decode latency", "weight memory")):
            rows.append((f"  {m.model}: {m.name}", float("nan"), float("nan"), f"{m.value:,.1f} {m.unit}"))
    if not args.skip_decode:
        decode_modes(args, step, rows, backend, spec, compared["A"])
    backend = model = None  # freed for the encoders (not del: pyflakes then flags the lambdas above that use them)
    encoders(args, step, rows, dtype)


def decode_modes(args, step, rows: list, backend, spec, cut) -> None:
    """Batch-1 decode of the original, ``cut``, the original in int8 and in int4, eager and compiled, against the
    bandwidth floor; the rows also as JSON under benchmarks/results/."""
    from benchmarks import decode_floor
    from prune.core.recipe import Recipe
    from prune.quantize.step import Quantize

    recipes = {"original": Recipe(), "cut": cut, "int8": Recipe((Quantize.of(8),)), "int4": Recipe((Quantize.of(4),))}
    models = {label: backend.models.model(spec, recipe) for label, recipe in recipes.items()}
    modes = ("eager",) if args.eager_only else ("eager", "compiled")
    lengths = timing(args.small)
    found = step("decode: eager and compiled", lambda: (decode_floor.decode_rows(models, modes=modes, **lengths),
                                                        f"batch 1, {tokens_note(lengths)}, " + " and ".join(modes)))
    card = found["device"].split(" (")[0].replace(" ", "_")
    path = decode_floor.write(found, f"gpu_decode_{card}.json" if not args.small else "decode_floor_dry_run.json")
    for r in found["rows"]:
        rows.append((f"  {r['model']}, {r['mode']}", float("nan"), float("nan"), r.get("error") or _decode_note(r)))
    print(decode_floor.table(found) + f"\n\nwritten to {path}")


def timing(small: bool) -> dict:
    """The timed steps' prompt, new tokens and repeats (``--small``: a check that the steps run, not a figure)."""
    return dict(prompt_len=16, new_tokens=8, repeats=1) if small else dict(prompt_len=128, new_tokens=32, repeats=3)


def tokens_note(lengths: dict) -> str:
    return f"{lengths['prompt_len']} + {lengths['new_tokens']} tokens"


def _decode_note(r: dict) -> str:
    """One decode row in words: ms per token against its floor, the compile, memory beyond what was resident."""
    parts = [f"{r['decode_ms']:.2f} ms/token, floor {r['floor_ms']:.2f} ms ({r['floor_share']:.0%})"]
    if "compile_s" in r:
        parts.append(f"compile {r['compile_s']:.1f} s")
    if "peak_above_resident_mib" in r:
        parts.append(f"peak +{r['peak_above_resident_mib']:,.0f} MiB over resident (KV cache {r['kv_cache_mib']:,.0f}"
                     f" MiB; weights {r['weights_mib']:,.0f} MiB)")
    return ", ".join(parts)


def timed_step(args, rows: list):
    """``step(name, work)``: runs ``work() -> (result, note)``, adds its row (seconds, peak GPU memory), returns
    the result."""
    cuda = args.device.startswith("cuda")

    def step(name: str, work):
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        with harness.Clock() as clock:
            result, note = work()
            if cuda:
                torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() / _GIB if cuda else float("nan")
        rows.append((name, clock.wall, peak, note))
        return result

    return step


def encoders(args, step, rows: list, dtype) -> None:
    """A BERT-large-shaped encoder and a T5-base-shaped encoder-decoder (random weights): the angular analysis, its
    best block of a quarter cut as A, Wanda 50 % as B, one pass timed, the cloze task scored."""
    import transformers

    from evaluation.quality import lm_eval_adapter
    from evaluation.serving.backend import Backend
    from prune.core.loading import default_checkpoint
    from prune.core.recipe import Recipe
    from prune.sparsity.step import Sparsify

    tokenizer = transformers.AutoTokenizer.from_pretrained(default_checkpoint())
    tokenizer.add_special_tokens({"mask_token": "[MASK]",
                                  "additional_special_tokens": ["<extra_id_0>", "<extra_id_1>"]})
    vocab, small = len(tokenizer), args.small
    shapes = {
        "BERT-large shape": lambda: transformers.AutoModelForMaskedLM.from_config(transformers.BertConfig(
            vocab_size=vocab, max_position_embeddings=512, **(dict(hidden_size=64, num_hidden_layers=4,
            num_attention_heads=4, intermediate_size=128) if small else dict(hidden_size=1024, num_hidden_layers=24,
            num_attention_heads=16, intermediate_size=4096))), dtype=dtype),
        "T5-base shape": lambda: transformers.AutoModelForSeq2SeqLM.from_config(transformers.T5Config(
            vocab_size=vocab, decoder_start_token_id=0, pad_token_id=0, **(dict(d_model=64, d_kv=16, d_ff=128,
            num_layers=2, num_heads=4) if small else dict(d_model=768, d_kv=64, d_ff=3072, num_layers=12,
            num_heads=12))), dtype=dtype),
    }
    for label, build in shapes.items():
        def load(build=build, label=label):
            torch.manual_seed(0)
            with torch.device(args.device):
                model = build().eval()
            model.layercut_name = f"random {label}"
            return model, f"{sum(p.numel() for p in model.parameters()) / 1e6:.0f} M parameters, {dtype}"

        model = step(f"{label}: load", load)
        backend = Backend(data_dir=args.data_dir, device=args.device)
        spec = backend.models.adopt(model, tokenizer)
        result = step(f"{label}: angular analysis", lambda: (backend.analysis.score(spec, "angular", use_cache=False),
                                                             "each stack on its own" if "T5" in label else "one stack"))
        layers = result.num_layers
        start, end = result.best_block(max(1, layers // 4))
        compared = {"A": Recipe.block(layers, start, end), "B": Recipe((Sparsify.of("wanda", 0.5),))}
        step(f"{label}: cut and Wanda 50 % built", lambda: (
            [backend.models.model(spec, r) for r in compared.values()],
            f"A: block [{start}, {end}) of {layers} layers; B: Wanda 50 %"))
        found = step(f"{label}: one pass timed", lambda: (backend.measure.speed(
            spec, compared, batch_sizes=(8,), prompt_len=128, new_tokens=(2,), repeats=3), "batch 8, 128 tokens"))
        for m in found:
            if m.name.startswith("prefill latency"):
                rows.append((f"  {m.model}: {m.name}", float("nan"), float("nan"), f"{m.value:.1f} {m.unit}"))
        request = lm_eval_adapter.check_request(["cbt_style_cn"], limit=args.questions,
                                                data_dir=backend.models.data_dir)
        scores = step(f"{label}: cloze task", lambda: (backend.measure.benchmarks(spec, compared, request,
                                                                                  use_cache=False),
                                                       f"CBT-style CN, {args.questions} questions"))
        for m in scores:
            if m.name == "cbt_style_cn acc":
                rows.append((f"  {m.model}: {m.name}", float("nan"), float("nan"), f"{m.value:.1f}"))
        backend = model = None  # freed before the next shape (as in run)


def write_run(rows: list, args, finished: bool):
    """This run's table as JSON, one file per run: ``benchmarks/results/gpu/<date>-<time>-<card>.json`` (``--small``:
    ``gpu_check_dry_run.json``)."""
    cuda_missing = args.device.startswith("cuda") and not torch.cuda.is_available()
    device = args.device if cuda_missing else device_name(args.device)
    card = re.sub(r"[^\w.-]+", "_", device).strip("_")
    part = "_decode" if args.decode_only else ""  # the session's decode run and its run of the rest apart
    name = f"gpu_check_dry_run{part}" if args.small else f"gpu/{time.strftime('%Y-%m-%d-%H%M')}-{card}{part}"
    steps = [{"step": step, "seconds": None if seconds != seconds else round(seconds, 2),
              "peak_gpu_GiB": None if peak != peak else round(peak, 3), "note": note}
             for step, seconds, peak, note in rows]
    return write_result(name, {"finished": finished, "steps": steps}, device=device,
                        how="each step timed (device synchronized) with the peak GPU memory it reached; indented "
                            "rows: the step's figures")


def print_table(rows: list, args) -> None:
    cuda = args.device.startswith("cuda") and torch.cuda.is_available()
    device = torch.cuda.get_device_name() if cuda else args.device
    print(f"\nLayerCut GPU check on {device} (torch {torch.__version__})\n")
    print("| step | seconds | peak GPU memory (GiB) | note |\n|---|---|---|---|")
    for name, seconds, peak, note in rows:
        print(f"| {name} | {'' if seconds != seconds else f'{seconds:.1f}'} | "
              f"{'' if peak != peak else f'{peak:.2f}'} | {note} |")


if __name__ == "__main__":
    main()
