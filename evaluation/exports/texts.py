"""The texts an export carries: its model card, and the same cut for mergekit and llama.cpp.

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

import re
from pathlib import Path

import yaml
from torch import nn

import prune
from prune.core.architectures import CAUSAL, KIND_WORDS, decoder_layers, kind_of
from prune.core.errors import InvalidInput
from prune.core.family import FAMILIES
from prune.core.loading import _DEFAULT_GGUF, DEFAULT_MODEL, auto_class
from prune.lowrank.decomposition import ranks_of
from prune.core.recipe import Recipe
from prune.core.surgery import index_runs
from prune.drop.step import SubLayerDrop
from prune.drop.sublayers import dropped_numel

from evaluation.exports.gguf_out import writes
from evaluation.measure.measurement import Measurement, to_markdown
from prune.core.storage import num_params

MERGEKIT_FILE = "mergekit.yml"
MAX_NAME = 80  # export folder names
LLAMA_FILE = "llama-quantize-prune-layers.txt"
_HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")
_HUB_IDS = {DEFAULT_MODEL: "HuggingFaceTB/SmolLM2-135M-Instruct"}  # the embedded GGUF's source model
_MERGEKIT_DTYPES = ("bfloat16", "float16", "float32")


def default_export_name(base_name: str, recipe: Recipe) -> str:
    """'SmolLM2-135M-Instruct-minus-6-layers-20-25': base model and cut, within the name rules."""
    base = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(str(base_name).rstrip("/")).name).lstrip(".") or "model"
    removed = base_layers_removed(recipe)
    drops = _only_drop(recipe)
    if drops is not None:
        what = "-".join(f"minus-{len(layers)}-{word}" for word, layers in (("attn", drops.attention),
                                                                          ("mlp", drops.mlp)) if layers)
    elif removed is None:
        what = f"layercut-{recipe.key[:8]}"
    else:
        plural = "layer" if len(removed) == 1 else "layers"
        runs = index_runs(removed)
        ids = f"{runs[0][0]}-{runs[0][1] - 1}" if len(runs) == 1 else "_".join(map(str, removed))
        what = f"minus-{len(removed)}-{plural}-{ids}"
        if len(what) > MAX_NAME // 2:
            what = f"minus-{len(removed)}-{plural}-{recipe.key[:8]}"
        what += "".join("-" + re.sub(r"[^A-Za-z0-9]+", "-", s.short()).strip("-") for s in _altering(recipe))
    return f"{base[:MAX_NAME - len(what) - 1]}-{what}"


# ---------------------------------------------------------------- the export



# ---------------------------------------------------------------- the cut in other tools' terms


def _altering(recipe: Recipe) -> list:
    """The steps of a depth cut's recipe that change kept weights the hand-offs cannot carry (the linear patch)."""
    return [s for s in recipe.steps if s.handoff_note()]


def _not_carried(recipe: Recipe, prefix: str = "") -> str:
    """A line for each step the hand-offs cannot carry, each starting with ``prefix`` ('' when there is none)."""
    return "".join(f"{prefix}Not this export: {s.handoff_note()}.\n" for s in _altering(recipe))


def _only_drop(recipe: Recipe):
    """The recipe's one step when it only drops attention/MLP blocks, else None."""
    return recipe.sublayer_drop if len(recipe.steps) == 1 else None


def base_layers_removed(recipe: Recipe) -> tuple[int, ...] | None:
    """The base model's removed layers when every step only removes whole layers (chained cuts composed), else None."""
    first = recipe.first("cut")
    if first is None or recipe.steps[0] is not first:
        return None
    kept: list[int] | None = list(range(first.num_layers))  # base index of each current layer
    for item in recipe.steps:
        kept = item.base_layers(kept)
        if kept is None:
            return None
    return tuple(i for i in range(first.num_layers) if i not in kept)


def mergekit_yaml(recipe: Recipe, base_name: str, dtype=None) -> str:
    """A mergekit passthrough config that rebuilds the cut from the base model's own weights."""
    removed = _depth_only(recipe, "mergekit")
    num_layers = recipe.steps[0].num_layers
    kept = [i for i in range(num_layers) if i not in removed]
    model = _hub_id(base_name) or str(base_name)
    config = {"slices": [{"sources": [{"model": model, "layer_range": [start, end]}]}
                         for start, end in index_runs(kept)],
              "merge_method": "passthrough"}
    name = str(dtype).removeprefix("torch.") if dtype is not None else ""
    if name in _MERGEKIT_DTYPES:
        config["dtype"] = name
    header = (f"# The LayerCut cut {recipe.short()} of {base_name} as a mergekit passthrough merge:\n"
              f"# kept layers as slices, layer_range [start, end) 0-based, end exclusive.\n"
              f"# Run: mergekit-yaml {MERGEKIT_FILE} ./pruned-model\n" + _not_carried(recipe, "# "))
    return header + yaml.safe_dump(config, sort_keys=False, default_flow_style=None)


def llama_prune_argument(recipe: Recipe) -> str:
    """``--prune-layers 20,21,...``: the removed blocks, 0-based, as llama-quantize parses them."""
    return "--prune-layers " + ",".join(map(str, _depth_only(recipe, "llama.cpp")))


def _llama_command(recipe: Recipe, base_name: str) -> str:
    """The whole command: COPY keeps the GGUF's own tensor types and only drops the blocks."""
    return f"llama-quantize {llama_prune_argument(recipe)} {_gguf_name(base_name)} pruned.gguf COPY"


def llama_file_text(recipe: Recipe, base_name: str) -> str:
    usage = f"# Remove the same layers from a GGUF of {base_name}: {_llama_command(recipe, base_name)}"
    return f"{usage}\n{_not_carried(recipe, '# ')}{llama_prune_argument(recipe)}\n"


def _depth_only(recipe: Recipe, tool: str) -> tuple[int, ...]:
    removed = base_layers_removed(recipe)
    if removed is None:
        raise InvalidInput(f"Only depth cuts can be written for {tool}; this recipe is: {recipe.describe()}.")
    return removed


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
               scores: list[Measurement] | None = None, origin: str = "", factored: bool = False,
               gguf: str | None = None, gguf_note: str = "") -> str:
    """README.md: what was cut from which model and how it was chosen, scores, loading, other tools; ``gguf``: the
    name of the GGUF file the export holds beside the folder, if any; ``gguf_note``: how llama.cpp quantized it."""
    name = name or default_export_name(base_name, recipe)
    removed = base_layers_removed(recipe)
    drops = _only_drop(recipe)
    last = _last_of_each_family(recipe)  # the last step of a kind decides what the variant holds
    ranks = ranks_of(model) if recipe.last("lowrank") else {}  # a decomposed variant's ranks
    lines = _card_head(recipe, base_name, name, removed, drops, last)
    lines += _done_lines(model, recipe, base_name, num_layers, origin, removed, drops)
    lines += [line for line in (s.card_line(model, factored) for s in last) if line]
    lines.append(f"- Chosen by: {recipe.origin or 'not recorded'}")
    lines += ["", "The saved config records the recipe under `layercut`.", ""]
    if ranks:
        lines += ["## Ranks", "", *rank_table(ranks), ""]
    if scores:
        lines += ["## Measured scores", "", to_markdown(scores).rstrip(), ""]
    if drops is not None:
        lines += ["## How it is saved", "", DROP_FORMAT, ""]
    lines += _load_lines(model, name, bool(ranks) and factored, drops is not None)
    if gguf is not None:
        own = writes(model)  # LayerCut's writer (transformers' GGUF loader reads its architectures), else the converter
        writer = "LayerCut" if own else "llama.cpp's converter"
        reads = f" transformers reads it too (`from_pretrained(\"./{name}\", gguf_file=\"{gguf}\")`)." if own else ""
        lines += ["## GGUF (llama.cpp, Ollama)", "", f"`{gguf}` holds this model as one GGUF file, written by {writer} "
                  f"with its own metadata ({len(decoder_layers(model))} blocks): `llama-cli -m {gguf}`.{reads}", "",
                  *([gguf_note, ""] if gguf_note else [])]
    return "\n".join(lines + _tools_lines(model, recipe, base_name, removed, drops))


def _card_head(recipe: Recipe, base_name: str, name: str, removed: tuple[int, ...] | None,
               drops: SubLayerDrop | None, last: list) -> list[str]:
    """The card's front matter (base model, library, tags the Hub filters on), title and one line on the cut."""
    hub = _hub_id(base_name)
    tags, how = [], "."
    if removed is not None:
        tags, how = ["depth-pruning"], (": whole decoder layers removed, the kept layers unchanged."
                                        if not _altering(recipe)
                                        else ": whole decoder layers removed, then some kept layers changed (below).")
    elif drops is not None:
        tags = [tag for tag, layers in (("attention-drop", drops.attention), ("mlp-drop", drops.mlp)) if layers]
        how = ": attention or MLP blocks of some layers dropped (He et al. 2024), every other weight unchanged."
    front = {**({"base_model": hub} if hub else {}), "library_name": "transformers",
             "tags": ["layercut", "pruned"] + tags + [s.card_tag for s in last if s.card_tag]}
    return ["---", yaml.safe_dump(front, sort_keys=False).strip(), "---", "", f"# {name}", "",
            f"Derived from **{base_name}** by LayerCut {prune.__version__}{how}", ""]


def _done_lines(model: nn.Module, recipe: Recipe, base_name: str, num_layers: int, origin: str,
                removed: tuple[int, ...] | None, drops: SubLayerDrop | None) -> list[str]:
    """'What was done', up to the steps' own lines: the base model, the recipe, the layers or blocks removed."""
    lines = ["## What was done", "", f"- Base model: `{base_name}` ({num_layers} layers)"]
    if origin:
        lines.append(f"- Base weights from: {origin}")
    lines.append(f"- Recipe: {recipe.describe()}")
    if removed is not None:
        kept = [i for i in range(num_layers) if i not in removed]
        lines.append(f"- Removed layers (0-based, base model numbering): {', '.join(map(str, removed))} "
                     f"— {len(removed)} of {num_layers}; kept: "
                     + ", ".join(f"[{a}, {b})" for a, b in index_runs(kept)) + " (end exclusive)")
        counts = _parameter_counts(model, len(removed))
        if counts:
            before, after = counts
            lines.append(f"- Parameters: {before:,} → {after:,} ({100 * (before - after) / before:.1f} % removed)")
    if drops is not None:
        lines += _drop_lines(model, drops)
    return lines


def _load_lines(model: nn.Module, name: str, factored: bool, dropped: bool) -> list[str]:
    """'How to load': LayerCut's loader for factored weights, else transformers' own (and LayerCut's for drops)."""
    if factored:
        lines = ["## How to load", "", "```python", "import prune", "",
                 f'model, tokenizer = prune.load_model("./{name}")', "```", ""]
    else:
        auto = auto_class(model.config).__name__  # AutoModelForCausalLM, or an encoder's (-decoder's) own
        lines = ["## How to load", "", "```python", f"from transformers import {auto}, AutoTokenizer",
                 "", f'model = {auto}.from_pretrained("./{name}")',
                 f'tokenizer = AutoTokenizer.from_pretrained("./{name}")', "```", ""]
    if dropped:
        lines += ["With LayerCut the dropped blocks are dropped again on load (faster, smaller KV cache):", "",
                  "```python", "import prune", "", f'model, tokenizer = prune.load_model("./{name}")', "```", ""]
    return lines


def _tools_lines(model: nn.Module, recipe: Recipe, base_name: str, removed: tuple[int, ...] | None,
                 drops: SubLayerDrop | None) -> list[str]:
    """'The same cut with other tools': mergekit's and llama.cpp's texts, or why they are not written."""
    lines = ["## The same cut with other tools", ""]
    refusal = llama_refusal(model) if removed is not None and drops is None else None
    if drops is not None:
        return lines + [DROP_TOOLS.format(mergekit=MERGEKIT_FILE, llama=LLAMA_FILE), ""]
    if removed is None:
        return lines + ["This recipe is not a pure depth cut, so it has no mergekit or llama.cpp equivalent; "
                        f"`{MERGEKIT_FILE}` and `{LLAMA_FILE}` are not written.", ""]
    if not tools_read(model):
        return lines + ["mergekit's passthrough merge and llama.cpp's `--prune-layers` number a decoder-only model's "
                        f"layers; this is {KIND_WORDS[kind_of(model)]}, so `{MERGEKIT_FILE}` and `{LLAMA_FILE}` are "
                        "not written.", ""]
    lines += [*(f"**{line}**\n" for line in _not_carried(recipe).splitlines()),
              "Both read the base model's own files: the result equals this folder only when those hold the "
              "weights this export was cut from (not, for example, when it was cut from a dequantized GGUF).", "",
              f"mergekit (`{MERGEKIT_FILE}`):", "", "```yaml",
              mergekit_yaml(recipe, base_name, model_dtype(model)).rstrip(), "```", ""]
    return lines + ([f"llama.cpp: no `--prune-layers` command is written: {refusal}", ""] if refusal else
                    [f"llama.cpp (`{LLAMA_FILE}`; block ids are 0-based, the kept blocks are renumbered):", "",
                     "```sh", _llama_command(recipe, base_name), "```", ""])


def tools_read(model: nn.Module) -> bool:
    """Whether mergekit's and llama.cpp's texts can describe a cut of ``model``: a decoder-only model's layers."""
    return kind_of(model) == CAUSAL


def llama_refusal(model: nn.Module) -> str | None:
    """Why llama.cpp would run this cut wrong from ``llama-quantize --prune-layers`` or a GGUF: it derives a per-layer
    property (Gemma 2/3's sliding windows) from the layer's index, and the cut broke that pattern (None: it would
    not)."""
    from evaluation.exports.gguf_out import pattern_break

    return pattern_break(model.config)


DROP_FORMAT = (
    "A standard transformers config cannot say that a layer has no attention or no MLP, so this folder holds the "
    "dense model: every weight of each dropped block is saved as zero, so that block adds exactly 0 to the residual "
    "stream and any transformers version loads the folder as a normal model with the same outputs, at the original's "
    "size and speed. The config records the dropped blocks (`layercut_dropped_attention`, `layercut_dropped_mlp`, one "
    "flag per layer, and the recipe under `layercut`); LayerCut's `prune.load_model` reads them and removes the blocks "
    "again, so a dropped attention costs no compute and stores no keys or values in the KV cache.")
DROP_TOOLS = (
    "mergekit and llama.cpp describe a model by whole layers: neither can express a layer without its attention or "
    "its MLP, so `{mergekit}` and `{llama}` are not written. Converting this folder to GGUF keeps the zeroed blocks: "
    "the same outputs, without the savings.")


def _last_of_each_family(recipe: Recipe) -> list:
    """The last step of each kind in the recipe, in the order the families are registered."""
    kinds = [f.step.kind for f in FAMILIES.values() if f.step is not None]
    return [s for s in (recipe.last(kind) for kind in kinds) if s is not None]


def rank_table(ranks: dict[tuple[int, str], int]) -> list[str]:
    """Markdown rows: one per decomposed layer, one column per projection (its last path component), "—" where dense."""
    names = list(dict.fromkeys(path for _, path in ranks))  # in the layers' own order
    lines = ["| layer | " + " | ".join(p.rpartition(".")[2] for p in names) + " |", "|---:|" + "---:|" * len(names)]
    for layer in sorted({i for i, _ in ranks}):
        lines.append(f"| {layer} | " + " | ".join(str(ranks.get((layer, p), "—")) for p in names) + " |")
    return lines


def _drop_lines(model: nn.Module, drops: SubLayerDrop) -> list[str]:
    """The dropped blocks and the parameter count, for 'What was done'."""
    lines = [f"- Dropped {what} (0-based layers): {', '.join(map(str, layers))} — {len(layers)} of {drops.num_layers}"
             for what, layers in (("attention", drops.attention), ("MLP", drops.mlp)) if layers]
    after = num_params(model)
    before = after + dropped_numel(model)
    lines.append(f"- Parameters: {before:,} → {after:,} ({100 * (before - after) / before:.1f} % removed; saved as "
                 "zeros, see below)")
    return lines


def model_dtype(model: nn.Module):
    return next(model.parameters()).dtype


def _parameter_counts(model: nn.Module, removed: int) -> tuple[int, int] | None:
    """(base, derived) parameters, inferred when all layers have the same size (else None)."""
    sizes = {sum(p.numel() for p in layer.parameters()) for layer in decoder_layers(model)}
    if len(sizes) != 1:
        return None
    after = num_params(model)
    return after + removed * sizes.pop(), after
