"""LLM-Pruner's criterion (Ma et al. 2023, arXiv 2305.11627; ``horseee/LLM-Pruner``): element-wise first-order
Taylor importance of coupled structures, as the authors' code computes it with ``--pruner_type taylor --taylor
param_first`` (the paper's first-order element-wise importance; their script's default, ``param_mix``, adds a
second-order term from per-example squared gradients, which this does not compute).

A weight's element scores |W ⊙ ∂L/∂W| for the mean next-token loss of one batch of calibration windows (their
``TaylorImportance``: ``salience = weight * grad``, then ``salience.abs()`` summed along the other axis), over
every matrix coupled to a structure, and the group sums its members (``group_reduction="sum"``): an MLP
channel is its row of ``gate_proj`` and ``up_proj`` and its column of ``down_proj``; an attention head is its
rows of ``q_proj``, ``k_proj`` and ``v_proj`` and its columns of ``o_proj``, the channels of a head summed
(their ``consecutive_groups`` of ``head_dim``). Only weights count, not biases, as there. The lowest groups go.

Where LayerCut differs from that code, and why:
- the unit of attention is a whole KV group (a KV head and the query heads sharing it), as for Wanda-sp: the
  authors' dependency graph knows only one KV head per query head, and a smaller group would need a
  config no library loads;
- every layer loses the same structures, so a standard config holds the result (Wanda-sp's plan,
  :func:`prune.width.shrink.plan`); their block-wise mode keeps the first layers and the last (their README
  prunes layers 4–29 of LLaMA-7B's 32) at a higher ratio each, which only their pickled model can hold;
- the calibration is LayerCut's (the step's; theirs: 10 windows of 64 tokens of BookCorpus), and the scores
  are in float32 from one backward pass over the whole batch, one weight's gradient alive at a time
  (:mod:`prune.core.gradients`, also for a model read from disk).
"""

from __future__ import annotations

import torch
from torch import nn

from prune.core.architectures import Width, decoder_layers, get_path
from prune.core.calibration import Calibration, token_windows
from prune.core.devices import input_device
from prune.core.gradients import layer_gradients
from prune.core.sizes import LayerShape
from prune.width.layout import Scores, unit_sizes, weight_dim

IMPORTANCE = "LLM-Pruner"
DESCRIPTION = ("LLM-Pruner's criterion, as the authors' code: Σ |W · ∂L/∂W| over each KV group's and MLP channel's "
               "rows and columns (q/k/v/o; gate/up/down), one backward pass. Every layer loses the same share (a "
               "standard config), where their code skips the first and last layers.")


def taylor_scores(model: nn.Module, tokenizer, width: Width, shape: LayerShape,
                  calibration: Calibration | None = None) -> list[Scores]:
    """LLM-Pruner's scores of every layer's KV groups (None without heads) and MLP channels, from one backward
    pass over the calibration windows: ``[(groups, channels)]`` per layer, float32."""
    windows = token_windows(tokenizer, calibration or Calibration()).to(input_device(model))
    kinds = {"channels": width.channels, **({"heads": width.heads} if width.heads and shape.group_params else {})}
    sizes, units = unit_sizes(shape)
    first = decoder_layers(model)[0]
    read = {f"{path}.weight": (kind, spec.split(), weight_dim(get_path(first, path), spec.split()[0]))
            for kind, entries in kinds.items() for path, spec in entries}
    totals = [{"channels": torch.zeros(shape.channels, dtype=torch.float64),
               "heads": torch.zeros(shape.groups, dtype=torch.float64)} for _ in decoder_layers(model)]

    def consume(index: int, name: str, weight: torch.Tensor, grad: torch.Tensor) -> None:
        kind, (_axis, *segments), dim = read[name]
        salience = torch.mul(weight.float(), grad.float()).abs_()
        along = salience.sum(dim=1 - dim, dtype=torch.float32) if salience.dim() == 2 else salience
        offset = 0
        for segment in segments:
            count = units[segment] * sizes[segment]
            part = along[offset:offset + count].view(units[segment], sizes[segment]).sum(1)
            totals[index][kind] += part.double().cpu()
            offset += count

    layer_gradients(model, windows, lambda _layer: list(read), consume, what=f"{IMPORTANCE}'s criterion")
    return [Scores(found["heads"].float() if "heads" in kinds else None, found["channels"].float())
            for found in totals]
