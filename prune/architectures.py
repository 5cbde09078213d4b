"""One table: where each architecture keeps its decoder layers, final norm, attention and MLP.

Adding an architecture is one row here; nothing else in LayerCut branches on model type.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from torch import nn

from .errors import UnsupportedArchitecture


@dataclass(frozen=True)
class SubLayers:
    """Names inside one decoder layer: its attention and feed-forward blocks, and what each adds to the residual."""

    attention: str = "self_attn"  # the module a dropped attention replaces
    mlp: str | None = "mlp"  # the module a dropped MLP replaces; None: no single module (OPT's loose fc1/fc2)
    # The module whose output is added to the residual stream, when not the block itself (a post-norm).
    attention_out: str | None = None
    mlp_out: str | None = None
    cache_argument: str = "past_key_values"  # the keyword by which the attention block receives the KV cache
    parallel_flag: str | None = None  # config flag: attention and MLP both read the layer's input (Pythia)
    residual_scale: str | None = None  # config field that scales each block's output before the add (Granite)


@dataclass(frozen=True)
class Architecture:
    """Attribute paths from the top-level *ForCausalLM module."""

    layers: str  # the nn.ModuleList of decoder layers
    final_norm: str  # applied to the last residual state before the LM head
    # In each decoder layer: the norm of the residual stream entering the feed-forward block
    # (Llama's post_attention_layernorm, whose output the zigzag authors read); None: no such norm.
    ffn_norm: str | None = "post_attention_layernorm"
    sublayers: SubLayers = SubLayers()


_DECODER = Architecture(layers="model.layers", final_norm="model.norm")
_POST_NORMS = SubLayers(attention_out="post_attention_layernorm", mlp_out="post_feedforward_layernorm")
_SANDWICH = replace(_DECODER, ffn_norm="pre_feedforward_layernorm",  # post_attention_layernorm normalises attn's output
                    sublayers=_POST_NORMS)

ARCHITECTURES: dict[str, Architecture] = {
    "llama": _DECODER,
    "mistral": _DECODER,
    "mixtral": _DECODER,
    "qwen2": _DECODER,
    "qwen3": _DECODER,
    "gemma": _DECODER,
    "gemma2": _SANDWICH,
    "gemma3_text": _SANDWICH,
    "phi3": _DECODER,
    "olmo": _DECODER,
    # norms only sublayer outputs; the MLP reads the raw residual
    "olmo2": replace(_DECODER, ffn_norm=None, sublayers=_POST_NORMS),
    "granite": replace(_DECODER, sublayers=SubLayers(residual_scale="residual_multiplier")),
    "smollm3": _DECODER,
    # post_attention_layernorm; with Pythia's parallel residual it normalises the layer's input (the authors' Pythia too)
    "gpt_neox": Architecture(layers="gpt_neox.layers", final_norm="gpt_neox.final_layer_norm",
                             sublayers=SubLayers(attention="attention", cache_argument="layer_past",
                                                 parallel_flag="use_parallel_residual")),
    "gpt2": Architecture(layers="transformer.h", final_norm="transformer.ln_f", ffn_norm="ln_2",
                         sublayers=SubLayers(attention="attn")),
    # OPT-350m normalises after each sublayer; there the per-layer final_layer_norm is the layer's output
    "opt": Architecture(layers="model.decoder.layers", final_norm="model.decoder.final_layer_norm",
                        ffn_norm="final_layer_norm", sublayers=SubLayers(mlp=None, mlp_out="fc2")),
}

# Config fields that hold one entry per layer besides the generic "list as long as the
# layer count" rule (they can be shorter or hold indices, so they need naming).
PER_LAYER_INDEX_FIELDS = ("mlp_only_layers", "no_rope_layers")


def architecture_of(model_or_config) -> Architecture:
    """The table row for a model (or config); a clear error for anything else."""
    config = getattr(model_or_config, "config", model_or_config)
    model_type = getattr(config, "model_type", None)
    if model_type not in ARCHITECTURES:
        supported = ", ".join(sorted(ARCHITECTURES))
        raise UnsupportedArchitecture(
            f"LayerCut cannot cut layers of model type '{model_type}'. Supported decoder-only "
            f"architectures: {supported}."
        )
    return ARCHITECTURES[model_type]


def get_path(root: nn.Module, path: str) -> nn.Module:
    """Follow a dotted attribute path."""
    module = root
    for name in path.split("."):
        module = getattr(module, name)
    return module


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The model's list of decoder layers."""
    return get_path(model, architecture_of(model).layers)


def final_norm(model: nn.Module) -> nn.Module:
    """The norm between the last layer and the LM head."""
    return get_path(model, architecture_of(model).final_norm)


def num_layers(model: nn.Module) -> int:
    return len(decoder_layers(model))
