"""Sub-layer drops: a layer keeps its residual path but loses its attention or its MLP (He et al. 2024).

A dropped block is replaced, in a weight-sharing view, by a :class:`DroppedBlock` that adds
nothing to the residual stream: the layer computes ``h + 0`` where it computed ``h + f(h)``.
A dropped attention also stores no keys or values: its slot in the KV cache becomes
transformers' ``DummyLayer`` (what transformers itself uses for attention-free layers), and
the cache reads its length and mask sizes from a layer that still has attention, also when
the dropped one is layer 0.

The model's config records what is dropped, one boolean per layer of *this* model, in
``layercut_dropped_attention`` and ``layercut_dropped_mlp``; a later depth cut slices them like
any per-layer list. A standard transformers config cannot say "layer i has no attention", so
:func:`savable` gives the form LayerCut saves: the dense model, each dropped block's weights
written as zeros (a block whose weights are all zero adds exactly 0), so a plain
``from_pretrained`` gives identical outputs; ``prune.load_model`` reads the record and drops
the blocks again (:func:`restore`), giving back the speed and the smaller KV cache.
"""

from __future__ import annotations

import copy
import inspect
import re
from collections.abc import Iterable

import torch
from torch import nn

from prune.core.architectures import (ATTENTION, KINDS, MLP, architecture_of, block_in, check_causal,
                                      decoder_layers, layer_config, layer_kinds)
from prune.core.errors import InvalidCut, UnsupportedArchitecture
from prune.core.kv import cache_passed
from prune.core.surgery import layer_view

CONFIG_FIELDS = {ATTENTION: "layercut_dropped_attention", MLP: "layercut_dropped_mlp"}
_LABEL = {ATTENTION: "attention", MLP: "MLP"}


class DroppedBlock(nn.Module):
    """Stands in for a dropped attention or MLP block: returns zeros, holds no weights, caches nothing.

    ``tensors`` lists the replaced block's state (name, shape, dtype, device): what a save writes as
    zeros so the checkpoint keeps the architecture's standard layout.
    """

    def __init__(self, kind: str, layer_idx: int, tensors: tuple, beside: int = 0):
        super().__init__()
        self.kind = kind
        self.layer_idx = layer_idx  # renumbered by later cuts, like an attention block's own
        self.tensors = tensors
        # values the replaced block returned beside its output (an attention's weights: 1; gpt-oss's MLP: 1)
        self.beside = beside

    def forward(self, hidden_states, *args, **kwargs):
        zeros = torch.zeros_like(hidden_states)
        if self.kind == MLP:
            return (zeros, *[None] * self.beside) if self.beside else zeros
        cache = cache_passed(kwargs)
        if cache is not None:
            _store_nothing(cache, self.layer_idx)
        return zeros, *[None] * self.beside  # (output, attention weights[, …]), as the layer unpacks it

    def extra_repr(self) -> str:
        return f"{self.kind} dropped, layer_idx={self.layer_idx}"

    def with_zeros(self, allocate: bool = True) -> DroppedBlock:
        """A copy holding the replaced block's tensors as zero buffers under their own names (for saving).

        ``allocate=False`` gives broadcast zeros that own one element each: right shapes and dtypes for
        computing a checkpoint's size, not for writing it.
        """
        clone = DroppedBlock(self.kind, self.layer_idx, self.tensors, self.beside)
        for name, shape, dtype, device in self.tensors:
            owner = clone
            *path, leaf = name.split(".")
            for part in path:
                if part not in owner._modules:
                    owner.add_module(part, nn.Module())
                owner = owner._modules[part]
            zeros = torch.zeros(shape, dtype=dtype, device=device) if allocate else \
                torch.zeros((), dtype=dtype, device=device).expand(shape)
            owner.register_buffer(leaf, zeros)
        return clone


def _dummy_layer() -> type:
    """transformers' cache slot for a layer without attention, or a clear error on a transformers without one."""
    try:
        from transformers.cache_utils import DummyLayer
    except ImportError:
        raise UnsupportedArchitecture("Dropping attention needs a transformers whose cache_utils has DummyLayer "
                                      "(LayerCut is tested with 5.23): upgrade transformers.") from None
    return DummyLayer


def _store_nothing(cache, layer_idx: int) -> None:
    """Make this layer's KV-cache slot a DummyLayer: it stores nothing and is skipped for lengths and masks."""
    DummyLayer = _dummy_layer()
    cache = getattr(cache, "self_attention_cache", cache)  # inside an encoder-decoder wrapper
    layers = getattr(cache, "layers", None)
    if layers is None:
        return
    grow = getattr(cache, "layer_class_to_replicate", None)  # a lazily grown cache: add the slots before this one
    while grow is not None and len(layers) <= layer_idx:
        layers.append(grow())
    if layer_idx < len(layers) and not isinstance(layers[layer_idx], DummyLayer):
        layers[layer_idx] = DummyLayer()


# ---------------------------------------------------------------- what is dropped


def dropped(model_or_config) -> dict[str, list[int]]:
    """``{"attention": [...], "mlp": [...]}``: the layers whose block is dropped, as the config records."""
    config = getattr(model_or_config, "config", model_or_config)
    return {kind: [i for i, flag in enumerate(getattr(config, CONFIG_FIELDS[kind], None) or []) if flag]
            for kind in KINDS}


def block_name(model, kind: str) -> str:
    """The attribute of a decoder layer that holds its attention or MLP block; a clear error where there is none."""
    sub = architecture_of(model).sublayers
    name = sub.attention if kind == ATTENTION else sub.mlp
    if name is None:
        raise UnsupportedArchitecture(
            f"Model type '{model.config.model_type}' has no single {_LABEL[kind]} module to drop (OPT's feed-forward "
            "block is two loose linear layers, fc1 and fc2, inside the decoder layer): drop its attention only.")
    return name


def check_drop(num_layers: int, attention: Iterable[int] = (), mlp: Iterable[int] = (),
               already: dict[str, list[int]] | None = None) -> dict[str, tuple[int, ...]]:
    """Sorted, checked blocks to drop: existing layers, at least one block, never every attention."""
    wanted = {ATTENTION: tuple(sorted(set(int(i) for i in attention))), MLP: tuple(sorted(set(int(i) for i in mlp)))}
    if not wanted[ATTENTION] and not wanted[MLP]:
        raise InvalidCut("No attention or MLP blocks were selected to drop.")
    for kind, layers in wanted.items():
        bad = [i for i in layers if not 0 <= i < num_layers]
        if bad:
            raise InvalidCut(f"Layers {bad} do not exist: the model has layers 0…{num_layers - 1}.")
    if len(set(wanted[ATTENTION]) | set((already or {}).get(ATTENTION, []))) >= num_layers:
        raise InvalidCut(f"Dropping the attention of all {num_layers} layers would leave a model that cannot read "
                         "its context: keep at least one.")
    return wanted


def drop(model: nn.Module, attention: Iterable[int] = (), mlp: Iterable[int] = ()) -> nn.Module:
    """A view of ``model`` without the attention of layers ``attention`` and the MLP of layers ``mlp``.

    Every weight the view keeps is shared with ``model``, which is never altered.
    """
    check_causal(model, "Dropping attention or MLP blocks")
    count = len(decoder_layers(model))
    already = dropped(model)
    wanted = check_drop(count, attention, mlp, already)
    names = {kind: block_name(model, kind) for kind in KINDS if wanted[kind]}
    _check_present(model, names, wanted)
    if wanted[ATTENTION]:
        _dummy_layer()  # fail now, not at the first forward pass
    config = copy.deepcopy(model.config)
    for kind in KINDS:
        flags = set(already[kind]) | set(wanted[kind])
        setattr(config, CONFIG_FIELDS[kind], [i in flags for i in range(count)])
    view = layer_view(model, list(range(count)), config)
    hidden = layer_config(model).hidden_size
    for kind, name in names.items():
        for i in wanted[kind]:
            layer = decoder_layers(view)[i]
            block = layer._modules[name]
            if not isinstance(block, DroppedBlock):
                layer._modules[name] = DroppedBlock(kind, i, _state_of(block), _beside(layer, name, kind, hidden))
    return view


def _check_present(model: nn.Module, names: dict[str, str], wanted: dict[str, tuple[int, ...]]) -> None:
    """A one-line refusal of a block a layer does not have (a hybrid's linear-attention or state-space layer has no
    attention to drop)."""
    layers = decoder_layers(model)
    for kind, name in names.items():
        for i in wanted[kind]:
            if block_in(layers[i], name) is None:
                raise InvalidCut(f"Layer {i} has no {_LABEL[kind]} to drop: it is {layer_kinds(model)[i]}.")


def _beside(layer: nn.Module, name: str, kind: str, hidden: int) -> int:
    """How many values the layer's forward unpacks from its block beside the output, read from its source
    (``h, _, _ = self.self_attention(`` in JetMoE: 2; ``h, _ = self.mlp(`` in gpt-oss: 1); at least 1 for an
    attention (its weights), 0 for an MLP taken whole. An MLP whose weights are in memory is run on one zero token
    instead, which also sees Llama 4's (a mixture of experts' layer unpacks its block's output a line later)."""
    default = 1 if kind == ATTENTION else 0
    block = layer._modules[name]
    weight = next(block.parameters(), None)
    if kind == MLP and weight is not None and not weight.is_meta:
        with torch.no_grad():
            out = block(torch.zeros(1, 1, hidden, dtype=weight.dtype, device=weight.device))
        return len(out) - 1 if isinstance(out, tuple) else 0
    try:
        source = inspect.getsource(type(layer).forward)
    except (OSError, TypeError):
        return default
    found = re.search(rf"^\s*([\w\s,]+?)\s*=\s*self\.{re.escape(name)}\(", source, re.M)
    return max(default, found[1].count(",")) if found else default


def _state_of(block: nn.Module) -> tuple:
    return tuple((name, tuple(t.shape), t.dtype, t.device) for name, t in block.state_dict().items())


def restore(model: nn.Module) -> nn.Module:
    """Drop again the blocks a loaded checkpoint's config records (saved as zeros); the model itself otherwise."""
    found = dropped(model)
    if not any(found.values()):
        return model
    return drop(model, found[ATTENTION], found[MLP])


def savable(model: nn.Module, *, allocate: bool = True) -> nn.Module:
    """What LayerCut saves: ``model`` itself, or, when blocks are dropped, a view whose dropped blocks
    hold zero tensors under the replaced blocks' names, so ``save_pretrained`` writes a checkpoint
    any transformers loads as a normal model with the same outputs (see the module docstring)."""
    if not any(dropped(model).values()):
        return model
    view = layer_view(model, list(range(len(decoder_layers(model)))), copy.deepcopy(model.config))
    for layer in decoder_layers(view):
        for name, child in list(layer._modules.items()):
            if isinstance(child, DroppedBlock):
                layer._modules[name] = child.with_zeros(allocate)
    return view


def dropped_numel(model: nn.Module) -> int:
    """Elements of the blocks dropped from ``model`` (what a save writes back as zeros)."""
    total = 0
    for block in decoder_layers(model).modules():
        if isinstance(block, DroppedBlock):
            for _name, shape, _dtype, _device in block.tensors:
                total += int(torch.Size(shape).numel())
    return total


def attention_layers(model: nn.Module) -> int:
    """How many layers still have attention (each one stores keys and values): not a dropped one, nor a hybrid's
    linear-attention, state-space or convolution layer."""
    name = architecture_of(model).sublayers.attention
    gone = set(dropped(model)[ATTENTION])
    return sum(i not in gone and block_in(layer, name) is not None for i, layer in enumerate(decoder_layers(model)))
