"""Angular distance between the residual stream before and after a block (Gromov et al. 2024)."""

from __future__ import annotations

import math

import torch

from prune.depth.result import ImportanceResult
from prune.depth.methods import register
from prune.depth.methods.similarity import block_matrix


@register("angular", "Angular distance (Gromov et al. 2024)", selection="block", allowed={"token": ("last", "mean")},
          any_kind=True)
def angular_distance(ctx, *, token: str = "last") -> ImportanceResult:
    """arccos(cos(h_l, h_{l+n}))/π averaged over samples; small = the block barely turns the stream."""

    def distance(before: torch.Tensor, after: torch.Tensor) -> torch.Tensor:
        if token == "last":
            before, after = before[..., -1:, :], after[..., -1:, :]
        cos = torch.nn.functional.cosine_similarity(before, after, dim=-1).clamp(-1, 1)  # [S, N, T]
        return (torch.arccos(cos) / math.pi).mean(dim=(1, 2))  # [S]

    blocks = block_matrix(ctx.residuals, distance)
    return ImportanceResult("angular", blocks, "angular distance / π", layer_scores=blocks[0].copy(),
                            params={"token": token})
