"""Speed and memory as deployed: the original, int8 and int4 columns' batch-1 decode against the memory-bandwidth
limit (int8 and int4 also with the LM head in int8, as llama.cpp stores it), and what timing each column adds to the
process's memory high-water mark.

    .venv/bin/python -m benchmarks.deployed [--model llama1b|default] [--layers 8] [--repeats 5] [--compiled]

``llama1b``: a randomly initialised Llama of Llama-3.2-1B's shape (hidden 2048, MLP 8192, 32 heads, 8 KV heads,
vocabulary 128,256, tied head) with ``--layers`` layers, in bfloat16, built here with a fixed seed. ``default``: the
embedded SmolLM2-135M as the app loads it (float32). The columns take turns run by run
(:func:`evaluation.measure.speed.measure_speed`: a 128-token prompt, 32 new tokens, the median of ``--repeats``);
each decode row carries its bytes per token, its floor at this machine's bandwidth and the share of it reached.
Then, column by column, one timed generation again with the kernel's high-water mark reset just before it
(``VmHWM``, exact): its rise against the KV cache it built. ``--compiled``: the columns timed again in the compiled
mode (``evaluation.measure.compiled``; compile time apart). Writes ``benchmarks/results/deployed_default.json`` or
``deployed_llama1b_<layers>layers.json``.
"""

from __future__ import annotations

import gc

from benchmarks import harness
from benchmarks.record import write_result

_MIB = 2**20


def llama_1b_shape(layers: int):
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(hidden_size=2048, intermediate_size=8192, num_attention_heads=32,
                                      num_key_value_heads=8, vocab_size=128256, num_hidden_layers=layers,
                                      max_position_embeddings=4096, tie_word_embeddings=True)
    return transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).eval()


def default_model():
    backend, spec, _info = harness.default_model()
    return backend.models.model(spec)


def layer_bytes(model) -> int:
    """Bytes the decoder layers hold (parameters and buffers, each storage once): the matrices a format shrinks."""
    from prune.core.architectures import decoder_layers
    from prune.core.storage import parts

    seen = {}
    for layer in decoder_layers(model):
        for tensor in [*layer.parameters(), *layer.buffers()]:
            for part in parts(tensor):
                seen[part.data_ptr()] = part.numel() * part.element_size()
    return sum(seen.values())


def high_water_rise(model, ids, new_tokens: int) -> dict:
    """One timed generation with VmHWM reset just before: its rise over the resident memory, and the KV cache."""
    from evaluation.measure import bandwidth, memory, speed

    gc.collect()
    if not memory._reset_peak_rss():
        return {"rise_MiB": None, "why": "VmHWM cannot be reset here"}
    base = memory._proc_status("VmRSS")
    speed._run_once(model, ids, new_tokens)
    rise = memory._proc_status("VmHWM") - base
    kv = bandwidth.kv_bytes(model, ids.shape[1] + new_tokens)
    return {"rise_MiB": round(rise / _MIB, 1), "kv_cache_MiB": round(kv / _MIB, 1)}


def main() -> None:
    parser = harness.parser(__doc__)
    parser.add_argument("--model", choices=("llama1b", "default"), default="llama1b")
    parser.add_argument("--layers", type=int, default=8, help="llama1b: decoder layers (Llama-3.2-1B has 16)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--compiled", action="store_true", help="also time each column compiled")
    args = parser.parse_args()
    import torch

    import prune
    from evaluation.measure.speed import measure_speed

    with harness.Clock() as built:
        original = llama_1b_shape(args.layers) if args.model == "llama1b" else default_model()
        columns = {"original": original, **{f"int{bits}{'+head' if head else ''}": prune.Quantize.of(bits, head=head)
                                            .apply(original) for head in (False, True) for bits in (8, 4)}}
    rows = measure_speed(columns, batch_sizes=(1,), prompt_len=128, new_tokens=(32,), repeats=args.repeats)
    decode = {m.model: m for m in rows if m.name.startswith("decode latency")}
    prefill = {m.model: m for m in rows if m.name.startswith("prefill latency")}
    ids = torch.randint(0, original.config.vocab_size, (1, 128), generator=torch.Generator().manual_seed(1))
    found = {}
    for label, model in columns.items():
        row, details = decode[label], decode[label].details
        found[label] = {
            "decode_ms_per_token": round(row.value, 2), "decode_iqr_ms": round(row.spread, 2),
            "speed_vs_original": round(decode["original"].value / row.value, 2),
            "prefill_ms": round(prefill[label].value, 1),
            "layer_weights_MiB": round(layer_bytes(model) / _MIB, 1),
            **{key: details.get(key) for key in ("bytes_per_token", "floor_ms", "limit_share", "bandwidth_GBps",
                                                 "ideal_speedup", "ideal_by", "kernel")},
            "timing_memory": high_water_rise(model, ids, 33),
        }
    if args.compiled:
        rows = measure_speed(columns, batch_sizes=(1,), prompt_len=128, new_tokens=(32,), repeats=args.repeats,
                             compiled=True)
        timed = {m.model: m for m in rows if m.name.startswith("decode latency")}
        compile_s = {m.model: m.value for m in rows if m.name.startswith("compile time")}
        for label, row in timed.items():
            found[label]["compiled"] = {"decode_ms_per_token": round(row.value, 2),
                                        "speed_vs_original": round(timed["original"].value / row.value, 2),
                                        "limit_share": row.details.get("limit_share"),
                                        "compile_s": round(compile_s[label], 1)}
    found["int4"]["layer_weights_vs_int8"] = round(found["int4"]["layer_weights_MiB"] /
                                                   found["int8"]["layer_weights_MiB"], 3)
    result = {"dtype": str(next(original.parameters()).dtype).removeprefix("torch."), "columns": found,
              "build_s": round(built.wall, 1), "threads": torch.get_num_threads()}
    name = args.model if args.model == "default" else f"{args.model}_{args.layers}layers"
    path = write_result(f"deployed_{name}", result,
                        model=args.model if args.model == "default" else
                        f"random Llama-3.2-1B shape, {args.layers} layers",
                        how="measure_speed: batch 1, 128-token prompt, 32 new tokens, columns taking turns, median of "
                            f"{args.repeats}; memory: VmHWM rise over VmRSS during one more timed generation")
    print(path.read_text())


if __name__ == "__main__":
    main()
