"""Taylor+ (Shortened LLaMA, Kim et al. 2024): first-order weight saliency per layer."""

from __future__ import annotations

import numpy as np
import torch

from ..architectures import decoder_layers
from ..result import ImportanceResult, blocks_from_layers
from . import register

KEEP_FIRST, KEEP_LAST = 4, 2  # the "+" heuristic: never remove these layers


@register("taylor", "Taylor+ (Shortened LLaMA)")
def taylor(ctx, *, plus: bool = True, max_samples: int = 8) -> ImportanceResult:
    """Σ |W ⊙ ∂L/∂W| over each layer's weights from one backward pass; "+" protects the first 4 and last 2."""
    model, input_ids = ctx.model, ctx.input_ids[:max_samples].to(ctx.model.device)
    layers = decoder_layers(model)
    params = [p for p in model.parameters() if p.requires_grad]
    saved_grads = [p.grad for p in params]
    for p in params:
        p.grad = None
    try:
        with torch.enable_grad():
            model(input_ids=input_ids, labels=input_ids, use_cache=False).loss.backward()
        scores = np.array([
            sum((p.detach() * p.grad).abs().sum().item() for p in layer.parameters() if p.grad is not None)
            for layer in layers
        ])
    finally:  # leave the (shared) parameters exactly as we found them
        for p, grad in zip(params, saved_grads):
            p.grad = grad
    count = len(layers)
    protected = set(range(min(KEEP_FIRST, count))) | set(range(max(count - KEEP_LAST, 0), count)) if plus else set()
    if len(protected) >= count:
        protected = set()
    return ImportanceResult(
        "taylor", blocks_from_layers(scores, protected), "Σ |W · ∂L/∂W|", layer_scores=scores,
        params={"plus": plus, "max_samples": max_samples, "protected": sorted(protected)},
    )
