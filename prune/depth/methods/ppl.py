"""PPL criterion (Shortened LLaMA, Kim et al. 2024): perplexity with a layer or block removed."""

from __future__ import annotations

import math

import numpy as np
import torch

from prune.core.hidden import logits_after, logits_from_hidden
from prune.depth.result import ImportanceResult, blocks_from_layers
from prune.core.surgery import remove_layers
from prune.depth.methods import WINDOWS, register


def _nll(logits: torch.Tensor, input_ids: torch.Tensor) -> float:
    """Mean next-token negative log-likelihood; logits [N, T, V], ids [N, T]."""
    return torch.nn.functional.cross_entropy(
        logits[:, :-1].flatten(0, 1).float(), input_ids[:, 1:].flatten().to(logits.device)
    ).item()


def removed_block_nll(model, input_ids: torch.Tensor, residual: torch.Tensor, start: int, end: int) -> float:
    """NLL with layers [start, end) removed, resuming from the cached h_start (no prefix rerun)."""
    count = residual.shape[0] - 1
    if end >= count:  # nothing left after the block: the head reads h_start directly
        return _nll(logits_from_hidden(model, residual[start]), input_ids)
    suffix = remove_layers(model, range(0, end))  # a weight-sharing view of layers end … L-1
    return _nll(logits_after(suffix, input_ids, residual[start]), input_ids)


@register("ppl", "PPL criterion (Shortened LLaMA)", allowed={"max_samples": WINDOWS})
def ppl_criterion(ctx, *, max_samples: int = 4, exact_blocks: bool = False) -> ImportanceResult:
    """Calibration perplexity with each layer removed; low = removing it costs little.

    Blocks of several layers sum their layers' log-perplexities unless ``exact_blocks``
    measures every block (about L/6 times as many layer passes: slow on a CPU).
    """
    input_ids = ctx.input_ids[:max_samples]
    residual = ctx.residual[:, :max_samples]
    count = residual.shape[0] - 1
    sizes = range(1, count) if exact_blocks else range(1, 2)
    blocks = np.full((count, count), np.nan)
    for n in sizes:
        for start in range(count - n + 1):
            blocks[n - 1, start] = removed_block_nll(ctx.model, input_ids, residual, start, start + n)
    layer_nll = blocks[0].copy()
    if not exact_blocks:
        blocks = blocks_from_layers(layer_nll)
    label = "perplexity without the block" if exact_blocks else "perplexity without the layer (blocks: sum of log-ppl)"
    return ImportanceResult(
        "ppl", np.exp(blocks) if exact_blocks else blocks, label,
        layer_scores=np.exp(layer_nll), block_exact=exact_blocks,
        params={"max_samples": max_samples, "exact_blocks": exact_blocks,
                "baseline_ppl": math.exp(_nll(logits_from_hidden(ctx.model, residual[-1]), input_ids))},
    )
