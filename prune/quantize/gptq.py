"""GPTQ (Frantar, Ashkboos, Hoefler & Alistarh 2023, arXiv 2210.17323): round one weight matrix to LayerCut's int8 or
int4 grid column by column, each column's rounding error spread over the columns not yet rounded, so that the layer's
output on the calibration inputs changes as little as possible.

As the authors' ``gptq.py`` (``GPTQ.fasterquant``) computes it: H = XᵀX over the calibration tokens (their 2/n
factor is left out: nothing below depends on H's scale); dead inputs (H_jj = 0) get H_jj = 1 and a zero weight;
H dampened by ``percdamp`` × its mean diagonal; U the upper Cholesky factor of H⁻¹. Columns are rounded left to right
(with ``actorder``, in descending order of H_jj, put back at the end) in blocks of ``blocksize``: column j's error
(w − q) / U_jj is taken off the block's later columns at once, and the block's errors off the columns after it in one
lazy batch update. The scales, as their code sets them:

* int8, one scale per row: from the weights as given, before the dead columns are zeroed (their ``find_params(W)``
  before the loop).
* int4 in groups, in the columns' order: each group's scale from the current weights when the loop reaches its first
  column (``static_groups=False``, their default). Their code reads the matrix ``W``, which a block's own updates
  reach only when the block ends: a group that starts inside a block of 128 takes its scale from its weights as they
  stood when that block began. Done the same here.
* int4 in groups with ``actorder``: every group's scale from the weights before any update, in the original column
  order (their ``static_groups=True``): a group stays 32 consecutive inputs with one scale, as the kernels read it.

The grid is LayerCut's (torchao's symmetric mapping, :mod:`prune.quantize.weights`), not the authors' ``quant.py``
one: scale = max |w| / (2^(b−1) − ½) (the same number as theirs, 2·max|w| / (2^b − 1), except where a row or group
holds no negative weight: theirs then halves the range), q = round(w · (1 / scale)) clamped to [−2^(b−1), 2^(b−1) − 1],
and the value a column's error is measured from is q times the scale *as stored* (int4: rounded to bfloat16, as the
kernels read it). One addition for recipes: a weight that is exactly zero in the input stays zero (q = 0, its error
spread like any other), as round-to-nearest keeps it, so GPTQ after a sparsity step keeps its zeros (SparseGPT's
joint sparse-and-quantized pass with the mask fixed beforehand).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

BLOCKSIZE = 128  # the authors' columns per block
PERCDAMP = 0.01  # the authors' dampening, a fraction of the mean Hessian diagonal


@dataclass(frozen=True)
class Grid:
    """LayerCut's symmetric ``bits``-bit grid: a scale per row (``group`` None) or per ``group`` inputs, kept in
    ``stored`` (int4: bfloat16, as tinygemm reads it; int8: the model's dtype)."""

    bits: int
    group: int | None
    stored: torch.dtype

    @property
    def lowest(self) -> int:
        return -(2 ** (self.bits - 1))

    @property
    def highest(self) -> int:
        return 2 ** (self.bits - 1) - 1

    def scale(self, weights: torch.Tensor) -> torch.Tensor:
        """[rows] from [rows, inputs] (torchao's: max |w| / ((highest − lowest) / 2), at least its epsilon)."""
        eps = torch.finfo(torch.float32).eps if self.group is None else torch.finfo(weights.dtype).smallest_normal
        return (weights.abs().amax(-1) / ((self.highest - self.lowest) / 2)).clamp(min=eps)

    def integers(self, weights: torch.Tensor, inverse: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """round(w · (1 / scale)) on the grid, as torchao's ``quantize_affine`` computes it (float, integer-valued),
        given ``inverse`` = 1 / scale (computed once a group by the caller), written into ``out``."""
        return torch.mul(weights, inverse, out=out).round_().clamp_(self.lowest, self.highest)

    def kept(self, scale: torch.Tensor) -> torch.Tensor:
        """The scale as stored, back in float32: what a weight's value is computed from."""
        return scale.to(self.stored).float()


@torch.no_grad()
def gptq(weight: torch.Tensor, hessian: torch.Tensor, grid: Grid, *, actorder: bool = False,
         blocksize: int = BLOCKSIZE, percdamp: float = PERCDAMP) -> tuple[torch.Tensor, torch.Tensor]:
    """The int8 integers [rows, cols] and their stored scales [rows, groups] (float32) of a [rows, cols] weight;
    ``hessian`` is XᵀX, [cols, cols]."""
    W = weight.detach().float().clone()  # [rows, cols], rows = outputs
    H = hessian.detach().float().clone()  # [cols, cols]
    rows, cols = W.shape
    group = grid.group or cols
    zeros = W == 0  # kept zero: a sparsity step's
    scales = torch.zeros(rows, cols // group, device=W.device)
    if grid.group is None:
        scales[:, 0] = grid.scale(W)  # before the dead columns are zeroed, as the authors' code
    dead = H.diagonal() == 0  # inputs that were always zero: their weights never mattered
    H[dead, dead] = 1
    W[:, dead] = 0
    static = actorder and grid.group is not None
    if static:
        scales = grid.scale(W.view(rows, -1, group))  # every group's, in the original order
    perm = torch.argsort(H.diagonal(), descending=True) if actorder else torch.arange(cols, device=W.device)
    W, H, zeros = W[:, perm], H[perm][:, perm], zeros[:, perm]
    home = (perm // group).tolist()  # the group (of stored scales) each column in the rounding order belongs to
    H.diagonal().add_(percdamp * H.diagonal().mean())
    U = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(H)), upper=True)
    diagonal = U.diagonal().unbind()  # U_jj, each a 0-d tensor (indexed per column without a tensor operation)
    dynamic = grid.group is not None and not static
    # per group of stored scales, 1 / scale and the scale as stored: set once a group's scale is (the loop is
    # Python-bound: each tensor operation taken out of it counts)
    inverse, kept = list((1.0 / scales).T), list(grid.kept(scales).T)
    sparse = bool(zeros.any())
    # held transposed, [cols, rows]: each column one contiguous row, so a column's operations read contiguous memory
    # (the same operations per weight; on the default model's layers about 1.8× as fast on 2 CPU cores)
    W, zeros = W.T.contiguous(), zeros.T.contiguous()
    Q = torch.empty_like(W)
    for start in range(0, cols, blocksize):
        end = min(start + blocksize, cols)
        block = W[start:end].clone()  # [b, rows], updated as its columns are rounded
        u = U[start:end, start:end]
        errors = torch.empty_like(block)  # each column's error, negated: (q − w) / U_jj
        for i in range(end - start):
            column = start + i  # in the rounding order
            if dynamic and column % group == 0:
                g = column // group
                scales[:, g] = grid.scale(W[column:column + group].T)  # W: as the block began
                inverse[g], kept[g] = 1.0 / scales[:, g], grid.kept(scales[:, g])
            g = home[column]
            w, q, error = block[i], Q[column], errors[i]
            grid.integers(w, inverse[g], q)
            if sparse:
                q.masked_fill_(zeros[column], 0)
            torch.mul(q, kept[g], out=error).sub_(w).div_(diagonal[column])
            # the error ⊗ U[i, i+1:] off the later columns, the product rounded before the sum as the authors' code
            # rounds it (a fused update, addr_, rounds once: other integers where a weight sits near a half)
            block[i + 1:] += torch.outer(u[i, i + 1:], error)
        W[end:] += U[start:end, end:].T @ errors  # the lazy batch update of the columns after it
    return Q.T[:, torch.argsort(perm)].to(torch.int8), grid.kept(scales)
