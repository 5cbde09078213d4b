"""SparseGPT (Frantar & Alistarh 2023, arXiv 2301.00774): prune one weight matrix and update the
weights it keeps so that the layer's output on the calibration inputs changes as little as possible.

As the authors' ``sparsegpt.py`` computes it: H = XᵀX over the calibration tokens, dead inputs
(H_jj = 0) zeroed, H dampened by ``percdamp`` × its mean diagonal, and the upper Cholesky factor U
of H⁻¹ read row by row. Columns are fixed left to right in blocks of ``blocksize``: each weight's
pruning error is spread over the columns not yet fixed inside its block at once, and over the
columns after the block in one lazy batch update. The mask is chosen adaptively from the
already-updated weights by the OBS saliency w² / U_jj²: for unstructured sparsity once per block,
over the whole block (all rows × its columns: the comparison group), for N:M once per M columns,
in each row.

One difference, also in :mod:`prune.sparsity.masks`: the authors prune every weight whose saliency is
``<=`` the k-th smallest (k + 1 weights, more with ties); here exactly the k = ⌊size · sparsity⌋
lowest are pruned, so every group holds exactly the asked sparsity.
"""

from __future__ import annotations

import torch

BLOCKSIZE = 128  # the authors' columns per block
PERCDAMP = 0.01  # the authors' dampening, a fraction of the mean Hessian diagonal


def lowest(score: torch.Tensor, k: int) -> torch.Tensor:
    """Bool mask of the ``k`` lowest scores along the last dimension (ties: the first ones)."""
    if k <= 0:
        return torch.zeros_like(score, dtype=torch.bool)
    threshold = score.kthvalue(k, dim=-1, keepdim=True).values  # a selection, several times faster than a sort
    below, ties = score < threshold, score == threshold
    wanted = k - below.sum(-1, keepdim=True)  # how many of the tied scores go
    return below | (ties & (ties.cumsum(-1) <= wanted))


def count(size: int, sparsity: float) -> int:
    """How many of ``size`` weights a group loses: ⌊size · sparsity⌋ (the 1e-9 absorbs 0.29 · 100 = 28.999…)."""
    return int(size * sparsity + 1e-9)


@torch.no_grad()
def sparsegpt(weight: torch.Tensor, hessian: torch.Tensor, sparsity: float, nm: tuple[int, int] | None = None, *,
              blocksize: int = BLOCKSIZE, percdamp: float = PERCDAMP) -> torch.Tensor:
    """The pruned and reconstructed [rows, cols] float32 weight; ``hessian`` is XᵀX, [cols, cols]."""
    W = weight.detach().float().clone()  # [rows, cols], rows = outputs
    H = hessian.detach().float().clone()  # [cols, cols]
    rows, cols = W.shape
    if nm is not None and blocksize % nm[1]:
        raise ValueError(f"N:M groups of {nm[1]} must tile blocks of {blocksize} columns.")
    dead = H.diagonal() == 0  # inputs that were always zero: their weights never mattered
    H[dead, dead] = 1
    W[:, dead] = 0
    H.diagonal().add_(percdamp * H.diagonal().mean())
    # Row j of U (upper Cholesky factor of H⁻¹) is the update that fixing column j makes to the
    # columns after it, once the columns before it are fixed; U_jj² is that column's H⁻¹ entry.
    U = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(H)), upper=True)
    for start in range(0, cols, blocksize):
        end = min(start + blocksize, cols)
        block = W[:, start:end].clone()  # [rows, b], updated as its columns are fixed
        u = U[start:end, start:end]
        d = u.diagonal()  # [b]
        errors = torch.zeros_like(block)
        if nm is None:
            saliency = block**2 / d**2
            mask = lowest(saliency.flatten(), count(saliency.numel(), sparsity)).view_as(block)
        else:
            mask = torch.zeros_like(block, dtype=torch.bool)
        for i in range(end - start):
            if nm is not None and i % nm[1] == 0:
                group = slice(i, i + nm[1])
                mask[:, group] = lowest(block[:, group] ** 2 / d[group] ** 2, nm[0])
            w = block[:, i]
            kept = torch.where(mask[:, i], torch.zeros_like(w), w)
            error = (w - kept) / d[i]  # [rows]
            block[:, i:].addr_(error, u[i, i:], alpha=-1)  # −= error ⊗ U[i, i:], in place
            block[:, i] = kept  # exact zeros, not w − (w / d) · d
            errors[:, i] = error
        W[:, start:end] = block
        W[:, end:] -= errors @ U[start:end, end:]  # the lazy batch update of the columns after the block
    return W
