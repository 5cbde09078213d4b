"""A decoder's structure read off the model itself, for the model types the table in :mod:`prune.core.architectures`
does not name: transformers ships dozens of decoders whose layers sit where Llama's do, mixtures of experts, hybrids of
attention with linear-attention, state-space or convolution layers, and vision-language checkpoints whose text decoder
sits under ``model.language_model``.

What is read (:func:`derive`), on a model built on the ``meta`` device from the config (no weights, no memory):

* the layer stack: the ``nn.ModuleList`` whose length is the layer count of the config (or of its ``text_config``),
  the one inside the text decoder (``get_decoder()``) where there are several; the config that counts it;
* the final norm: the last norm module the decoder registers beside its layers;
* in a layer: the attention (``self_attn``, or the first of the names below that every attention layer has), the
  feed-forward block (``mlp``, ``block_sparse_moe``, ``feed_forward``), and the norm before it
  (``post_attention_layernorm``, or ``pre_feedforward_layernorm`` with Gemma's sandwich norms);
* a residual scale from the config (``residual_multiplier``), as Granite's.

A structure that is not understood (no such stack, no final norm) is refused in one line that names what was not
found. Width pruning is derived only for layers exactly like Llama's (q, k, v, o and a gated MLP of ``nn.Linear``s).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from prune.core.errors import UnsupportedArchitecture, quoted

ATTENTION_NAMES = ("self_attn", "attention", "attn", "self_attention")
MLP_NAMES = ("mlp", "block_sparse_moe", "feed_forward", "moe")
FFN_NORMS = ("post_attention_layernorm", "pre_feedforward_layernorm", "ffn_norm", "pre_ff_layernorm")
LLAMA_LIKE = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
              "mlp.up_proj", "mlp.down_proj")


@dataclass(frozen=True)
class Found:
    """What :func:`derive` read: module paths from the top-level model, and the config that counts the layers."""

    layers: str
    final_norm: str
    config_path: str  # "" (the config itself) or "text_config"
    attention: str | None
    mlp: str | None
    ffn_norm: str | None
    sandwich: bool  # Gemma's norms after each block (post_attention_layernorm normalises attention's output)
    llama_like: bool  # every layer holds Llama's q, k, v, o and gated MLP as nn.Linear: width pruning applies
    residual_scale: str | None  # the config field that scales each block's output before the add (Granite's)


def expert_parameters(module: nn.Module) -> list[tuple[str, nn.Parameter]]:
    """Every parameter of three or more dimensions in ``module`` that is not a convolution's kernel (a hybrid's
    short convolution): stacked experts, by name (transformers 5 keeps a layer's experts as [E, …] tensors)."""
    return [(f"{owner}.{name}" if owner else name, p) for owner, child in module.named_modules()
            if not isinstance(child, nn.modules.conv._ConvNd)
            for name, p in child.named_parameters(recurse=False) if p.dim() >= 3]


def layer_count(config) -> tuple[int | None, str]:
    """(the layer count, the config path that holds it): the config's own, else its text config's."""
    if getattr(config, "num_hidden_layers", None):
        return config.num_hidden_layers, ""
    text = getattr(config, "text_config", None)
    return getattr(text, "num_hidden_layers", None), "text_config"


def meta_model(config) -> nn.Module:
    """The causal LM of ``config`` built on the meta device: its modules and shapes, no weights."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config)


_FOUND: dict[str, Found] = {}  # a config's content → what its meta model showed


def derive_from_config(config) -> Found:
    """:func:`derive` on a meta model of ``config`` (cached by the config's content)."""
    key = f"{type(config).__name__}:{config.to_json_string(use_diff=False)}"
    if key not in _FOUND:
        _FOUND[key] = derive(meta_model(config))
    return _FOUND[key]


def _is_norm(module: nn.Module) -> bool:
    return "norm" in type(module).__name__.lower()


def derive(model: nn.Module) -> Found:
    """The structure of ``model``'s decoder (see the module docstring), or a one-line refusal."""
    config = model.config
    count, config_path = layer_count(config)
    model_type = quoted(getattr(config, "model_type", type(model).__name__))
    if not count:
        raise UnsupportedArchitecture(f"LayerCut cannot read model type {model_type}: its config has no layer count "
                                      "(num_hidden_layers).")
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else model
    names = {id(module): name for name, module in model.named_modules()}
    stacks = [m for m in decoder.modules() if isinstance(m, nn.ModuleList) and len(m) == count]
    if not stacks:
        raise UnsupportedArchitecture(f"LayerCut cannot read model type {model_type}: no list of {count} layers was "
                                      "found in its decoder.")
    stack = min(stacks, key=lambda m: names[id(m)].count("."))
    path = names[id(stack)]
    owner_path = path.rpartition(".")[0]
    owner = model.get_submodule(owner_path) if owner_path else model
    norms = [name for name, child in owner.named_children() if _is_norm(child)]
    if not norms:
        raise UnsupportedArchitecture(f"LayerCut cannot read model type {model_type}: no final norm after its "
                                      f"{count} layers was found.")
    layers = list(stack)
    attention = next((n for n in ATTENTION_NAMES if any(hasattr(layer, n) for layer in layers)), None)
    mlp = next((n for n in MLP_NAMES if all(hasattr(layer, n) for layer in layers)), None)
    first = layers[0]
    sandwich = hasattr(first, "post_feedforward_layernorm") and hasattr(first, "pre_feedforward_layernorm")
    ffn_norm = "pre_feedforward_layernorm" if sandwich else next((n for n in FFN_NORMS if hasattr(first, n)), None)
    llama_like = all(all(_is_linear(layer, p) for p in LLAMA_LIKE) for layer in layers)
    counted = getattr(config, config_path) if config_path else config
    scale = "residual_multiplier" if getattr(counted, "residual_multiplier", 1.0) not in (None, 1, 1.0) else None
    return Found(path, f"{owner_path + '.' if owner_path else ''}{norms[-1]}", config_path, attention, mlp, ffn_norm,
                 sandwich, llama_like, scale)


def _is_linear(layer: nn.Module, path: str) -> bool:
    try:
        return isinstance(layer.get_submodule(path), nn.Linear)
    except AttributeError:
        return False


# What a layer mixes tokens with, in the words the config uses (layer_types, layers_block_type) → a short label
_MIXERS = {"full_attention": "attention", "attention": "attention", "sliding_attention": "sliding attention",
           "chunked_attention": "chunked attention", "linear_attention": "linear attention", "mamba": "state space",
           "conv": "convolution", "hybrid": "attention + state space"}
_MODULES = (("self_attn", "attention"), ("self_attention", "attention"), ("linear_attn", "linear attention"),
            ("mamba", "state space"), ("conv", "convolution"))
SHORT = {"attention": "A", "sliding attention": "S", "chunked attention": "C", "linear attention": "L",
         "state space": "M", "convolution": "V", "attention + state space": "A+M"}


def layer_kinds(model: nn.Module, layers, config) -> list[str]:
    """Each layer's kind, "attention · experts": how it mixes tokens (the config's per-layer list, else the modules
    it holds) and whether its feed-forward block is a mixture of experts (a parameter of three dimensions: the
    stacked experts) or dense."""
    listed = getattr(config, "layer_types", None) or getattr(config, "layers_block_type", None)
    kinds = []
    for index, layer in enumerate(layers):
        if listed is not None and len(listed) == len(layers) and listed[index] in _MIXERS:
            mixer = _MIXERS[listed[index]]
        else:
            held = [word for name, word in _MODULES if getattr(layer, name, None) is not None]
            mixer = " + ".join(held) or "no attention"
        experts = bool(expert_parameters(layer))
        kinds.append(f"{mixer} · {'experts' if experts else 'dense MLP'}")
    return kinds


def mixed_kinds(kinds: list[str]) -> bool:
    """Whether the layers are of more than one kind (then worth showing)."""
    return len(set(kinds)) > 1 or any("experts" in k for k in kinds)
