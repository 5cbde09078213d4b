"""Shared helper for methods that compare the residual stream at two depths."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch


def block_matrix(streams: list[torch.Tensor],
                 compare: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> np.ndarray:
    """[L, L] matrix: row n-1, column l = compare(h_l, h_{l+n}) for every block [l, l+n).

    ``streams`` holds one [L_s+1, N, T, D] residual stream per stack of layers (one; T5's encoder and decoder), whose
    layers are numbered on one line. Each stack's blocks are scored on its own stream; a block that would span two
    stacks or empty one is +inf (never cut), one past the last layer NaN. ``compare`` maps two [S, N, T, D] stacks
    (all starts at once) to [S] scores.
    """
    total = sum(stream.shape[0] - 1 for stream in streams)
    blocks = np.full((total, total), np.nan)
    offset = 0
    for stream in streams:
        count = stream.shape[0] - 1
        if len(streams) > 1:
            blocks[:, offset: offset + count] = np.inf
        for n in range(1, count + 1 if len(streams) == 1 else count):  # of two stacks, each keeps a layer
            found = compare(stream[: count + 1 - n], stream[n:])
            blocks[n - 1, offset: offset + count - n + 1] = found.double().numpy()
        offset += count
    for n in range(1, total + 1):
        blocks[n - 1, total - n + 1:] = np.nan  # past the last layer
    return blocks
