"""Exports: a derived model saved as a normal Hugging Face folder, with a model card and the same
cut written for mergekit and llama.cpp, made atomically and kept within a disk budget.

An export is built in a hidden staging folder beside its target and renamed into place, so a
reader never sees half a checkpoint; a killed export leaves only a hidden ``*.layercut-partial``
folder that :func:`remove_leftovers` clears. A folder is a LayerCut export when it holds the
marker file ``layercut.json``; nothing else is ever replaced or removed.

Layer numbering in the mergekit and llama.cpp texts is the base model's, 0-based:

* mergekit (arcee-ai/mergekit ``mergekit/config.py``, ``mergekit/plan.py``): a passthrough merge
  concatenates ``slices``, each ``sources: [{model, layer_range: [start, end]}]`` with ``end``
  exclusive (``plan_slice`` takes ``layer_range[1] - layer_range[0]`` layers from
  ``layer_range[0]``); ``dtype`` is ``bfloat16``, ``float16`` or ``float32``
  (``mergekit/common.py`` ``dtype_from_name``).
* llama.cpp (ggml-org/llama.cpp ``tools/quantize/quantize.cpp`` ``parse_layer_prune``,
  ``src/llama-quant.cpp`` ``remap_layer``): ``--prune-layers L0,L1,...`` is a comma-separated
  list of non-negative block ids (``blk.N``); those blocks are dropped, the rest renumbered and
  the block count updated. The output type ``COPY`` copies tensors without requantizing.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
from datetime import datetime, timezone
from pathlib import Path

import psutil
import yaml
from torch import nn

import prune
from prune.architectures import decoder_layers
from prune.errors import InvalidCut, InvalidInput
from prune.loading import _DEFAULT_GGUF, DEFAULT_MODEL
from prune.paths import write_atomic
from prune.recipe import CONFIG_FIELD, DepthCut, Recipe

from .measurement import Measurement, to_markdown
from .memory import folder_bytes, num_params, save_checkpoint

MARKER = "layercut.json"  # present in every finished export, and only there
CARD = "README.md"
MERGEKIT_FILE = "mergekit.yml"
LLAMA_FILE = "llama-quantize-prune-layers.txt"
PARTIAL = ".layercut-partial"  # suffix of staging folders and of exports being replaced or removed
MAX_NAME = 80

_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,%d}" % (MAX_NAME - 1))
_LEFTOVER = re.compile(r"\..+-(?P<pid>\d+)-[0-9a-f]{8}" + re.escape(PARTIAL))
_HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")
_HUB_IDS = {DEFAULT_MODEL: "HuggingFaceTB/SmolLM2-135M-Instruct"}  # the embedded GGUF's source model
_MERGEKIT_DTYPES = ("bfloat16", "float16", "float32")


# ---------------------------------------------------------------- names


def check_export_name(name: str) -> str:
    """A folder name as typed, or a clear error: names are never silently changed."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise InvalidInput(
            f"'{name}' is not a valid export name: use 1–{MAX_NAME} letters, digits, '.', '_' or '-', "
            "not starting with '.'."
        )
    return name


def default_export_name(base_name: str, recipe: Recipe) -> str:
    """'SmolLM2-135M-Instruct-minus-6-layers-20-25': base model and cut, within the name rules."""
    base = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(str(base_name).rstrip("/")).name).lstrip(".") or "model"
    removed = base_layers_removed(recipe)
    if removed is None:
        what = f"layercut-{recipe.key[:8]}"
    else:
        plural = "layer" if len(removed) == 1 else "layers"
        runs = _runs(removed)
        ids = f"{runs[0][0]}-{runs[0][1] - 1}" if len(runs) == 1 else "_".join(map(str, removed))
        what = f"minus-{len(removed)}-{plural}-{ids}"
        if len(what) > MAX_NAME // 2:
            what = f"minus-{len(removed)}-{plural}-{recipe.key[:8]}"
    return f"{base[:MAX_NAME - len(what) - 1]}-{what}"


# ---------------------------------------------------------------- the cut in other tools' terms


def base_layers_removed(recipe: Recipe) -> tuple[int, ...] | None:
    """The base model's removed layers when every step is a depth cut (chained cuts composed), else None."""
    if recipe.is_original or not all(isinstance(s, DepthCut) for s in recipe.steps):
        return None
    kept = list(range(recipe.steps[0].num_layers))  # base index of each current layer
    for cut in recipe.steps:
        if cut.num_layers != len(kept):
            raise InvalidCut(f"A step made for {cut.num_layers} layers follows one that leaves {len(kept)}.")
        kept = [k for i, k in enumerate(kept) if i not in cut.layers]
    return tuple(i for i in range(recipe.steps[0].num_layers) if i not in kept)


def mergekit_yaml(recipe: Recipe, base_name: str, dtype=None) -> str:
    """A mergekit passthrough config that rebuilds the cut from the base model's own weights."""
    removed = _depth_only(recipe, "mergekit")
    num_layers = recipe.steps[0].num_layers
    kept = [i for i in range(num_layers) if i not in removed]
    model = _hub_id(base_name) or str(base_name)
    config = {"slices": [{"sources": [{"model": model, "layer_range": [start, end]}]} for start, end in _runs(kept)],
              "merge_method": "passthrough"}
    name = str(dtype).removeprefix("torch.") if dtype is not None else ""
    if name in _MERGEKIT_DTYPES:
        config["dtype"] = name
    header = (f"# The LayerCut cut {recipe.short()} of {base_name} as a mergekit passthrough merge:\n"
              f"# kept layers as slices, layer_range [start, end) 0-based, end exclusive.\n"
              f"# Run: mergekit-yaml {MERGEKIT_FILE} ./pruned-model\n")
    return header + yaml.safe_dump(config, sort_keys=False, default_flow_style=None)


def llama_prune_argument(recipe: Recipe) -> str:
    """``--prune-layers 20,21,...``: the removed blocks, 0-based, as llama-quantize parses them."""
    return "--prune-layers " + ",".join(map(str, _depth_only(recipe, "llama.cpp")))


def _llama_command(recipe: Recipe, base_name: str) -> str:
    """The whole command: COPY keeps the GGUF's own tensor types and only drops the blocks."""
    return f"llama-quantize {llama_prune_argument(recipe)} {_gguf_name(base_name)} pruned.gguf COPY"


def _llama_file(recipe: Recipe, base_name: str) -> str:
    usage = f"# Remove the same layers from a GGUF of {base_name}: {_llama_command(recipe, base_name)}"
    return f"{usage}\n{llama_prune_argument(recipe)}\n"


def _depth_only(recipe: Recipe, tool: str) -> tuple[int, ...]:
    removed = base_layers_removed(recipe)
    if removed is None:
        raise InvalidInput(f"Only depth cuts can be written for {tool}; this recipe is: {recipe.describe()}.")
    return removed


def _runs(indices) -> list[tuple[int, int]]:
    """Sorted indices as contiguous [start, end) runs."""
    runs: list[list[int]] = []
    for i in sorted(indices):
        if runs and runs[-1][1] == i:
            runs[-1][1] = i + 1
        else:
            runs.append([i, i + 1])
    return [(a, b) for a, b in runs]


def _hub_id(base_name: str) -> str | None:
    """The Hub id a model card can name as ``base_model``; None for a local folder."""
    name = _HUB_IDS.get(str(base_name), str(base_name))
    return name if _HUB_ID.fullmatch(name) and not Path(name).exists() else None


def _gguf_name(base_name: str) -> str:
    """The embedded default's own GGUF (pruned, it holds this export's weights, still quantized), else a placeholder."""
    if base_name == DEFAULT_MODEL:
        return _DEFAULT_GGUF
    return f"{Path(str(base_name).rstrip('/')).name}.gguf"


# ---------------------------------------------------------------- the model card


def model_card(model: nn.Module, recipe: Recipe, *, base_name: str, num_layers: int, name: str = "",
               scores: list[Measurement] | None = None, origin: str = "") -> str:
    """README.md: what was cut from which model and how it was chosen, scores, loading, other tools."""
    name = name or default_export_name(base_name, recipe)
    removed = base_layers_removed(recipe)
    hub = _hub_id(base_name)
    front = {**({"base_model": hub} if hub else {}), "library_name": "transformers",
             "tags": ["layercut", "pruned"] + (["depth-pruning"] if removed is not None else [])}
    lines = ["---", yaml.safe_dump(front, sort_keys=False).strip(), "---", "", f"# {name}", "",
             f"Derived from **{base_name}** by LayerCut {prune.__version__}"
             + (": whole decoder layers removed, the kept layers unchanged." if removed is not None else "."), "",
             "## What was done", "", f"- Base model: `{base_name}` ({num_layers} layers)"]
    if origin:
        lines.append(f"- Base weights from: {origin}")
    lines.append(f"- Recipe: {recipe.describe()}")
    if removed is not None:
        kept = [i for i in range(num_layers) if i not in removed]
        lines.append(f"- Removed layers (0-based, base model numbering): {', '.join(map(str, removed))} "
                     f"— {len(removed)} of {num_layers}; kept: "
                     + ", ".join(f"[{a}, {b})" for a, b in _runs(kept)) + " (end exclusive)")
        counts = _parameter_counts(model, len(removed))
        if counts:
            before, after = counts
            lines.append(f"- Parameters: {before:,} → {after:,} ({100 * (before - after) / before:.1f} % removed)")
    lines.append(f"- Chosen by: {recipe.origin or 'not recorded'}")
    lines += ["", "The saved config records the recipe under `layercut`.", ""]
    if scores:
        lines += ["## Measured scores", "", to_markdown(scores).rstrip(), ""]
    lines += ["## How to load", "", "```python", "from transformers import AutoModelForCausalLM, AutoTokenizer", "",
              f'model = AutoModelForCausalLM.from_pretrained("./{name}")',
              f'tokenizer = AutoTokenizer.from_pretrained("./{name}")', "```", ""]
    lines += ["## The same cut with other tools", ""]
    if removed is None:
        lines += ["This recipe is not a pure depth cut, so it has no mergekit or llama.cpp equivalent; "
                  f"`{MERGEKIT_FILE}` and `{LLAMA_FILE}` are not written.", ""]
    else:
        lines += ["Both read the base model's own files: the result equals this folder only when those hold the "
                  "weights this export was cut from (not, for example, when it was cut from a dequantized GGUF).", "",
                  f"mergekit (`{MERGEKIT_FILE}`):", "", "```yaml",
                  mergekit_yaml(recipe, base_name, _dtype(model)).rstrip(), "```", "",
                  f"llama.cpp (`{LLAMA_FILE}`; block ids are 0-based, the kept blocks are renumbered):", "",
                  "```sh", _llama_command(recipe, base_name), "```", ""]
    return "\n".join(lines)


def _dtype(model: nn.Module):
    return next(model.parameters()).dtype


def _parameter_counts(model: nn.Module, removed: int) -> tuple[int, int] | None:
    """(base, derived) parameters, inferred when all layers have the same size (else None)."""
    sizes = {sum(p.numel() for p in layer.parameters()) for layer in decoder_layers(model)}
    if len(sizes) != 1:
        return None
    after = num_params(model)
    return after + removed * sizes.pop(), after


# ---------------------------------------------------------------- the export


def export(model: nn.Module, tokenizer, recipe: Recipe, *, base_name: str, num_layers: int, target: Path,
           scores: list[Measurement] | None = None, origin: str = "") -> Path:
    """Save the derived model, tokenizer, card and tool configs at ``target``, all or nothing.

    ``model`` is ``recipe.apply(base)``; ``origin`` says where the base weights came from (a Hub id,
    folder or GGUF file) for the card. ``target`` may be new, empty, or an earlier LayerCut export.
    """
    target = Path(target).expanduser()
    check_export_name(target.name)
    if recipe.is_original:
        raise InvalidInput("Nothing to export: the recipe is the original model.")
    if (getattr(model.config, CONFIG_FIELD, None) or {}).get("steps") != recipe.to_json()["steps"]:
        raise InvalidInput(f"The model given was not derived by this recipe ({recipe.describe()}).")
    removed = base_layers_removed(recipe)
    if removed is not None and recipe.steps[0].num_layers != num_layers:
        raise InvalidCut(f"This cut was made for a {recipe.steps[0].num_layers}-layer model, not {num_layers}.")
    target.parent.mkdir(parents=True, exist_ok=True)
    _check_replaceable(target)
    staging = _partial_path(target)
    staging.mkdir()
    try:
        save_checkpoint(model, tokenizer, staging)
        _record_recipe(staging / "config.json", recipe)
        write_atomic(staging / CARD, model_card(model, recipe, base_name=base_name, num_layers=num_layers,
                                                name=target.name, scores=scores, origin=origin))
        if removed is not None:
            write_atomic(staging / MERGEKIT_FILE, mergekit_yaml(recipe, base_name, _dtype(model)))
            write_atomic(staging / LLAMA_FILE, _llama_file(recipe, base_name))
        write_atomic(staging / MARKER, json.dumps({
            "base_model": base_name, "origin": origin, "recipe": recipe.to_json(), "description": recipe.describe(),
            "removed_layers": list(removed) if removed is not None else None,
            "layercut_version": prune.__version__, "created": datetime.now(timezone.utc).isoformat()}, indent=1))
        _swap_in(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


def _record_recipe(config_file: Path, recipe: Recipe) -> None:
    """This recipe's own origin in the saved config: a cached variant may carry another caller's."""
    config = json.loads(config_file.read_text())
    config[CONFIG_FIELD] = recipe.to_json()
    write_atomic(config_file, json.dumps(config, indent=2, sort_keys=True) + "\n")


def _is_export(folder: Path) -> bool:
    return folder.is_dir() and not folder.is_symlink() and (folder / MARKER).is_file()


def _check_replaceable(target: Path) -> None:
    """Refuse anything at ``target`` but nothing, an empty folder or an earlier LayerCut export."""
    if target.is_symlink() or (target.exists() and not (
            target.is_dir() and (_is_export(target) or not any(target.iterdir())))):
        raise InvalidInput(f"Refusing to overwrite {target}: it exists and is not a LayerCut export.")


def _partial_path(target: Path) -> Path:
    """A fresh hidden name beside ``target`` that says which process owns it."""
    return target.parent / f".{target.name}-{os.getpid()}-{secrets.token_hex(4)}{PARTIAL}"


def _swap_in(staging: Path, target: Path) -> None:
    """Rename the finished folder into place; an earlier export there is hidden first, then removed."""
    _check_replaceable(target)  # again: the folder may have changed while the model was saved
    old = None
    if target.exists() and any(target.iterdir()):
        old = _partial_path(target)
        os.rename(target, old)
    try:
        os.replace(staging, target)
    except BaseException:
        if old is not None:
            os.rename(old, target)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


# ---------------------------------------------------------------- housekeeping


def remove_leftovers(root: Path) -> int:
    """Remove the hidden folders of exports whose process died; returns how many were removed."""
    root = Path(root)
    if not root.is_dir():
        return 0
    removed = 0
    for entry in root.iterdir():
        found = _LEFTOVER.fullmatch(entry.name)
        if not found or not entry.is_dir() or entry.is_symlink():
            continue
        pid = int(found["pid"])
        if pid == os.getpid() or psutil.pid_exists(pid):
            continue  # an export still in progress
        shutil.rmtree(entry, ignore_errors=True)
        removed += 1
    return removed


def bound_folder(root: Path, max_bytes: int, keep: Path | None = None) -> list[Path]:
    """Remove the oldest LayerCut exports (never ``keep``) until ``root`` holds at most ``max_bytes``."""
    root = Path(root)
    keep = Path(keep).resolve() if keep is not None else None
    exports = sorted((p for p in root.iterdir() if not p.name.startswith(".") and _is_export(p)
                      and p.resolve() != keep), key=lambda p: (p / MARKER).stat().st_mtime)
    total = folder_bytes(root)
    removed = []
    for folder in exports:
        if total <= max_bytes:
            break
        size = folder_bytes(folder)
        hidden = _partial_path(folder)
        os.rename(folder, hidden)  # readers never see a half-removed export
        shutil.rmtree(hidden, ignore_errors=True)
        total -= size
        removed.append(folder)
    return removed


def model_files_bytes(folder: Path) -> int:
    """Bytes of a saved checkpoint's weights and config files (tokenizer, card and marker left out)."""
    return sum(p.stat().st_size for p in Path(folder).iterdir()
               if p.is_file() and (p.suffix == ".safetensors" or p.name in ("config.json", "generation_config.json")
                                   or p.name.endswith(".index.json")))
