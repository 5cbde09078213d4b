"""Sizes: a model's parameters by decoder layer, its linear maps and its prunable width structures.

Recipes change sizes by arithmetic (``Step.resize``), so a variant is counted without being built;
width pruning, low-rank decomposition and healing all count on this one :class:`Size`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from torch import nn

from prune.core.architectures import Width, decoder_layers, get_path, layer_config, width_of
from prune.core.errors import InvalidInput, UnsupportedArchitecture, quoted
from prune.core.factored import Factored, Matrix, layer_matrices
from prune.core.sequential import rows_of


CHANNEL_STEP = 8  # MLP sizes change in steps of this many channels (1 for layers under 256 channels)


@dataclass(frozen=True)
class LayerShape:
    """The prunable structures of a decoder layer (alike in every layer) and the parameters one of each holds."""

    groups: int  # KV groups: a KV head and the query heads sharing it (heads, without GQA)
    heads_per_group: int
    head_dim: int
    group_params: int  # 0 where the architecture keeps its heads
    channels: int  # MLP intermediate channels
    channel_params: int

    @property
    def step(self) -> int:
        """Channels removed together."""
        return CHANNEL_STEP if self.channels >= 256 else 1


@dataclass(frozen=True)
class Size:
    """A model's parameter count as recipes change it: each decoder layer's and the rest (embeddings, final norm, LM
    head)."""

    other: int
    layers: tuple[int, ...]
    shape: LayerShape | None  # None: this architecture's width cannot be pruned
    matrices: tuple[tuple[Matrix, ...], ...] = ()  # each layer's linear maps (what low-rank steps count)
    embedding: tuple[int, int] = (0, 0)  # the input embedding's rows (the vocabulary) and width
    tied: bool = False  # the LM head is the input embedding

    @property
    def total(self) -> int:
        return self.other + sum(self.layers)


def size_of(model: nn.Module) -> Size:
    """The model's parameter count by layer (each shared tensor once), its linear maps, and its width structures
    if it has any."""
    layers = tuple(sum(p.numel() for p in layer.parameters()) for layer in decoder_layers(model))
    total = parameter_count(model)
    try:
        shape, kinds = layer_shape(model), _kinds(width_of(model))
    except UnsupportedArchitecture:
        shape, kinds = None, {}
    found = tuple(tuple(replace(m, **kinds.get(m.path, {})) for m in layer_matrices(layer))
                  for layer in decoder_layers(model))
    embedding = model.get_input_embeddings().weight
    head = model.get_output_embeddings()
    tied = head is not None and (head.weight is embedding or getattr(model.config, "tie_word_embeddings", False))
    return Size(total - sum(layers), layers, shape, found, tuple(embedding.shape), tied)


def parameter_count(model: nn.Module) -> int:
    """Parameters of ``model``, each shared tensor once. Tied embeddings count once also where accelerate's
    offloading untied them: each pass over a model read from disk leaves a new placeholder in each module."""
    total = sum(p.numel() for p in model.parameters())
    inputs, outputs = model.get_input_embeddings(), model.get_output_embeddings()
    untied = (getattr(model.config, "tie_word_embeddings", False) and outputs is not None
              and outputs.weight is not inputs.weight and outputs.weight.is_meta and inputs.weight.is_meta)
    return total - outputs.weight.numel() if untied else total


def _kinds(width: Width) -> dict[str, dict[str, str]]:
    """Path → which axis of that matrix width pruning resizes, and by which structures ("group", "channel")."""
    found: dict[str, dict[str, str]] = {}
    for entries, kind in ((width.channels, "channel"), (width.heads or (), "group")):
        for path, spec in entries:
            found.setdefault(path, {})[f"{spec.split()[0]}_kind"] = kind
    return found


def layer_shape(model: nn.Module) -> LayerShape:
    """The structures width pruning removes, read from the layers' matrices and checked against the table."""
    width = width_of(model)
    config = layer_config(model)
    groups, per_group, head_dim = head_layout(config) if width.heads else (0, 0, 0)
    shapes = set()
    for layer in decoder_layers(model):
        channels = dims(get_path(layer, writer(width.channels)[0]))[1]
        group_params = unit_params(layer, width.heads, groups, {"q": per_group * head_dim, "kv": head_dim}) \
            if width.heads else 0
        channel_params = unit_params(layer, width.channels, channels, {"c": 1})
        shapes.add(LayerShape(max(groups, 1), per_group, head_dim, group_params, channels, channel_params))
    if len(shapes) != 1:
        raise UnsupportedArchitecture("Width pruning needs every decoder layer to have the same sizes; this model's "
                                      "layers differ.")
    return shapes.pop()


def head_layout(config) -> tuple[int, int, int]:
    """(KV groups, query heads per group, head_dim) from a config that names them."""
    heads = config.num_attention_heads
    groups = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return groups, heads // groups, head_dim


def writer(entries) -> tuple[str, str]:
    """The entry whose inputs are the structures' outputs (the matrix writing the residual stream)."""
    (found,) = [(path, spec) for path, spec in entries if spec.split()[0] == "in"]
    return found


def dims(module: nn.Module) -> tuple[int, int]:
    """(outputs, inputs) of a matrix; (size, 1) of a vector (a norm's weight)."""
    if isinstance(module, Factored):
        raise UnsupportedArchitecture("Width pruning cannot slice a projection held as low-rank factors: prune the "
                                      "width before decomposing.")
    weight = module.weight
    return (weight.shape[0], 1) if weight.dim() == 1 else tuple(rows_of(module).shape)


def unit_params(layer: nn.Module, entries, units: int, sizes: dict[str, int]) -> int:
    """Parameters one unit holds across ``entries``, checking each matrix's axis against the table."""
    total = 0
    for path, spec in entries:
        axis, *segments = spec.split()
        module = get_path(layer, path)
        outputs, inputs = dims(module)
        along, across = (outputs, inputs) if axis == "out" else (inputs, outputs)
        per_unit = sum(sizes[s] for s in segments)
        if along != units * per_unit:
            raise UnsupportedArchitecture(f"Width pruning: {path} has {along} {axis}puts, not {units} × {per_unit} as "
                                          "its config implies.")
        has_bias = axis == "out" and getattr(module, "bias", None) is not None
        total += per_unit * across + (per_unit if has_bias else 0)
    return total


def check_ratio(param_ratio) -> float:
    """The fraction of parameters kept: above 0, at most 1."""
    if isinstance(param_ratio, bool) or not isinstance(param_ratio, (int, float)) or not 0 < param_ratio <= 1:
        raise InvalidInput(f"The parameter ratio is the fraction of the model's parameters kept, above 0 and at "
                           f"most 1 (0.8: keep 80 %), not {quoted(param_ratio)}.")
    return float(param_ratio)
