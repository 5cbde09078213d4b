"""Width pruning: remove MLP channels and attention heads so that the matrices really shrink.

Importance, by default: **Wanda-sp**, the structured Wanda of FLAP's code (An et al. 2024, arXiv 2312.11983,
``CASIA-IVA-Lab/FLAP`` ``prune_wanda_sp``; Wanda: Sun et al. 2023, arXiv 2306.11695). For the
matrix that writes a structure's output into the residual stream (``o_proj``, ``down_proj`` and
their kin), each input column j scores ``mean_i |W_ij| · ‖X_j‖₂`` — X_j that column's input over
every calibration token — and a structure scores the sum over its columns: one column per MLP
channel, ``heads_per_group × head_dim`` columns per KV group. The lowest-scoring structures go.
Where LayerCut differs from that code: under grouped-query attention a unit is a whole KV group
(a KV head and every query head sharing it; FLAP's code knows only one KV head per query head),
so the config stays expressible; every layer is scored in one forward pass of the unpruned
model (FLAP re-reads each layer's inputs from the layers already pruned before it); the default
calibration is LayerCut's (FLAP: 128 windows of 128 tokens of C4). The other criterion, LLM-Pruner's
weight × gradient on the coupled groups, is :mod:`prune.width.taylor`; both feed the same plan and rebuild.

How much goes: ``param_ratio`` is the fraction of *all* the model's parameters kept, embeddings
and LM head included, which are never pruned (nor are norms); so the decoder layers give up more
than ``1 − param_ratio`` of theirs. Every layer loses the same structures' worth (uniform sizes,
so a standard config holds the result: ``intermediate_size``, ``num_attention_heads``,
``num_key_value_heads``, and ``head_dim``, kept and written explicitly): each loses the same
share of its heads and of its channels, as Wanda-sp removes the same ratio of both, but heads go
only as whole KV groups that fit in that share (rounded down) and the MLP takes up the rest, in
steps of 8 channels: on a model with few KV groups (SmolLM2-135M has 3) the MLP gives up more. Where a
config derives the head size from ``hidden_size / num_attention_heads`` (GPT-2, GPT-NeoX, OPT) a
reloaded model could not keep the head size, so heads stay and only MLP channels go.

The result owns new, smaller matrices built by fresh decoder layers of the new config (what a
plain ``from_pretrained`` of the saved folder builds); embeddings, norms and the LM head are shared
with the original, which is never altered. A model read from disk (larger than the memory budget) is
scored in its one forward pass as usual, then rebuilt one layer at a time into files of its own
(:mod:`prune.core.layer_files`), with the same numbers.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch
from torch import nn

from prune.core.architectures import Width, decoder_layers, get_path, layer_config, width_of
from prune.core.calibration import Calibration, token_windows
from prune.core.errors import InvalidInput, UnsupportedArchitecture, quoted
from prune.core.hidden import StopForward, run_until_stopped
from prune.core.sequential import rows_of
from prune.core.sizes import LayerShape, Size, check_ratio, layer_shape, size_of, writer
from prune.core.devices import input_device
from prune.core.layer_files import Rebuild
from prune.width.layout import Scores, axis_index, unit_sizes, weight_dim
from prune.width.taylor import IMPORTANCE as TAYLOR, taylor_scores

IMPORTANCE = "Wanda-sp"
WANDA_SP, LLM_PRUNER = "wanda-sp", "llm-pruner"
CRITERIA = {WANDA_SP: IMPORTANCE, LLM_PRUNER: TAYLOR}  # what ranks the structures, by name
DESCRIPTION = ("Width pruning: removes MLP channels and attention heads (whole KV groups) in every layer by "
               "Wanda-sp importance (Σ |W|·‖X‖ over the structure's columns of o_proj / down_proj, as FLAP's "
               "code computes it), down to a parameter count; the matrices really shrink.")

Progress = Callable[[float, str], object]


@dataclass(frozen=True)
class Plan:
    """The structures every decoder layer loses."""

    groups: int
    channels: int

    def removed_per_layer(self, shape: LayerShape) -> int:
        return self.groups * shape.group_params + self.channels * shape.channel_params


# ---------------------------------------------------------------- sizes and the plan (arithmetic only)


def plan(size: Size, param_ratio: float) -> Plan:
    """What every layer loses so that about ``param_ratio`` of all the parameters stay.

    Each layer gives up an equal share of the parameters to remove: it loses the whole KV groups
    that fit in that fraction of its heads (rounded down), and the MLP gives up the rest in steps of
    :attr:`LayerShape.step` channels. (Rounding the groups to the nearest instead removed one of
    SmolLM2-135M's three KV groups at 80 %, and doubled its WikiText-2 perplexity: 260 against 136.)
    """
    ratio = check_ratio(param_ratio)
    shape = size.shape
    if shape is None:
        raise UnsupportedArchitecture("This model's width cannot be pruned: its layers are not in the width table.")
    give = (1 - ratio) * size.total / len(size.layers)  # parameters each layer gives up
    share = give / (shape.groups * shape.group_params + shape.channels * shape.channel_params)
    groups = 0
    if shape.group_params:
        groups = min(math.floor(share * shape.groups + 1e-9), shape.groups - 1)
    step = shape.step
    channels = step * round((give - groups * shape.group_params) / (step * shape.channel_params))
    channels = max(0, min(channels, shape.channels - step))
    found = Plan(groups, channels)
    if give - found.removed_per_layer(shape) > step * shape.channel_params:
        most = Plan(shape.groups - 1 if shape.group_params else 0, shape.channels - step).removed_per_layer(shape)
        floor = 1 - most * len(size.layers) / size.total
        channels = f"{step} channel{'s' if step > 1 else ''}"
        least = f"one KV group and {channels}" if shape.group_params else f"its heads and {channels}"
        raise InvalidInput(f"Width pruning keeps at least {least} per layer, {floor:.1%} of this model's "
                           f"parameters: ask for a ratio of at least {floor:.3f}.")
    return found


def resized(size: Size, found: Plan) -> Size:
    """The size after every layer lost ``found``'s structures."""
    shape = size.shape
    removed = found.removed_per_layer(shape)
    after = replace(shape, groups=shape.groups - found.groups, channels=shape.channels - found.channels)
    units = {"group": (shape.groups, after.groups), "channel": (shape.channels, after.channels)}

    def scaled(dim: int, kind: str | None) -> int:
        return dim if kind is None else dim // units[kind][0] * units[kind][1]

    matrices = tuple(tuple(replace(m, outputs=scaled(m.outputs, m.out_kind), inputs=scaled(m.inputs, m.in_kind))
                           for m in layer) for layer in size.matrices)
    return replace(size, layers=tuple(n - removed for n in size.layers), shape=after, matrices=matrices)


def matching_depth_layers(size: Size, param_ratio: float) -> int:
    """How many whole decoder layers of a model of ``size`` remove about as many parameters as keeping
    ``param_ratio`` of them.

    The depth cut beside a width-pruned model of the same size (at least one layer, never all).
    """
    mean = sum(size.layers) / len(size.layers)
    wanted = (1 - check_ratio(param_ratio)) * size.total / mean
    return max(1, min(len(size.layers) - 1, round(wanted)))


def check_criterion(criterion: str) -> str:
    """``criterion`` if it names one of :data:`CRITERIA`, else a one-line refusal."""
    if criterion not in CRITERIA:
        raise InvalidInput(f"Width pruning has no criterion {quoted(criterion)}: choose one of {', '.join(CRITERIA)}.")
    return criterion


# ---------------------------------------------------------------- importance (Wanda-sp)


def importance(model: nn.Module, tokenizer, calibration: Calibration | None = None, *,
               batch_size: int = 8, progress: Progress | None = None) -> list[Scores]:
    """Wanda-sp scores of every layer's KV groups and channels, from one forward pass over the calibration.

    ``progress(fraction, message)`` is called after each batch of windows (raising there cancels).
    """
    width, shape = width_of(model), layer_shape(model)
    windows = token_windows(tokenizer, calibration or Calibration())
    squares = _input_squares(model, width, windows.to(input_device(model)), batch_size,
                             progress or (lambda _fraction, _message: None))
    return [layer_scores(layer, seen, width, shape) for layer, seen in zip(decoder_layers(model), squares)]


def layer_scores(layer: nn.Module, seen: dict, width: Width, shape: LayerShape) -> Scores:
    """One layer's Wanda-sp scores from ``seen``, its writers' Σ x_j² per kind (see :func:`_input_squares`)."""
    groups = None
    if width.heads and shape.group_params:
        groups = unit_scores(get_path(layer, writer(width.heads)[0]), seen["heads"], shape.groups)
    return Scores(groups, unit_scores(get_path(layer, writer(width.channels)[0]), seen["channels"], shape.channels))


def unit_scores(writer: nn.Module, squares: torch.Tensor, units: int) -> torch.Tensor:
    """Per unit: Σ over its input columns j of mean_i |W_ij| · ‖X_j‖₂; ``squares`` is Σ_tokens X_j², [inputs]."""
    rows = rows_of(writer).float()  # [outputs, inputs]
    columns = (rows.abs() * squares.float().sqrt()[None, :]).mean(0)  # [inputs]
    return columns.view(units, -1).sum(1)  # each unit's columns are consecutive


@torch.no_grad()
def _input_squares(model: nn.Module, width: Width, input_ids: torch.Tensor, batch_size: int,
                   report: Progress) -> list[dict]:
    """Per layer, per kind ("heads", "channels"): Σ over the calibration tokens of x_j² at its writer's input."""
    layers = decoder_layers(model)
    found: list[dict] = [{} for _ in layers]

    def collect(index, kind):
        def hook(_module, args, _output):
            x = args[0].detach().reshape(-1, args[0].shape[-1]).float()  # [tokens, inputs]
            seen = found[index]
            seen[kind] = seen[kind] + (x * x).sum(0) if kind in seen else (x * x).sum(0)
        return hook

    def stop(_module, _args, _output):
        raise StopForward

    kinds = {"channels": width.channels, **({"heads": width.heads} if width.heads else {})}
    handles = [get_path(layer, writer(entries)[0]).register_forward_hook(collect(index, kind))
               for index, layer in enumerate(layers) for kind, entries in kinds.items()]
    handles.append(layers[-1].register_forward_hook(stop))  # the LM head's logits are not needed
    try:
        batches = input_ids.split(batch_size)
        for index, batch in enumerate(batches):
            run_until_stopped(model, input_ids=batch, use_cache=False)
            report((index + 1) / len(batches), f"{IMPORTANCE}: calibration batch {index + 1} of {len(batches)} read")
    finally:
        for handle in handles:
            handle.remove()
    return found


# ---------------------------------------------------------------- the shrunk model


def shrink_width(model: nn.Module, tokenizer, *, param_ratio: float, calibration: Calibration | None = None,
                 progress: Progress | None = None, batch_size: int = 8, criterion: str = WANDA_SP) -> nn.Module:
    """A copy of ``model`` keeping about ``param_ratio`` of its parameters, its heads and channels fewer; ``model`` is
    untouched.

    ``calibration`` (None: the built-in text) feeds the importance, ``criterion`` (:data:`CRITERIA`): Wanda-sp's
    weight × activation, or LLM-Pruner's weight × gradient (:mod:`prune.width.taylor`); nothing is read when
    nothing is removed. ``progress(fraction, message)`` is called after each calibration batch (or the backward
    pass) and each rebuilt layer (raising there cancels; the original is never touched).
    """
    criterion = check_criterion(criterion)
    size = size_of(model)
    size = replace(size, shape=layer_shape(model))  # the clear error for an architecture without widths
    found = plan(size, param_ratio)
    shape, width = size.shape, width_of(model)
    report = progress or (lambda _fraction, _message: None)
    squares = scores = None
    if found.groups or found.channels:
        if tokenizer is None:
            raise InvalidInput("Width pruning reads calibration activations: it needs the model's tokenizer.")
        if criterion == WANDA_SP:
            windows = token_windows(tokenizer, calibration or Calibration())
            squares = _input_squares(model, width, windows.to(input_device(model)), batch_size,
                                     lambda fraction, message: report(0.9 * fraction, message))
        else:
            report(0.0, f"{CRITERIA[criterion]}: one backward pass over the calibration")
            scores = taylor_scores(model, tokenizer, width, shape, calibration)
            report(0.9, f"{CRITERIA[criterion]}: scored")
    element = next(model.parameters()).element_size()
    rebuild = Rebuild(model, owned_params(size, resized(size, found)) * element)  # a clone, or files layer by layer
    config = layer_config(rebuild.config)  # a vision-language model's text config: its decoder's layers are rebuilt
    setattr(config, width.channel_field, shape.channels - found.channels)
    if width.heads:
        config.num_key_value_heads = shape.groups - found.groups
        config.num_attention_heads = shape.heads_per_group * config.num_key_value_heads
        config.head_dim = shape.head_dim
    count = len(decoder_layers(model))
    for index, layer in rebuild.layers():
        if scores:
            score = scores[index]
        elif squares:
            score = layer_scores(layer, squares[index], width, shape)
        else:
            score = Scores(None, torch.zeros(shape.channels))
        kept = {"c": _kept(score.channels, shape.channels - found.channels)}
        if width.heads:
            kept["q"] = kept["kv"] = _kept(score.groups if found.groups else torch.zeros(shape.groups),
                                           shape.groups - found.groups)
        rebuild.done(index, _rebuilt(layer, config, index, _changed(width, found), shape, kept))
        report(0.9 + 0.1 * (index + 1) / count, f"Width pruning: layer {index + 1} of {count} rebuilt")
    return rebuild.model()


def _kept(scores: torch.Tensor, count: int) -> torch.Tensor:
    """The ``count`` highest-scoring units in their original order (ties: the earlier unit stays)."""
    order = torch.sort(scores.float().cpu(), descending=True, stable=True).indices
    return order[:count].sort().values


def _changed(width: Width, found: Plan) -> tuple[tuple[str, str], ...]:
    """The table entries of the kinds that lose structures (the others' matrices stay shared)."""
    return (*(width.channels if found.channels else ()), *(width.heads or () if found.groups else ()))


def owned_params(before: Size, after: Size) -> int:
    """Parameters of the new matrices a width-pruned model owns: those of the kinds that lost structures."""
    shape, new = before.shape, after.shape
    per_layer = (new.groups * shape.group_params if new.groups != shape.groups else 0) \
        + (new.channels * shape.channel_params if new.channels != shape.channels else 0)
    return per_layer * len(after.layers)


def _rebuilt(layer: nn.Module, config, index: int, entries, shape: LayerShape, kept: dict) -> nn.Module:
    """A fresh decoder layer of ``config`` holding ``layer``'s kept rows and columns of ``entries`` (its own) and
    every other tensor (shared)."""
    sizes, units = unit_sizes(shape)
    sliced: dict[str, torch.Tensor] = {}
    for path, spec in entries:
        axis, *segments = spec.split()
        module = get_path(layer, path)
        idx = axis_index([sizes[s] for s in segments], [units[s] for s in segments], [kept[s] for s in segments])
        idx = idx.to(module.weight.device)
        dim = weight_dim(module, axis)
        sliced[f"{path}.weight"] = module.weight.detach().index_select(dim, idx)
        if axis == "out" and getattr(module, "bias", None) is not None:
            sliced[f"{path}.bias"] = module.bias.detach().index_select(0, idx)
    with torch.device("meta"):
        fresh = type(layer)(config, index)
    fresh.train(layer.training)
    for name, tensor in (*layer.named_parameters(), *layer.named_buffers()):
        owner, _, leaf = name.rpartition(".")
        target = fresh.get_submodule(owner)
        if leaf in target._buffers:
            target._buffers[leaf] = tensor
        elif name in sliced:
            target._parameters[leaf] = nn.Parameter(sliced[name].contiguous(), requires_grad=tensor.requires_grad)
        else:
            target._parameters[leaf] = tensor  # shared, as a depth cut shares its kept layers
    left = [n for n, t in (*fresh.named_parameters(), *fresh.named_buffers()) if t.is_meta]
    if left:
        raise UnsupportedArchitecture(f"Width pruning could not fill {', '.join(left)} of the rebuilt layer.")
    return fresh
