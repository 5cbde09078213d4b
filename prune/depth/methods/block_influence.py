"""Block Influence (ShortGPT, Men et al. 2024): 1 − cos(h_in, h_out), averaged over tokens."""

from __future__ import annotations

import torch

from prune.depth.result import ImportanceResult
from prune.depth.methods import register
from prune.depth.methods.similarity import block_matrix


@register("block_influence", "Block Influence (ShortGPT)", any_kind=True)
def block_influence(ctx) -> ImportanceResult:
    """1 − cos(h_l, h_{l+n}) over all tokens; small = the layers barely change the hidden state."""
    blocks = block_matrix(ctx.residuals, of_cosines=influence)
    return ImportanceResult("block_influence", blocks, "1 − cos(h_in, h_out)", layer_scores=blocks[0].copy())


def influence(cosines: torch.Tensor) -> torch.Tensor:
    """[S] mean over samples and tokens of 1 − cos, from the [S, N, T] cosines."""
    return (1 - cosines).mean(dim=(1, 2))
