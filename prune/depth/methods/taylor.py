"""Taylor+ (Shortened LLaMA, Kim et al. 2024): first-order weight saliency per layer.

As in the authors' code, a layer scores Σ |W ⊙ ∂L/∂W| over its weights (matrices and norm
scales, no biases) for the mean loss of one batch of calibration windows, in float32.

Peak memory stays near the weights: each weight's gradient becomes its score the moment it is
complete and is then freed (:mod:`prune.core.gradients`, which also differentiates a model read from disk
one layer at a time, with the same gradients). The whole batch goes through one backward pass, because
|Σ g| is not Σ |g|.
"""

from __future__ import annotations

import numpy as np
import torch

from prune.core.architectures import decoder_layers
from prune.core.devices import input_device
from prune.core.gradients import layer_gradients
from prune.depth.result import ImportanceResult, blocks_from_layers
from prune.depth.methods import WINDOWS, register

KEEP_FIRST, KEEP_LAST = 4, 2  # the "+" heuristic: never remove these layers


@register("taylor", "Taylor+ (Shortened LLaMA)", allowed={"max_samples": WINDOWS})
def taylor(ctx, *, plus: bool = True, max_samples: int = 8) -> ImportanceResult:
    """Σ |W ⊙ ∂L/∂W| over each layer's weights from one backward pass; "+" protects the first 4 and last 2."""
    input_ids = ctx.input_ids[:max_samples].to(input_device(ctx.model))
    scores = layer_saliency(ctx.model, input_ids)
    count = len(scores)
    protected = set(range(min(KEEP_FIRST, count))) | set(range(max(count - KEEP_LAST, 0), count)) if plus else set()
    if len(protected) >= count:
        protected = set()
    return ImportanceResult(
        "taylor", blocks_from_layers(scores, protected), "Σ |W · ∂L/∂W|", layer_scores=scores,
        params={"plus": plus, "max_samples": max_samples, "protected": sorted(protected)},
    )


def scored_weights(layer: torch.nn.Module) -> list[str]:
    """The tensors Taylor+ scores in a layer, by name: every parameter named ``weight`` (no biases), as the
    authors do."""
    return [name for name, _ in layer.named_parameters() if "weight" in name.rsplit(".", 1)[-1]]


def layer_saliency(model: torch.nn.Module, input_ids: torch.Tensor) -> np.ndarray:
    """[L] Σ |W ⊙ ∂L/∂W| per decoder layer for the mean LM loss on ``input_ids`` [N, T]."""
    totals = np.zeros(len(decoder_layers(model)))

    def consume(index: int, _name: str, weight: torch.Tensor, grad: torch.Tensor) -> None:
        totals[index] += torch.mul(weight.float(), grad.float()).abs_().sum(dtype=torch.float32).item()

    layer_gradients(model, input_ids, scored_weights, consume, what="Taylor+")
    return totals
