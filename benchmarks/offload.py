"""A model larger than the memory budget, read layer by layer from its files, beside the same model in memory.

    .venv/bin/python -m benchmarks.offload [--hidden 2048 --layers 16 --intermediate 5632]
        [--vocab 49152] [--dtype float32] [--budget 2GiB] [--windows 4 --seq-len 128] [--folder DIR]

Writes a randomly initialised Llama of that shape to ``--folder`` (once; ~4.1 GB in float32 by default), then
runs the same work in two fresh processes, one loading it whole and one with ``LAYERCUT_MEMORY_BUDGET`` set to
``--budget``: load, angular-distance analysis on ``--windows`` WikiText-2 windows (the built-in text when the
data folder is absent), and a depth cut's logits on one window. Each process reports its peak resident memory
(the kernel's VmHWM, memory-mapped file pages included), its peak anonymous memory (RssAnon, read every 2 ms:
without the mapped pages), its weights in memory, and the time of each step. The table prints both side by side,
with whether the scores and the cut's logits are equal. Writes ``benchmarks/results/offload.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from benchmarks import REPO, harness
from benchmarks.record import write_result

_GIB = 2**30


def peak_resident_bytes() -> int:
    """The kernel's high-water mark of this process's resident memory (VmHWM), file-backed pages included."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status (Linux only)")


class AnonymousPeak:
    """The largest anonymous resident memory (RssAnon) seen by a thread reading /proc/self/status every 2 ms: the
    memory the process holds for itself, without the file pages (shared libraries, the mapped checkpoint) that the
    kernel may keep or drop as it likes. A peak shorter than 2 ms can be missed."""

    def __init__(self) -> None:
        import threading

        self.bytes, self._done = 0, threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._done.wait(0.002):
            for line in Path("/proc/self/status").read_text().splitlines():
                if line.startswith("RssAnon:"):
                    self.bytes = max(self.bytes, int(line.split()[1]) * 1024)

    def stop(self) -> int:
        self._done.set()
        self._thread.join()
        return self.bytes


def write_model(folder: Path, args) -> int:
    """A random Llama of the asked shape as a safetensors folder (skipped when there); its weights' bytes."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    config = LlamaConfig(hidden_size=args.hidden, num_hidden_layers=args.layers, intermediate_size=args.intermediate,
                         vocab_size=args.vocab, num_attention_heads=args.hidden // 128,
                         num_key_value_heads=max(1, args.hidden // 512), tie_word_embeddings=False)
    if not (folder / "config.json").exists():
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, args.dtype))
        model.save_pretrained(folder)
        _tokenizer().save_pretrained(folder)
        del model
    from prune.core.loading import weight_bytes_needed

    return weight_bytes_needed(config, getattr(torch, args.dtype))


def _child(folder: str, dtype: str, windows: int, seq_len: int, out: str) -> None:
    import torch

    import prune
    from prune.core.calibration import Calibration, token_windows
    from prune.core.offload import is_offloaded, resident_bytes
    from prune.core.recipe import Recipe

    times, anonymous = {}, AnonymousPeak()
    with harness.Clock() as clock:
        model, tokenizer = prune.load_model(folder, device="cpu", dtype=dtype)
    times["load"] = clock.wall
    calibration = Calibration(n_samples=windows, seq_len=seq_len)
    with harness.Clock() as clock:
        result = prune.score(model, tokenizer, "angular", calibration=calibration, use_cache=False)
    times["angular analysis"] = clock.wall
    start, end = result.best_block(max(1, len(result.layer_scores) // 4))
    with harness.Clock() as clock, torch.no_grad():
        ids = token_windows(tokenizer, calibration)[:1]
        logits = Recipe.block(len(result.layer_scores), start, end).apply(model)(input_ids=ids).logits
    times["cut's logits (1 window)"] = clock.wall
    Path(out).write_text(json.dumps({
        "offloaded": is_offloaded(model), "resident": resident_bytes(model), "peak": peak_resident_bytes(),
        "anonymous peak": anonymous.stop(),
        "times": times, "scores": [float(s) for s in result.layer_scores], "cut": [start, end],
        "logits": logits[0, -1, :64].tolist()}))


def _tokenizer():
    """The embedded model's tokenizer (the random model has its vocabulary's size by default)."""
    from transformers import AutoTokenizer

    from prune.core.loading import default_checkpoint

    return AutoTokenizer.from_pretrained(default_checkpoint())


def main() -> None:
    parser = harness.parser(__doc__)
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--intermediate", type=int, default=5632)
    parser.add_argument("--vocab", type=int, default=49152, help="at least the embedded tokenizer's 49152")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--budget", default="2GiB")
    parser.add_argument("--windows", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--folder", type=Path, default=Path("/tmp/layercut-offload-model"))
    parser.add_argument("--child", nargs=2, metavar=("FOLDER", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child[0], args.dtype, args.windows, args.seq_len, args.child[1])
        return
    args.folder.mkdir(parents=True, exist_ok=True)
    with harness.Clock() as clock:
        weights = write_model(args.folder, args)
    print(f"model: {weights / _GIB:.2f} GiB of weights ({args.dtype}), ready in {clock.wall:.0f} s")
    runs = {}
    for name, env in (("in memory", {}), (f"budget {args.budget}", {"LAYERCUT_MEMORY_BUDGET": args.budget})):
        out = args.folder / f"run-{len(runs)}.json"
        command = [sys.executable, "-m", __spec__.name, "--child", str(args.folder), str(out), "--dtype", args.dtype,
                   "--windows", str(args.windows), "--seq-len", str(args.seq_len)]
        clean = {k: v for k, v in os.environ.items() if k != "LAYERCUT_MEMORY_BUDGET"}
        subprocess.run(command, check=True, env={**clean, **env, "PYTHONPATH": str(REPO)})
        runs[name] = json.loads(out.read_text())
    print_table(runs, weights)
    first, second = runs.values()
    write_result("offload", {
        "shape": {key: getattr(args, key) for key in ("hidden", "layers", "intermediate", "vocab", "dtype")},
        "budget": args.budget, "weights_bytes": weights, "scores_equal": first["scores"] == second["scores"],
        "logits_equal": first["logits"] == second["logits"],
        "runs": {name: {k: v for k, v in run.items() if k != "logits"} for name, run in runs.items()}},
        model="random Llama", how=f"the same work in two fresh processes, whole and under the budget: load, angular "
        f"analysis on {args.windows} × {args.seq_len} tokens, a cut's logits on one window; peak: VmHWM; anonymous "
        "peak: RssAnon read every 2 ms; bytes")


def print_table(runs: dict, weights: int) -> None:
    def row(label: str, value) -> None:
        print(f"| {label} | " + " | ".join(value(r) for r in runs.values()) + " |")

    print("| | " + " | ".join(runs) + " |\n|---|" + "---|" * len(runs))
    row("read from disk layer by layer", lambda r: "yes" if r["offloaded"] else "no")
    row("weights in memory (GiB)", lambda r: f"{r['resident'] / _GIB:.2f}")
    row("peak resident (GiB, VmHWM)", lambda r: f"{r['peak'] / _GIB:.2f}")
    row("peak anonymous (GiB, RssAnon)", lambda r: f"{r['anonymous peak'] / _GIB:.2f}")
    for step in next(iter(runs.values()))["times"]:
        row(f"{step} (s)", lambda r, step=step: f"{r['times'][step]:.1f}")
    first, second = runs.values()
    print(f"\nangular scores equal: {first['scores'] == second['scores']}; cut {first['cut']} vs {second['cut']}; "
          f"cut's logits equal: {first['logits'] == second['logits']}")
    for name, key in (("peak saved", "peak"), ("anonymous peak saved", "anonymous peak")):
        saved = first[key] - second[key]
        print(f"{name}: {saved / _GIB:.2f} GiB = {saved / weights:.2f} × the weights ({weights / _GIB:.2f} GiB)")


if __name__ == "__main__":
    main()
