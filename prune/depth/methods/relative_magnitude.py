"""Relative magnitude ‖f(x)‖ / ‖x + f(x)‖ of what a layer (or block) adds to the stream."""

from __future__ import annotations

import torch

from prune.depth.result import ImportanceResult
from prune.depth.methods import register
from prune.depth.methods.similarity import block_matrix


@register("relative_magnitude", "Relative magnitude ‖f(x)‖/‖x+f(x)‖", any_kind=True)
def relative_magnitude(ctx) -> ImportanceResult:
    """Mean over tokens of ‖h_{l+n} − h_l‖ / ‖h_{l+n}‖; small = the block adds little."""

    def ratio(before: torch.Tensor, after: torch.Tensor) -> torch.Tensor:
        added = (after - before).norm(dim=-1)  # [S, N, T]
        return (added / after.norm(dim=-1).clamp_min(1e-12)).mean(dim=(1, 2))

    blocks = block_matrix(ctx.residuals, ratio)
    return ImportanceResult("relative_magnitude", blocks, "‖f(x)‖ / ‖x + f(x)‖", layer_scores=blocks[0].copy())
