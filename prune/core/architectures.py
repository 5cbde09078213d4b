"""One table: where each architecture keeps its layers, final norm, attention, MLP and prunable widths, for the types
whose structure cannot be read off the model alone (encoders, T5's two stacks, OPT's and GPT-2's names, Pythia's
parallel residual, Phi-3's fused matrices, Gemma's sandwich norms). Every other causal LM transformers builds is read
off its own modules (:mod:`prune.core.structure`): mixtures of experts, hybrids and vision-language checkpoints
included; nothing else in LayerCut branches on model type. Most rows are decoder-only
causal LMs; encoder rows (BERT, RoBERTa, ELECTRA) are masked LMs, whose layers LayerCut reads, cuts, sparsifies and
scores on cloze tasks (:data:`MASKED`); T5 is an encoder-decoder (:data:`SEQ2SEQ`) with two stacks of layers, scored
on cloze tasks through its sentinels. Neither generates here.

A model of two stacks numbers its layers on one line: the encoder's 0 … E − 1, then the decoder's E … E + D − 1
(:func:`decoder_layers`, :func:`stack_spans`). Each stack is analysed on its own residual stream, and a block never
spans both.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, replace

from torch import nn

from prune.core.errors import InvalidCut, UnsupportedArchitecture, quoted
from prune.core.structure import derive, derive_from_config, layer_kinds as structure_kinds

# What a model's head predicts: the next token, the tokens at [MASK] positions, or a target sequence from an encoded
# input
CAUSAL, MASKED, SEQ2SEQ = "causal", "masked", "seq2seq"
KIND_WORDS = {MASKED: "an encoder (a masked LM)", SEQ2SEQ: "an encoder-decoder"}  # how messages name the kinds
ATTENTION, MLP = "attention", "mlp"  # the two blocks of a decoder layer (what a sub-layer drop removes)
KINDS = (ATTENTION, MLP)


@dataclass(frozen=True)
class SubLayers:
    """Names inside one decoder layer: its attention and feed-forward blocks, and what each adds to the residual."""

    attention: str = "self_attn"  # the module a dropped attention replaces
    mlp: str | None = "mlp"  # the module a dropped MLP replaces; None: no single module (OPT's loose fc1/fc2)
    # The module whose output is added to the residual stream, when not the block itself (a post-norm).
    attention_out: str | None = None
    mlp_out: str | None = None
    parallel_flag: str | None = None  # config flag: attention and MLP both read the layer's input (Pythia)
    residual_scale: str | None = None  # config field that scales each block's output before the add (Granite)


@dataclass(frozen=True)
class Width:
    """Where a decoder layer's prunable structures live and how their matrices are laid out (:mod:`prune.width.shrink`).

    ``channels`` and ``heads`` list ``(path in the layer, "axis segment…")``: axis ``out`` slices the
    output rows (and the bias), ``in`` the input columns. The segments are concatenated along that
    axis, each holding every unit in order: ``q`` the query heads of one KV group (heads / groups ×
    head_dim), ``kv`` one KV head (head_dim), ``c`` one MLP channel. The one ``in`` entry of a kind
    is the matrix that writes the residual stream: its inputs are what the importance reads.
    """

    channels: tuple[tuple[str, str], ...]
    channel_field: str = "intermediate_size"  # the config field that sizes the MLP
    # None: the config derives head_dim from hidden_size / num_attention_heads, so a reloaded model
    # could not keep the head size: heads are kept. Else the config has num_attention_heads,
    # num_key_value_heads and honours an explicit head_dim.
    heads: tuple[tuple[str, str], ...] | None = None


_GATED_MLP = (("mlp.gate_proj", "out c"), ("mlp.up_proj", "out c"), ("mlp.down_proj", "in c"))
_QKVO = (("self_attn.q_proj", "out q"), ("self_attn.k_proj", "out kv"), ("self_attn.v_proj", "out kv"),
         ("self_attn.o_proj", "in q"))
_LLAMA_WIDTH = Width(channels=_GATED_MLP, heads=_QKVO)


@dataclass(frozen=True)
class Architecture:
    """Attribute paths from the top-level *ForCausalLM (or *ForMaskedLM) module."""

    layers: str  # the nn.ModuleList of decoder (or encoder) layers
    final_norm: str | None  # applied to the last residual state before the LM head; None: none (post-norm encoders)
    # In each decoder layer: the norm of the residual stream entering the feed-forward block
    # (Llama's post_attention_layernorm, whose output the zigzag authors read); None: no such norm.
    ffn_norm: str | None = "post_attention_layernorm"
    sublayers: SubLayers = SubLayers()
    width: Width | None = _LLAMA_WIDTH  # None: no width pruning (see width_of)
    kind: str = CAUSAL  # CAUSAL, MASKED or SEQ2SEQ: which Auto class loads it, what it can be asked
    stacks: tuple[str, ...] = ()  # every nn.ModuleList of layers, when more than ``layers`` (T5: encoder, decoder)
    # A module path in a stack's first layer that holds what the whole stack reads, with its flag (T5's first
    # self-attention computes the relative position bias every later layer reuses); a cut that removes the first
    # layer hands it to the new first layer.
    first_layer_owns: tuple[str, str, str] | None = None  # (module path, submodule, flag)
    stack_fields: tuple[str, ...] = ()  # the config field that counts each stack's layers (T5: num_decoder_layers)
    config_path: str = ""  # the config that counts the layers: the model's own, or its "text_config" (a VLM)
    derived: bool = False  # read off the model (prune.core.structure), not a row of the table


def _encoder(prefix: str) -> Architecture:
    """A BERT-style post-norm encoder under ``prefix``: each layer's attention, then intermediate and output denses,
    each followed by its own LayerNorm; no final norm."""
    return Architecture(layers=f"{prefix}.encoder.layer", final_norm=None, ffn_norm=None,
                        sublayers=SubLayers(attention="attention", mlp=None), width=None, kind=MASKED)


_DECODER = Architecture(layers="model.layers", final_norm="model.norm")
_POST_NORMS = SubLayers(attention_out="post_attention_layernorm", mlp_out="post_feedforward_layernorm")
_SANDWICH = replace(_DECODER, ffn_norm="pre_feedforward_layernorm",  # post_attention_layernorm normalises attn's output
                    sublayers=_POST_NORMS)

ARCHITECTURES: dict[str, Architecture] = {
    "llama": _DECODER,
    "mistral": _DECODER,
    "mixtral": replace(_DECODER, width=None),  # experts: each its own MLP
    "qwen2": _DECODER,
    "qwen3": _DECODER,
    "gemma": _DECODER,
    "gemma2": _SANDWICH,
    "gemma3_text": _SANDWICH,
    "phi3": replace(_DECODER, width=Width(channels=(("mlp.gate_up_proj", "out c c"), ("mlp.down_proj", "in c")),
                                          heads=(("self_attn.qkv_proj", "out q kv kv"), ("self_attn.o_proj", "in q")))),
    "olmo": _DECODER,
    # norms only sublayer outputs; the MLP reads the raw residual; q_norm / k_norm span all heads
    "olmo2": replace(_DECODER, ffn_norm=None, sublayers=_POST_NORMS, width=replace(_LLAMA_WIDTH, heads=_QKVO + (
        ("self_attn.q_norm", "out q"), ("self_attn.k_norm", "out kv")))),
    "granite": replace(_DECODER, sublayers=SubLayers(residual_scale="residual_multiplier")),
    "smollm3": _DECODER,
    # post_attention_layernorm; with Pythia's parallel residual it normalises the layer's input (the authors' Pythia
    # too)
    "gpt_neox": Architecture(layers="gpt_neox.layers", final_norm="gpt_neox.final_layer_norm",
                             sublayers=SubLayers(attention="attention", parallel_flag="use_parallel_residual"),
                             width=Width(channels=(("mlp.dense_h_to_4h", "out c"), ("mlp.dense_4h_to_h", "in c")))),
    "gpt2": Architecture(layers="transformer.h", final_norm="transformer.ln_f", ffn_norm="ln_2",
                         sublayers=SubLayers(attention="attn"),
                         width=Width(channels=(("mlp.c_fc", "out c"), ("mlp.c_proj", "in c")),
                                     channel_field="n_inner")),
    # OPT-350m normalises after each sublayer; there the per-layer final_layer_norm is the layer's output
    "opt": Architecture(layers="model.decoder.layers", final_norm="model.decoder.final_layer_norm",
                        ffn_norm="final_layer_norm", sublayers=SubLayers(mlp=None, mlp_out="fc2"),
                        width=Width(channels=(("fc1", "out c"), ("fc2", "in c")), channel_field="ffn_dim")),
    "bert": _encoder("bert"),
    "roberta": _encoder("roberta"),
    "electra": _encoder("electra"),
    # two pre-norm stacks; each block's layer.0 is self-attention, the decoder's layer.1 cross-attention, the last the
    # MLP
    "t5": Architecture(layers="encoder.block", final_norm="encoder.final_layer_norm", ffn_norm=None,
                       sublayers=SubLayers(attention="layer.0", mlp=None), width=None, kind=SEQ2SEQ,
                       stacks=("encoder.block", "decoder.block"), stack_fields=("num_layers", "num_decoder_layers"),
                       first_layer_owns=("layer.0.SelfAttention", "relative_attention_bias",
                                         "has_relative_attention_bias")),
}

# Config fields that hold one entry per layer besides the generic "list as long as the
# layer count" rule (they can be shorter or hold indices, so they need naming).
PER_LAYER_INDEX_FIELDS = ("mlp_only_layers", "no_rope_layers", "moe_layers")


_DERIVED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # a model → its derived Architecture


def architecture_of(model_or_config) -> Architecture:
    """The table row for a model (or config), else its structure read off the model (a config: off a model built on
    the meta device); a one-line refusal for a structure that is not understood."""
    config = getattr(model_or_config, "config", model_or_config)
    model_type = getattr(config, "model_type", None)
    if model_type in ARCHITECTURES:
        return ARCHITECTURES[model_type]
    if not is_causal_type(model_type):
        raise UnsupportedArchitecture(f"LayerCut reads causal language models; transformers has none of model type "
                                      f"{quoted(model_type)}.")
    if not isinstance(model_or_config, nn.Module):
        return _from_structure(derive_from_config(config))  # cached by the config's content
    if model_or_config not in _DERIVED:
        _DERIVED[model_or_config] = _from_structure(derive(model_or_config))
    return _DERIVED[model_or_config]


def is_causal_type(model_type: str | None) -> bool:
    """Whether transformers builds a causal LM (or a vision-language model with a causal text decoder) of this type."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES


def _from_structure(found) -> Architecture:
    """The table's row for a structure :func:`prune.core.structure.derive` read."""
    sublayers = SubLayers(attention=found.attention or "self_attn", mlp=found.mlp, residual_scale=found.residual_scale,
                          **({"attention_out": "post_attention_layernorm", "mlp_out": "post_feedforward_layernorm"}
                             if found.sandwich else {}))
    return Architecture(layers=found.layers, final_norm=found.final_norm, ffn_norm=found.ffn_norm,
                        sublayers=sublayers, width=_LLAMA_WIDTH if found.llama_like else None,
                        config_path=found.config_path, derived=True)


def layer_config(model_or_config):
    """The config that counts the layers and holds their per-layer lists: the model's own, or a VLM's text config."""
    config = getattr(model_or_config, "config", model_or_config)
    path = architecture_of(model_or_config).config_path
    return getattr(config, path) if path else config


def width_of(model_or_config) -> Width:
    """The width-pruning row for a model (or config); a clear error where there is none."""
    config = getattr(model_or_config, "config", model_or_config)
    arch = architecture_of(model_or_config)
    if arch.width is None:
        supported = ", ".join(sorted(k for k, v in ARCHITECTURES.items() if v.width is not None))
        why = (f"the width of {KIND_WORDS[arch.kind]} is not pruned yet" if arch.kind != CAUSAL else
               "its layers are not all Llama's q, k, v, o and gated MLP: a mixture of experts, or a hybrid"
               if arch.derived else
               "a mixture of experts has one MLP per expert")
        raise UnsupportedArchitecture(f"LayerCut cannot prune the width of model type {quoted(config.model_type)} "
                                      f"({why}). Width pruning supports: {supported} and other models whose layers "
                                      "are Llama's.")
    return arch.width


def width_refusal(model: nn.Module) -> str | None:
    """None where width pruning applies to ``model``, else :func:`width_of`'s one line."""
    try:
        width_of(model)
    except UnsupportedArchitecture as err:
        return str(err)
    return None


def residual_scale(model: nn.Module) -> float:
    """What the architecture multiplies each block's output by before adding it to the residual stream (Granite's
    residual multiplier; 1 elsewhere)."""
    name = architecture_of(model).sublayers.residual_scale
    return float(getattr(layer_config(model), name)) if name else 1.0


def get_path(root: nn.Module, path: str) -> nn.Module:
    """Follow a dotted attribute path."""
    module = root
    for name in path.split("."):
        module = getattr(module, name)
    return module


def block_in(layer: nn.Module, name: str | None) -> nn.Module | None:
    """A layer's attention or MLP block by the table's name, or None where this layer has none (a hybrid's
    linear-attention, state-space or convolution layer has no attention; a dropped block is still there)."""
    if name is None:
        return None
    try:
        return get_path(layer, name)
    except AttributeError:
        return None


def layer_kinds(model: nn.Module) -> list[str]:
    """Each decoder layer's kind, "linear attention · experts" (:func:`prune.core.structure.layer_kinds`)."""
    return structure_kinds(model, decoder_layers(model), layer_config(model))


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The model's list of decoder layers; for a model of two stacks, both stacks' layers in one new list (read it;
    a cut rebuilds each stack's own list)."""
    arch = architecture_of(model)
    if arch.stacks:
        return nn.ModuleList(layer for stack in layer_stacks(model) for layer in stack)
    return get_path(model, arch.layers)


def final_norm(model: nn.Module) -> nn.Module:
    """The norm between the last layer and the LM head; what reads it refuses an encoder, which has none, and an
    encoder-decoder, whose head reads the decoder's."""
    check_causal(model, "This step")
    return get_path(model, architecture_of(model).final_norm)


def kind_of(model_or_config) -> str:
    """CAUSAL, MASKED or SEQ2SEQ: what the model's head predicts (see the table)."""
    return architecture_of(model_or_config).kind


def check_causal(model_or_config, what: str) -> None:
    """A one-line refusal of ``what`` (e.g. "Generation") for an encoder or an encoder-decoder."""
    kind = kind_of(model_or_config)
    if kind != CAUSAL:
        config = getattr(model_or_config, "config", model_or_config)
        raise UnsupportedArchitecture(f"{what} needs a causal (decoder-only) language model; "
                                      f"{quoted(config.model_type)} is {KIND_WORDS[kind]}, which fills blanks: "
                                      "ask it cloze tasks (cbt_style_cn, …), sparsify it, or cut layers by angular "
                                      "distance, Block Influence or relative magnitude.")


def layer_stacks(model: nn.Module) -> list[nn.ModuleList]:
    """Every list of layers the model has, in the order its forward runs them (T5: encoder, then decoder)."""
    arch = architecture_of(model)
    return [get_path(model, path) for path in arch.stacks or (arch.layers,)]


def stack_spans(model: nn.Module) -> list[tuple[str, int, int]]:
    """Each stack's name and its layers ``[start, end)`` in the one numbering: ``[("encoder", 0, 6), ("decoder",
    6, 12)]``; ``[("layers", 0, L)]`` for a model of one stack."""
    arch, spans, start = architecture_of(model), [], 0
    for path, stack in zip(arch.stacks or (arch.layers,), layer_stacks(model)):
        spans.append((path.split(".")[0] if arch.stacks else "layers", start, start + len(stack)))
        start += len(stack)
    return spans


def emptied_stack(spans, removed) -> tuple[str, int, int] | None:
    """The first of ``spans`` (:func:`stack_spans`) whose every layer is in ``removed``, or None."""
    return next(((name, start, end) for name, start, end in spans
                 if end > start and all(i in removed for i in range(start, end))), None)


def check_stacks_kept(model: nn.Module, removed: list[int]) -> None:
    """A one-line refusal of a cut that would leave a stack of an encoder-decoder without a layer."""
    if (found := emptied_stack(stack_spans(model), removed)) is not None:
        name, start, end = found
        raise InvalidCut(f"Cutting layers {start}…{end - 1} would remove every layer of the {name}; each stack "
                         "keeps at least one.")


def num_layers(model: nn.Module) -> int:
    return len(decoder_layers(model))
