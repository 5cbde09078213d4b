"""A linear map stored as two, and the shapes of a decoder layer's linear maps as recipes count them.

:class:`Factored` is what :mod:`prune.lowrank.decomposition` puts in place of a projection: ``x ↦ second(first(x))``,
``first`` [rank, inputs] without bias, ``second`` [outputs, rank] with the projection's bias. It
keeps GPT-2's ``Conv1D`` kind in mind only for :meth:`Factored.dense`, which merges it back into the
module type it replaced (what a plain transformers checkpoint holds).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from transformers.pytorch_utils import Conv1D

from prune.core.experts import expert_stacks
from prune.core.sequential import rows_of


class Factored(nn.Module):
    """A projection through ``rank`` features: two linear maps, the bias on the second."""

    def __init__(self, first: torch.Tensor, second: torch.Tensor, bias: torch.Tensor | None, conv1d: bool = False):
        super().__init__()
        rank, inputs = first.shape
        outputs = second.shape[0]
        if second.shape[1] != rank:
            raise ValueError(f"Factors of ranks {rank} and {second.shape[1]} do not compose.")
        self.first = nn.Linear(inputs, rank, bias=False, device="meta")
        self.second = nn.Linear(rank, outputs, bias=bias is not None, device="meta")
        self.first.weight = nn.Parameter(first.contiguous(), requires_grad=False)
        self.second.weight = nn.Parameter(second.contiguous(), requires_grad=False)
        if bias is not None:
            self.second.bias = nn.Parameter(bias.contiguous(), requires_grad=False)
        self.conv1d = conv1d  # replaced a GPT-2 Conv1D: merges back into one

    @property
    def rank(self) -> int:
        return self.first.out_features

    @property
    def in_features(self) -> int:
        return self.first.in_features

    @property
    def out_features(self) -> int:
        return self.second.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(self.first(x))

    def dense(self) -> nn.Module:
        """The same map as one matrix (``second @ first``), in the module type it replaced."""
        return dense_module(self.second.weight @ self.first.weight, self.second.bias, self.conv1d)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, rank={self.rank}, out_features={self.out_features}"


def dense_module(rows: torch.Tensor, bias: torch.Tensor | None, conv1d: bool) -> nn.Module:
    """An ``nn.Linear`` (or GPT-2 ``Conv1D``) holding the [outputs, inputs] weight ``rows`` and ``bias``.

    Broadcast zeros (``expand`` of one element, for computing a checkpoint's size) are kept as they are.
    """
    outputs, inputs = rows.shape
    with torch.device("meta"):
        module = Conv1D(outputs, inputs) if conv1d else nn.Linear(inputs, outputs, bias=bias is not None)
    weight = rows.t() if conv1d else rows
    if any(weight.stride()):
        weight = weight.contiguous()
    module.weight = nn.Parameter(weight, requires_grad=False)
    if bias is not None:
        module.bias = nn.Parameter(bias.detach(), requires_grad=False)
    elif conv1d:
        module.bias = nn.Parameter(torch.zeros(outputs, dtype=rows.dtype, device=rows.device), requires_grad=False)
    return module


@dataclass(frozen=True)
class Matrix:
    """One linear map of a decoder layer: its path in the layer, its shape and, once decomposed, its rank.

    ``out_kind`` / ``in_kind`` say which width structures size that axis ("group": KV groups,
    "channel": MLP channels, None: neither), so width pruning can resize it by arithmetic.
    """

    path: str
    outputs: int
    inputs: int
    rank: int | None = None  # None: dense
    bias: bool = False
    out_kind: str | None = None
    in_kind: str | None = None
    experts: int = 1  # a stack of this many experts' matrices (``prune.core.experts``), each outputs × inputs

    @property
    def params(self) -> int:
        """Weights stored (the bias apart): the dense matrix, or two factors where they are smaller; every expert's."""
        dense = self.outputs * self.inputs
        one = dense if self.rank is None else min(dense, factor_params(self.outputs, self.inputs, self.rank))
        return one * self.experts

    @property
    def rows(self) -> int:
        """Output rows of every expert together (a plain matrix's outputs)."""
        return self.outputs * self.experts


def factor_params(outputs: int, inputs: int, rank: int) -> int:
    """Weights of the two factors of an [outputs, inputs] matrix at ``rank``."""
    return rank * (outputs + inputs)


def pays(outputs: int, inputs: int, rank: int) -> bool:
    """Whether two factors hold fewer weights (and multiply-adds) than the matrix: rank < d·k / (d + k)."""
    return factor_params(outputs, inputs, rank) < outputs * inputs


def layer_matrices(layer: nn.Module) -> tuple[Matrix, ...]:
    """The linear maps of one decoder layer by path, a :class:`Factored` one as one map of its rank, a stack of
    experts as one entry of its experts' count."""
    found, inside = [], []
    for name, module in layer.named_modules():
        if any(name.startswith(prefix + ".") for prefix in inside):
            continue
        if isinstance(module, Factored):
            inside.append(name)
            found.append(Matrix(name, module.out_features, module.in_features, module.rank,
                                module.second.bias is not None))
        elif isinstance(module, (nn.Linear, Conv1D)):
            outputs, inputs = rows_of(module).shape
            found.append(Matrix(name, outputs, inputs, bias=getattr(module, "bias", None) is not None))
    found += [Matrix(s.path, *s.shape, bias=s.bias() is not None, experts=s.count) for s in expert_stacks(layer)]
    return tuple(found)
