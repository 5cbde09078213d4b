"""How a layer's prunable structures lie in its matrices, and their scores (shared by both width criteria)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from transformers.pytorch_utils import Conv1D

from prune.core.sizes import LayerShape


@dataclass(frozen=True)
class Scores:
    """One decoder layer's scores: per KV group (None where heads are kept) and per MLP channel."""

    groups: torch.Tensor | None
    channels: torch.Tensor


def unit_sizes(shape: LayerShape) -> tuple[dict[str, int], dict[str, int]]:
    """(elements per unit, units) of each segment kind of :class:`prune.core.architectures.Width`: ``q`` a KV
    group's query heads, ``kv`` a KV head, ``c`` an MLP channel."""
    sizes = {"q": shape.heads_per_group * shape.head_dim, "kv": shape.head_dim, "c": 1}
    units = {"q": shape.groups, "kv": shape.groups, "c": shape.channels}
    return sizes, units


def weight_dim(module: nn.Module, axis: str) -> int:
    """The dimension of ``module.weight`` that an ``out`` or ``in`` axis indexes (Conv1D stores [in, out])."""
    dim = 0 if axis == "out" or module.weight.dim() == 1 else 1
    return 1 - dim if isinstance(module, Conv1D) else dim


def axis_index(sizes: list[int], units: list[int], kept: list[torch.Tensor]) -> torch.Tensor:
    """Indices along an axis made of segments (a block of ``size`` per unit each), keeping the ``kept`` units in
    order."""
    parts, offset = [], 0
    for size, count, keep in zip(sizes, units, kept):
        parts.append((offset + keep[:, None] * size + torch.arange(size)[None, :]).flatten())
        offset += count * size
    return torch.cat(parts)
