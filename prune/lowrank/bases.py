"""The output directions a low-rank projection keeps, in weight or feature space, and the factors they give.

A projection y = W x + b (W [d, k]) at rank r keeps r orthonormal output directions Q_r [d, r]:
W ≈ Q_r (Q_rᵀ W). :func:`weight_basis` takes W's left singular vectors (Q_r Q_rᵀ W is the truncated
SVD); :func:`feature_basis` takes the top eigenvectors of the outputs' second moments on
calibration data, which keep the outputs themselves as well as r directions can:

* a projection **with a bias** uses the outputs' covariance (centred, as the authors' code) and its
  bias absorbs the mean the dropped directions carried, b' = b + (I − Q_r Q_rᵀ) ȳ: the best rank-r
  affine approximation of the outputs (principal components);
* a projection **without a bias** uses the uncentred second moment Σ y yᵀ: the best rank-r linear
  approximation. The covariance there, without the bias that would carry the mean (what the
  authors' code computes in effect), lost the mean of every dropped direction: WikiText-2
  perplexity 486,600 on SmolLM2-135M with every matrix at 75 % of its break-even rank (about 80 % of
  the parameters, calibrated in one pass of the dense model), against 232 with the second moment
  (and 206 with the covariance plus an added bias, which no standard Llama config can hold).

Statistics are read on the side that is cheaper: the outputs' Σ y, Σ y yᵀ [d, d] when d ≤ k; else
the inputs' Σ x, Σ x xᵀ [k, k], and Σ y yᵀ = W (Σ x xᵀ) Wᵀ is decomposed through the k-dimensional
space (the eigenvectors of W G Wᵀ = B Bᵀ, B = W Q Λ^½ with G = Q Λ Qᵀ, are B's left singular
vectors): an MLP's up projection (1,536 × 576 in SmolLM2) never needs a 1,536² eigen-decomposition.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property

import torch
from torch import nn
from transformers.pytorch_utils import Conv1D

from prune.core.factored import Factored, dense_module, pays
from prune.core.sequential import OncePerInput, rows_of, run_layer


@dataclass(frozen=True)
class Basis:
    """Orthonormal output directions [d, m] (float64) by importance; ``mean`` [d], the outputs' mean W x̄, when the
    projection's bias absorbs what the dropped directions carried."""

    vectors: torch.Tensor
    mean: torch.Tensor | None = None

    def first(self, count: int) -> Basis:
        """Only the first ``count`` directions (all a rank up to ``count`` needs)."""
        return Basis(self.vectors[:, :count], self.mean)


@dataclass(frozen=True)
class Moments:
    """Σ v and Σ v vᵀ (float64) over ``count`` calibration tokens of a projection's bias-free outputs or inputs."""

    side: str  # "output" (v = W x, [d]) or "input" (v = x, [k])
    count: int
    total: torch.Tensor
    gram: torch.Tensor

    @cached_property
    def spectrum(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(Λ, Q) with G = Q Λ Qᵀ: computed once for every projection that reads these inputs (gate and up)."""
        return torch.linalg.eigh(self.gram)


def weight_basis(rows: torch.Tensor) -> Basis:
    """W's left singular vectors [d, min(d, k)], by descending singular value."""
    return Basis(torch.linalg.svd(rows.double(), full_matrices=False).U)


def feature_basis(module: nn.Module, moments: Moments) -> Basis:
    """The top eigenvectors of the outputs' covariance (biased projection) or second moment (unbiased), descending."""
    rows = rows_of(module).double()
    centred = getattr(module, "bias", None) is not None
    mean = moments.total / moments.count
    gram = moments.gram - moments.count * torch.outer(mean, mean) if centred else moments.gram
    if moments.side == "output":
        vectors = torch.linalg.eigh(gram).eigenvectors.flip(1)
        output_mean = mean
    else:
        values, directions = moments.spectrum if not centred else torch.linalg.eigh(gram)  # G = Q Λ Qᵀ
        vectors = torch.linalg.svd(rows @ (directions * values.clamp(min=0).sqrt()), full_matrices=False).U
        output_mean = rows @ mean
    return Basis(vectors, output_mean if centred else None)


def factors(rows: torch.Tensor, basis: Basis, rank: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """(first [r, k], second [d, r], bias shift [d] or None) in float64.

    W ≈ Q_r (Q_rᵀ W); with a mean, the bias becomes b + (I − Q_r Q_rᵀ) ȳ.
    """
    kept = basis.vectors[:, :rank].double()
    shift = None if basis.mean is None else basis.mean - kept @ (kept.T @ basis.mean)
    return kept.T @ rows.double(), kept, shift


def factored_module(module: nn.Module, basis: Basis, rank: int) -> nn.Module:
    """``module`` at ``rank`` on ``basis``: a :class:`Factored`, or one dense matrix where factors would not pay."""
    rows = rows_of(module)
    first, second, shift = factors(rows, basis, rank)
    dtype, bias = rows.dtype, getattr(module, "bias", None)
    if bias is not None:  # the new module owns every tensor it holds
        bias = bias.detach().clone() if shift is None else (bias.detach().double() + shift).to(dtype)
    conv1d = isinstance(module, Conv1D)
    if not pays(*rows.shape, rank):
        return dense_module((second @ first).to(dtype), bias, conv1d)
    return Factored(first.to(dtype), second.to(dtype), bias, conv1d)


@torch.no_grad()
def moments(layer: nn.Module, paths: Iterable[str], hidden: list[torch.Tensor],
            calls: list[tuple]) -> dict[str, Moments]:
    """Per path, from one pass of ``layer``: the :class:`Moments` of its bias-free outputs (d ≤ k) or inputs; paths
    that read one input (an MLP's gate and up projections) reduce it once and share one :class:`Moments`."""
    found: dict[str, list] = {}
    sides = {}
    for path in paths:
        outputs, inputs = rows_of(layer.get_submodule(path)).shape
        sides[path] = "output" if outputs <= inputs else "input"

    def reduced(v: torch.Tensor) -> tuple:
        v = v.float()
        return v.shape[0], v.sum(0).double(), (v.T @ v).double()  # float32 products per batch, summed in float64

    shared = OncePerInput(reduced)  # gate and up read one input: reduced once

    def collect(path, module):
        def hook(_module, args, output):
            if sides[path] == "output":
                v = output.detach().reshape(-1, output.shape[-1])
                part = reduced(v - module.bias.detach() if getattr(module, "bias", None) is not None else v)
            else:
                part = shared(args[0])
            seen = found.setdefault(path, [0, 0.0, 0.0])
            seen[:] = [a + b for a, b in zip(seen, part)]
        return hook

    handles = [layer.get_submodule(p).register_forward_hook(collect(p, layer.get_submodule(p))) for p in sides]
    try:
        run_layer(layer, hidden, calls)
    finally:
        for handle in handles:
            handle.remove()
    shared.forget()
    made: dict[str, Moments] = {}
    for path, value in found.items():
        same = next((m for other, m in made.items() if sides[other] == sides[path] == "input"
                     and m.count == value[0] and torch.equal(m.gram, value[2]) and torch.equal(m.total, value[1])),
                    None)
        made[path] = same or Moments(sides[path], *value)  # one object: its spectrum computed once
    return made
