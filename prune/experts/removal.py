"""Experts removed from a mixture of experts, as REAP's code prunes them (CerebrasResearch/reap, ``prune.py``): in
each layer the lowest-scoring experts go, with their router rows (and the router's bias and score-correction bias),
the experts' count in the modules and the config updated; every layer keeps as many experts (the config holds one
count). The top-k stays the model's unless fewer experts are left.
"""

from __future__ import annotations

import torch
from torch import nn

from prune.core.architectures import decoder_layers, layer_config
from prune.core.errors import InvalidInput
from prune.core.experts import TOP_K_FIELDS
from prune.core.surgery import clone_layers

COUNT_FIELDS = ("num_experts", "num_local_experts", "n_routed_experts", "experts_per_rank")  # what code calls E
TOP_K_NAMES = ("top_k", *TOP_K_FIELDS)
BIAS_NAMES = ("correction_bias", "expert_bias")  # a per-expert routing bias, wherever it sits (ERNIE's: [1, E])


def removed_count(experts: int, fraction: float) -> int:
    """int(E · fraction), the authors' count, read so that a fraction written as a count over E (3/49) gives it back
    despite the float's last bit."""
    return int(experts * fraction + 1e-9)


def kept_experts(scores: dict[int, torch.Tensor], fraction: float) -> dict[int, list[int]]:
    """Per layer, the experts kept when ``fraction`` of each layer's are removed, the lowest ``scores`` first (ties:
    the earlier expert goes first): int(E · fraction) of them, as the authors count."""
    kept = {}
    for index, score in scores.items():
        gone = removed_count(len(score), fraction)
        order = torch.sort(score, stable=True).indices
        kept[index] = sorted(order[gone:].tolist())
    return kept


def remove_experts(model: nn.Module, keep: dict[int, list[int]], experts: dict[int, nn.Module],
                   mix: dict[int, torch.Tensor] | None = None) -> nn.Module:
    """A variant of ``model`` whose layer i keeps the experts ``keep[i]`` of its experts module (``experts[i]``, a
    module of ``model``); ``model`` is untouched. ``mix[i]`` [kept, E]: instead of the kept experts' own weights, these
    combinations of every expert's (merging); the router keeps the kept experts' rows either way."""
    counts = {len(kept) for kept in keep.values()}
    if len(counts) != 1 or min(counts) < 1:
        raise InvalidInput("Every layer keeps as many experts (the config holds one count), at least one.")
    count = counts.pop()
    total = {_stacked(experts[i])[0][1].shape[0] for i in keep}
    variant = clone_layers(model)
    names = {id(module): name for layer in decoder_layers(model) for name, module in layer.named_modules()}
    for index, kept in keep.items():
        layer = decoder_layers(variant)[index]
        path = names[id(experts[index])]
        block = layer.get_submodule(path.rpartition(".")[0]) if "." in path else layer
        _check_groups(block, count)
        _slice_block(block, layer.get_submodule(path), torch.tensor(kept), count, None if mix is None else mix[index])
    config = layer_config(variant)
    for field in COUNT_FIELDS:
        if getattr(config, field, None) in total:
            setattr(config, field, count)
    for field in TOP_K_FIELDS:
        if isinstance(getattr(config, field, None), int) and getattr(config, field) > count:
            setattr(config, field, count)
    return variant


def _stacked(module: nn.Module):
    """The experts module's own stacked tensors and their biases: (name, tensor) with the experts first."""
    return [(name, p) for name, p in module.named_parameters(recurse=False)]


def _check_groups(block: nn.Module, count: int) -> None:
    """Group-limited routing (DeepSeek-V3's ``n_group``) splits the experts into equal groups: refuse a count that
    does not split."""
    for module in block.modules():
        groups = getattr(module, "num_group", None) or getattr(module, "n_group", None)
        if isinstance(groups, int) and groups > 1 and count % groups:
            raise InvalidInput(f"This router splits the experts into {groups} groups: keep a multiple of {groups} "
                               f"experts a layer, not {count}.")


def _slice_block(block: nn.Module, experts: nn.Module, kept: torch.Tensor, count: int,
                 mix: torch.Tensor | None) -> None:
    """In the variant's own ``block``: the experts module's stacks and biases cut to ``kept`` (or combined by ``mix``),
    and every router tensor of one row per expert (the router's, and the block's own: LFM2-MoE's expert bias) cut to
    ``kept``; every count of experts and top-k set to what is left."""
    total = _stacked(experts)[0][1].shape[0]
    for name, p in _stacked(experts):
        value = p.detach()[kept].clone() if mix is None else torch.tensordot(
            mix.to(p.device, torch.float64), p.detach().double(), 1).to(p.dtype)
        setattr(experts, name, nn.Parameter(value, requires_grad=False))
    for path, module in block.named_modules():
        _set_counts(module, total, count)
        if module is experts:
            continue
        router = module is block or isinstance(getattr(module, "top_k", None), int) or any(  # the block's own
            part in ("gate", "router") for part in path.split("."))  # tensors: LFM2's expert bias
        for name, tensor in [*module.named_parameters(recurse=False), *module.named_buffers(recurse=False)]:
            bias = name.endswith(BIAS_NAMES) and tensor is not None and tensor.shape[-1:] == (total,)
            if bias or (router and tensor is not None and tensor.shape[:1] == (total,)):
                value = tensor.detach().index_select(tensor.dim() - 1 if bias else 0, kept.to(tensor.device)).clone()
                if name in module._parameters:
                    setattr(module, name, nn.Parameter(value, requires_grad=False))
                else:
                    module._buffers[name] = value
        if isinstance(module, nn.Linear) and router and module.out_features == total:
            module.out_features = count


def _set_counts(module: nn.Module, total: int, count: int) -> None:
    """A module's own count of experts (``total`` → ``count``) and top-k (at most ``count``)."""
    for field in COUNT_FIELDS:
        if getattr(module, field, None) == total:
            setattr(module, field, count)
    for field in TOP_K_NAMES:
        if isinstance(getattr(module, field, None), int) and getattr(module, field) > count:
            setattr(module, field, count)
