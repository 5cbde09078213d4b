"""What LayerCut does for each architecture transformers ships that people pick today: tiny random models of each type
(tests/tiny_architectures.py), each loaded, analysed, cut, generated, exported and reloaded (as the test suite does),
and every family tried on it: what it builds, or the one line it refuses with.

    .venv/bin/python -m benchmarks.architectures

Writes ``benchmarks/results/architectures.json``; docs/architectures.md's table is rendered from it.
"""

from __future__ import annotations

import re
import sys
import tempfile
import time
from pathlib import Path

import torch

from benchmarks import REPO, harness
from benchmarks.record import write_result

IDS = torch.tensor([[5, 6, 7, 8, 9, 10]])


def families(model, tokenizer, gguf_model, gguf_tokenizer) -> dict:
    """Each family tried on ``model``: "yes" (and a family that changes matrices reached every stacked expert), or the
    first sentence of its refusal; GGUF on ``gguf_model``, the same type with the default model's vocabulary (a
    tokenizer llama.cpp's converter knows)."""
    import prune
    from prune.core.architectures import layer_kinds
    from prune.core.calibration import Calibration
    from prune.core.errors import LayerCutError

    calibration = Calibration(n_samples=8, seq_len=64)

    attended = next((i for i, kind in enumerate(layer_kinds(model)) if kind.startswith(("attention", "sliding",
                                                                                       "chunked"))), 1)
    tries = {
        "depth cut": lambda: prune.cut(model, 1, 2),
        "attention drop": lambda: prune.SubLayerDrop.of(4, attention=[attended]).apply(model),
        "MLP drop": lambda: prune.SubLayerDrop.of(4, mlp=[1]).apply(model),
        "Wanda": lambda: prune.sparsify(model, tokenizer, "wanda", 0.5, calibration=calibration),
        "width": lambda: prune.shrink_width(model, tokenizer, param_ratio=0.9),
        "low rank": lambda: prune.decompose(model, space="weight", param_ratio=0.9),
        "int8": lambda: prune.Quantize.of(8).apply(model),
        "int4": lambda: prune.Quantize.of(4).apply(model),
        "int4 GPTQ": lambda: prune.Quantize.of(4, method="gptq", calibration=calibration).apply(model, tokenizer),
        "GGUF": lambda: _gguf_runs(prune.cut(gguf_model, 1, 3), gguf_tokenizer),
    }
    found = {}
    for name, attempt in tries.items():
        try:
            variant = attempt()
            with torch.no_grad():
                if variant is not None:
                    assert torch.isfinite(variant(IDS).logits).all()
                    assert _reached_experts(name, variant), f"{name} left an expert stack as it was"
            found[name] = "yes"
        except LayerCutError as err:
            found[name] = re.split(r"\. |: \d", str(err))[0]  # its first sentence, without this model's figures
    return found


def _reached_experts(family: str, variant) -> bool:
    """Whether a family that changes matrices changed every stacked expert (quantized, or half zero)."""
    from prune.core.experts import decoder_experts
    from prune.core.storage import is_quantized

    stacks = [p for _, p in decoder_experts(variant)]
    if family.startswith("int"):
        return all(is_quantized(p) for p in stacks)
    if family == "Wanda":
        return all(int((p == 0).sum()) * 2 >= p.numel() for p in stacks)
    return True


def _gguf_runs(model, tokenizer) -> None:
    """``model`` written as an F16 GGUF (LayerCut's writer, or llama.cpp's converter) and run by llama.cpp in a child
    process; an error (one line) where either cannot."""
    import subprocess

    from evaluation.exports import gguf_file
    from llama_helpers import LOGITS_SCRIPT
    from prune.core.errors import InvalidInput

    with tempfile.TemporaryDirectory() as scratch:
        path = gguf_file.write(model, tokenizer, Path(scratch) / "cut.gguf", "F16").path
        done = subprocess.run([sys.executable, "-c", LOGITS_SCRIPT.replace("verbose=False", "verbose=True"), str(path),
                               str(Path(scratch) / "l.npy"), "1,2,3"], capture_output=True, text=True)
    if done.returncode != 0:
        errors = [line for line in done.stderr.splitlines() if "error loading model" in line] or ["it stopped"]
        raise InvalidInput(f"llama.cpp cannot load the GGUF: {errors[0].split('error loading model: ')[-1]}")


def main() -> None:
    harness.parser(__doc__).parse_args()
    sys.path.insert(0, str(REPO / "tests"))
    from tiny_architectures import ARCHITECTURES, tiny
    from transformers import AutoModelForCausalLM

    import prune
    from prune.core.architectures import ARCHITECTURES as TABLE, architecture_of, layer_kinds
    from prune.core.tiny import tiny_tokenizer

    tokenizer = tiny_tokenizer()
    _, default_tokenizer = prune.load_model()  # the default model's: llama.cpp's converter knows it
    rows = {}
    with harness.Clock() as clock:
        for model_type, (kind, _own) in ARCHITECTURES.items():
            began = time.perf_counter()
            folder = Path(tempfile.mkdtemp(prefix=f"layercut-{model_type}-"))
            tiny(model_type).save_pretrained(folder / "source")
            tokenizer.save_pretrained(folder / "source")
            model, _ = prune.load_model(str(folder / "source"), device="cpu")
            prune.score(model, tokenizer, "angular", use_cache=False)
            cut = prune.cut(model, 1, 2)
            cut.save_pretrained(folder / "cut")
            back = AutoModelForCausalLM.from_pretrained(folder / "cut", dtype=torch.float32).eval()
            with torch.no_grad():
                same = torch.allclose(back(IDS).logits, cut(IDS).logits, atol=1e-4)
            rows[model_type] = {"kind": kind, "class": type(model).__name__, "read": "table" if model_type in TABLE
                                else "structure", "layers": architecture_of(model).layers,
                                "layer_kinds": sorted(set(layer_kinds(model))), "reloads_alike": same,
                                **families(model, tokenizer, tiny(model_type, vocab_size=len(default_tokenizer)),
                                           default_tokenizer), "seconds": round(time.perf_counter() - began, 2)}
    write_result("architectures", {"architectures": rows, "seconds": round(clock.wall)},
                 model="tiny random models (hidden 64, 4 layers, 4 experts of which 2 a token)",
                 how="each type built from its own config, shrunk; every family tried on it")
    print({t: {k: v for k, v in r.items() if k != "layer_kinds"} for t, r in rows.items()})


if __name__ == "__main__":
    harness.in_fresh_cache(main)
