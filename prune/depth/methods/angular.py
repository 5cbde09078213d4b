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

    def distance(cosines: torch.Tensor) -> torch.Tensor:  # [S, N, T] → [S]
        return (torch.arccos(cosines.clamp(-1, 1)) / math.pi).mean(dim=(1, 2))

    streams = [stream[..., -1:, :] for stream in ctx.residuals] if token == "last" else ctx.residuals
    blocks = block_matrix(streams, of_cosines=distance)
    return ImportanceResult("angular", blocks, "angular distance / π", layer_scores=blocks[0].copy(),
                            params={"token": token})
