"""Shared helper for methods that compare the residual stream at two depths."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch


def block_matrix(residual: torch.Tensor, compare: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> np.ndarray:
    """[L, L] matrix: row n-1, column l = compare(h_l, h_{l+n}) for every block [l, l+n).

    ``residual`` is [L+1, N, T, D]; ``compare`` maps two [S, N, T, D] stacks (all starts at
    once) to [S] scores.
    """
    count = residual.shape[0] - 1
    blocks = np.full((count, count), np.nan)
    for n in range(1, count + 1):
        blocks[n - 1, : count - n + 1] = compare(residual[: count + 1 - n], residual[n:]).double().numpy()
    return blocks
