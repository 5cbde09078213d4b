"""An outside anchor: each column's batch-1 decode in LayerCut beside the same column's GGUF export in llama.cpp.

    .venv/bin/python -m benchmarks.engines [--model default|llama1b] [--layers 8] [--repeats 5]
        [--llama_python /work/llama-venv/bin/python]

llama.cpp is not one of LayerCut's dependencies: build its Python binding from source, for this benchmark only, in a
venv of its own (5–10 minutes on 2 cores; ``GGML_NATIVE`` compiles for this CPU's instructions)::

    python3 -m venv /work/llama-venv
    CMAKE_ARGS="-DGGML_NATIVE=ON -DLLAMA_CURL=OFF" /work/llama-venv/bin/pip install llama-cpp-python==0.3.36

Columns and their llama.cpp pairs: the original ↔ F16, LayerCut's int8 with an int8 head (``int8+head``) ↔ Q8_0,
int4 with an int8 head ↔ Q4_0 (each GGUF written by LayerCut's own export, ``evaluation/exports/gguf_out.py``, from
that column). Both engines then read a quantized head; llama.cpp also reads its quantized token embedding (one row a
token), LayerCut the original's: the bytes per token say so. ``default``: the
embedded SmolLM2-135M (float32 in LayerCut). ``llama1b``: a random Llama of Llama-3.2-1B's width (hidden 2048, MLP
8192, 32 heads, 8 KV heads, tied head, bfloat16) with ``--layers`` layers and the embedded model's tokenizer (so a
49,152-token vocabulary, not Llama 3's 128,256).

Each turn runs the same 128-token prompt and 32 single-token decode steps in LayerCut
(:func:`evaluation.measure.speed._run_once`, inference mode) and in llama.cpp (``Llama.eval`` one token at a time,
``n_threads`` = torch's threads, each column's model kept loaded in its own process), columns and engines taking
turns so the machine's load falls on all alike; the median of ``--repeats`` turns. Writes
``benchmarks/results/engines_<model>.json``.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks import harness
from benchmarks.record import write_result

PROMPT, NEW = 128, 32
PAIRS = {"original": "F16", "int8+head": "Q8_0", "int4+head": "Q4_0"}

# The llama.cpp side: one process per GGUF, told "run" on stdin, answering each with one JSON line.
CHILD = r"""
import json, sys, time
from llama_cpp import Llama
path, threads, prompt, new = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3]), int(sys.argv[4])
llm = Llama(model_path=path, n_threads=threads, n_threads_batch=threads, n_ctx=len(prompt) + new + 8, verbose=False)
print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    llm.reset()
    started = time.perf_counter()
    llm.eval(prompt)
    prefill = time.perf_counter() - started
    token = int(llm.scores[llm.n_tokens - 1].argmax())
    started = time.perf_counter()
    for _ in range(new - 1):
        llm.eval([token])
        token = int(llm.scores[llm.n_tokens - 1].argmax())
    print(json.dumps({"prefill_ms": 1000 * prefill, "decode_ms": 1000 * (time.perf_counter() - started) / (new - 1)}),
          flush=True)
"""


def llama_1b_width(layers: int, tokenizer):
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(hidden_size=2048, intermediate_size=8192, num_attention_heads=32,
                                      num_key_value_heads=8, vocab_size=len(tokenizer), num_hidden_layers=layers,
                                      max_position_embeddings=4096, tie_word_embeddings=True,
                                      bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    return transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).eval()


class LlamaCpp:
    """One GGUF loaded in llama.cpp in its own process."""

    def __init__(self, python: str, path: Path, threads: int, prompt: list[int]):
        self.process = subprocess.Popen([python, "-c", CHILD, str(path), str(threads), json.dumps(prompt), str(NEW)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert json.loads(self.process.stdout.readline())["ready"]

    def run(self) -> dict:
        self.process.stdin.write("run\n")
        self.process.stdin.flush()
        return json.loads(self.process.stdout.readline())

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(30)


def kv_f16_bytes(config, context: int) -> int:
    """llama.cpp's default KV cache (F16) at ``context`` positions."""
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return 2 * config.num_hidden_layers * config.num_key_value_heads * head_dim * context * 2


def main() -> None:
    parser = harness.parser(__doc__)
    parser.add_argument("--model", choices=("default", "llama1b"), default="default")
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--llama_python", default="/work/llama-venv/bin/python")
    args = parser.parse_args()
    import torch

    import prune
    from evaluation.exports.gguf_out import write_gguf
    from evaluation.measure import bandwidth, speed

    model, tokenizer = prune.load_model(prune.DEFAULT_MODEL)
    if args.model == "llama1b":
        model = llama_1b_width(args.layers, tokenizer)
    columns = {"original": model, "int8+head": prune.Quantize.of(8, head=True).apply(model),
               "int4+head": prune.Quantize.of(4, head=True).apply(model)}
    threads = torch.get_num_threads()
    ids = torch.randint(0, model.config.vocab_size, (1, PROMPT), generator=torch.Generator().manual_seed(0))
    folder = Path(tempfile.mkdtemp(prefix="layercut-engines-"))
    engines, files = {}, {}
    for label, column in columns.items():
        files[label] = write_gguf(column, tokenizer, folder / f"{label}-{PAIRS[label]}.gguf", PAIRS[label])
        engines[label] = LlamaCpp(args.llama_python, files[label], threads, ids[0].tolist())
    ours = {label: [] for label in columns}
    theirs = {label: [] for label in columns}
    try:
        for label, column in columns.items():  # a warm-up of each
            speed._run_once(column, ids, NEW)
            engines[label].run()
        for _ in range(args.repeats):
            for label, column in columns.items():
                ours[label].append(speed._run_once(column, ids, NEW)[1] / (NEW - 1))
                theirs[label].append(engines[label].run()["decode_ms"])
    finally:
        for engine in engines.values():
            engine.close()
    limit = bandwidth.bandwidth(torch.device("cpu"))
    context = PROMPT + NEW // 2
    found = {}
    for label, column in columns.items():
        mine, other = statistics.median(ours[label]), statistics.median(theirs[label])
        mine_bytes = bandwidth.decode_bytes(column, context)
        other_bytes = files[label].stat().st_size + kv_f16_bytes(model.config, context)
        found[label] = {
            "llama_cpp_type": PAIRS[label], "layercut_kernel": prune.quantize.weights.kernel_of(column) or "dense",
            "layercut_ms_per_token": round(mine, 2), "llama_cpp_ms_per_token": round(other, 2),
            "layercut_tokens_per_s": round(1000 / mine, 1), "llama_cpp_tokens_per_s": round(1000 / other, 1),
            "layercut_over_llama_cpp_speed": round(other / mine, 2),
            "layercut_MiB_per_token": round(mine_bytes / 2**20, 1),
            "llama_cpp_MiB_per_token": round(other_bytes / 2**20, 1),
            "layercut_share_of_floor": round(limit.floor_ms(mine_bytes) / mine, 3),
            "llama_cpp_share_of_floor": round(limit.floor_ms(other_bytes) / other, 3),
            "samples_ms": {"layercut": [round(s, 2) for s in ours[label]],
                           "llama_cpp": [round(s, 2) for s in theirs[label]]}}
    result = {"dtype": str(next(model.parameters()).dtype).removeprefix("torch."), "columns": found,
              "bandwidth_GBps": round(limit.bytes_per_s / 1e9, 1), "bandwidth_how": limit.how,
              "llama_cpp_python": subprocess.run(
                  [args.llama_python, "-c", "import llama_cpp; print(llama_cpp.__version__)"], capture_output=True,
                  text=True).stdout.strip()}
    path = write_result(f"engines_{args.model}", result,
                        model="SmolLM2-135M-Instruct (embedded)" if args.model == "default" else
                        f"random Llama of Llama-3.2-1B's width, {args.layers} layers, vocabulary "
                        f"{model.config.vocab_size}",
                        how=f"batch 1, {PROMPT}-token prompt then {NEW - 1} single-token decode steps, median of "
                            f"{args.repeats} turns, columns and engines taking turns; {threads} threads each")
    result = json.loads(path.read_text())
    print(json.dumps({k: v for k, v in result.items() if k != "columns"}, indent=2))
    for label, row in found.items():
        print(f"{label:8} LayerCut {row['layercut_tokens_per_s']:7.1f} tok/s ({row['layercut_share_of_floor']:.0%} of "
              f"floor) | llama.cpp {row['llama_cpp_type']} {row['llama_cpp_tokens_per_s']:7.1f} tok/s "
              f"({row['llama_cpp_share_of_floor']:.0%}) | ratio {row['layercut_over_llama_cpp_speed']}")
    for path in folder.iterdir():
        path.unlink()
    folder.rmdir()
    sys.exit(0)


if __name__ == "__main__":
    main()
