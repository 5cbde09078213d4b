"""Shared helpers for methods that compare the residual stream at two depths."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

Compare = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # two [S, N, T, D] stacks → [S]
OfCosines = Callable[[torch.Tensor], torch.Tensor]  # [S, N, T] cosines → [S]
COSINE_CHUNK = 512  # tokens whose depth-by-depth cosines are computed at once
EPS = 1e-8  # torch.nn.functional.cosine_similarity's: a norm below it counts as this


def block_matrix(streams: list[torch.Tensor], compare: Compare | None = None, *,
                 of_cosines: OfCosines | None = None) -> np.ndarray:
    """[L, L] matrix: row n-1, column l = the score of every block [l, l+n).

    ``compare`` maps two [S, N, T, D] stacks (h_l and h_{l+n} for all starts at once) to [S] scores; a method that
    reads only cos(h_l, h_{l+n}) per token gives ``of_cosines`` instead, mapping those cosines [S, N, T] to [S]: they
    are read off one matrix of every pair of depths per token (:func:`depth_cosines`), not computed again for each
    block size. ``streams`` holds one [L_s+1, N, T, D] residual stream per stack of layers (one; T5's encoder and
    decoder), whose layers are numbered on one line. Each stack's blocks are scored on its own stream; a block that
    would span two stacks or empty one is +inf (never cut), one past the last layer NaN.
    """
    if (compare is None) == (of_cosines is None):
        raise TypeError("block_matrix takes compare or of_cosines, one of them")
    total = sum(stream.shape[0] - 1 for stream in streams)
    blocks = np.full((total, total), np.nan)
    offset = 0
    for stream in streams:
        count = stream.shape[0] - 1
        cosines = None if of_cosines is None else depth_cosines(stream)
        if len(streams) > 1:
            blocks[:, offset: offset + count] = np.inf
        for n in range(1, count + 1 if len(streams) == 1 else count):  # of two stacks, each keeps a layer
            if cosines is None:
                found = compare(stream[: count + 1 - n], stream[n:])
            else:
                found = of_cosines(torch.diagonal(cosines, offset=n, dim1=-2, dim2=-1).movedim(-1, 0))
            blocks[n - 1, offset: offset + count - n + 1] = found.double().numpy()
        offset += count
    for n in range(1, total + 1):
        blocks[n - 1, total - n + 1:] = np.nan  # past the last layer
    return blocks


def depth_cosines(stream: torch.Tensor) -> torch.Tensor:
    """[N, T, L+1, L+1]: cos(h_a, h_b) in float32 for every token and every two depths of a [L+1, N, T, D] stream,
    each vector scaled to unit length once (a norm under ``EPS`` counts as ``EPS``, as ``cosine_similarity`` takes
    it), the products a batched matrix product over ``COSINE_CHUNK`` tokens at a time."""
    depths, samples, tokens, width = stream.shape
    flat = stream.reshape(depths, samples * tokens, width)
    out = torch.empty(samples * tokens, depths, depths, dtype=torch.float32, device=stream.device)
    for start in range(0, samples * tokens, COSINE_CHUNK):
        unit = flat[:, start: start + COSINE_CHUNK].transpose(0, 1).float()  # [c, L+1, D]
        unit = unit / unit.norm(dim=-1, keepdim=True).clamp_min(EPS)
        out[start: start + COSINE_CHUNK] = torch.bmm(unit, unit.transpose(1, 2))
    return out.view(samples, tokens, depths, depths)
