"""Batch-1 decode, eager and compiled, against the memory-bandwidth floor: what gpu_check.py's decode step runs.

    python -m benchmarks.decode_floor [--device cpu] [--eager_only]   (a dry run on a tiny model)

For each model (gpu_check.py: the original, its cut, the original in int8 and in int4), a 128-token prompt then 32
greedy tokens at batch 1: once as transformers runs it (``evaluation.measure.speed._run_once``, eager) and once
compiled over a static cache (``evaluation.measure.compiled``; on CUDA mode "reduce-overhead": CUDA graphs), its
compile time apart. Each row gives the decode ms per token (median of the repeats), the bytes one decode step reads
(the weights as stored, less an untied input embedding, of which a step reads one row; plus the KV cache at the mean
context), the floor those bytes set at the bandwidth measured here (the sum of 1 GiB), the share of that floor
reached, and the peak memory the run added above what was resident against its KV cache. The bytes, the bandwidth
and the floor are the speed step's own (``evaluation.measure.bandwidth``).
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import torch

from evaluation.measure import bandwidth as limit, compiled, speed
from prune.core.storage import weight_bytes
from benchmarks import harness
from benchmarks.record import write_result
from benchmarks.renderers import decode_floor as table  # the rows as a Markdown table, as the docs render them
from prune.core.devices import input_device

_MIB = 2**20


def decode_row(label: str, model, mode: str, *, prompt_len: int, new_tokens: int, repeats: int,
               bytes_per_s: float) -> dict:
    """One model in one mode: ms per decoded token, its floor and share, compile seconds, memory above resident."""
    device = input_device(model)
    ids = (torch.arange(prompt_len, device=device) % model.config.vocab_size)[None]  # [1, T]
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize()
        resident = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    row = {"model": label, "mode": mode}
    try:
        if mode == "compiled":
            runs = compiled.CompiledRuns(new_tokens)
            with harness.Clock() as clock:
                runs.run(model, ids, new_tokens)  # the first run at this shape: compiles (and records CUDA graphs)
            row["compile_s"] = clock.wall
            run = runs
        else:
            speed._run_once(model, ids, new_tokens)  # a warm-up
            run = speed._run_once
        decode = [run(model, ids, new_tokens)[1] / (new_tokens - 1) for _ in range(repeats)]
    except Exception as error:  # a model the compiler refuses (a quantized or sparse layout): said, not fatal
        return {**row, "error": (str(error).strip().splitlines() or [type(error).__name__])[0][:200]}
    moved = limit.decode_bytes(model, prompt_len + new_tokens // 2)  # at the mean context, as the speed step
    row.update(decode_ms=statistics.median(decode), step_mib=moved / _MIB,
               floor_ms=moved / bytes_per_s * 1000, weights_mib=weight_bytes(model) / _MIB,
               kv_cache_mib=limit.kv_bytes(model, prompt_len + new_tokens) / _MIB)
    row["floor_share"] = row["floor_ms"] / row["decode_ms"]
    if cuda:
        row["peak_above_resident_mib"] = (torch.cuda.max_memory_allocated() - resident) / _MIB
    return row


def decode_rows(models: dict, *, modes=("eager", "compiled"), prompt_len: int = 128, new_tokens: int = 32,
                repeats: int = 3) -> dict:
    """Every model in every mode, with the bandwidth measured once on their device."""
    device = input_device(next(iter(models.values())))
    bytes_per_s = limit.bandwidth(device).bytes_per_s
    rows = []
    try:
        for mode in modes:
            for label, model in models.items():
                started = time.perf_counter()
                rows.append(decode_row(label, model, mode, prompt_len=prompt_len, new_tokens=new_tokens,
                                       repeats=repeats, bytes_per_s=bytes_per_s))
    except KeyboardInterrupt:  # Ctrl-C, or a time limit's SIGINT (a 7B model's compile can run for minutes): the
        rows.append({"model": label, "mode": mode,  # rows measured so far are kept, and this one says it stopped
                     "error": f"interrupted after {time.perf_counter() - started:.0f} s"})
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"{device.type} (torch threads: " \
        f"{torch.get_num_threads()})"
    return {"device": name, "torch": torch.__version__, "bandwidth_gb_s": bytes_per_s / 1e9, "batch": 1,
            "prompt_len": prompt_len, "new_tokens": new_tokens, "repeats": repeats, "rows": rows}


def write(found: dict, name: str) -> Path:
    """The figures as JSON under benchmarks/results/ (``name``: the file's name)."""
    figures = {key: value for key, value in found.items() if key != "device"}
    return write_result(name.removesuffix(".json"), figures, device=found["device"],
                        how=f"batch 1, a {found['prompt_len']}-token prompt then {found['new_tokens']} greedy tokens, "
                            f"median of {found['repeats']}; the floor: the bytes a decode step reads over the "
                            "bandwidth measured here")


def main() -> None:
    """The dry run: a tiny random Llama and its cut, eager (and compiled unless --eager_only)."""
    from transformers import AutoModelForCausalLM, LlamaConfig

    from prune.core.recipe import Recipe

    parser = harness.parser(__doc__)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--eager_only", action="store_true")
    args = parser.parse_args()
    config = LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                         num_attention_heads=4, max_position_embeddings=256)
    torch.manual_seed(0)
    with torch.device(args.device):
        model = AutoModelForCausalLM.from_config(config).eval()
    models = {"original": model, "cut": Recipe.block(4, 1, 3).apply(model, None)}
    found = decode_rows(models, modes=("eager",) if args.eager_only else ("eager", "compiled"), prompt_len=16,
                        new_tokens=8, repeats=2)
    print(table(found))
    print(f"\nwritten to {write(found, 'decode_floor_dry_run.json')}")


if __name__ == "__main__":
    main()
