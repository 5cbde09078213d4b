"""Greedy layer removal (SLEB, Song et al. 2024): remove the cheapest layer, re-score the rest, repeat.

As in the authors' ``sleb.py`` (``jiwonsong-dev/SLEB``): at every step each remaining candidate
layer is removed in turn from the *current*, already pruned model and the calibration NLL is
measured; the layer whose removal leaves the lowest NLL goes for good (ties: the earliest).
Their early and latter barriers of 1 are kept: the first and last layer are never candidates
(``protect_ends=False`` lifts that).

*Differs, for speed on a CPU*: it calibrates on ``max_samples=2`` of LayerCut's windows, spread
over them (by default the first and the last of 32 WikiText-2 validation windows of 128 tokens:
256 tokens), where the authors join 128 shuffled WikiText-2 *training* lines and cut them into
2048-token windows; it stops after ``num_removals=8`` steps (their ``num_remove_blocks``, the cut
size); and it takes the mean NLL per token (their sum over equal windows: the same choice).

Only what changes is recomputed: the current model's state at every layer boundary is kept, so
scoring the removal of layer p runs just the layers after p from the kept h_p, and committing it
recomputes the states from p on. A step with m layers left still runs about m²/2 layers and m LM
heads on each window: the defaults took 116 s of CPU time on one thread on the default model
(30 layers), about 7× the forward pass of all 32 windows that every method starts from.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from prune.core.devices import input_device
from prune.core.architectures import decoder_layers
from prune.core.errors import InvalidInput
from prune.core.hidden import StopForward, inject_hidden, logits_from_hidden, run_until_stopped
from prune.depth.result import ImportanceResult, blocks_from_layers
from prune.core.surgery import remove_layers
from prune.depth.methods import WINDOWS, register

BATCH = 8  # windows per forward: bounds the [B, T, vocab] logits (49k words on the default model)


@register("sleb", "Greedy removal (SLEB)", allowed={"num_removals": range(1, 1025), "max_samples": WINDOWS})
def sleb(ctx, *, num_removals: int = 8, max_samples: int = 2, protect_ends: bool = True) -> ImportanceResult:
    """Remove layers one at a time, each the one whose removal leaves the lowest calibration perplexity.

    ``layer_scores[i]`` is the step at which layer i went (0 = first), so ``best_layers(k)`` for
    k ≤ ``num_removals`` is the first k removals; layers never removed come after, as
    ``num_removals`` + the rank of their perplexity at the last step; protected ones are +inf.
    """
    windows = spread(len(ctx.input_ids), max_samples)
    input_ids = ctx.input_ids[windows]
    states = list(ctx.residual[:, windows])  # h_0 … h_m of the current model, [N, T, D] each
    count = len(states) - 1
    protected = {0, count - 1} if protect_ends else set()
    candidates = count - len(protected)
    if candidates < 1 or count < 2:
        raise InvalidInput(f"A {count}-layer model has no layer SLEB may remove"
                           + (" (it keeps the first and last: protect_ends=False lifts that)." if protect_ends
                              else "."))
    steps = min(num_removals, candidates, count - 1)
    warnings = [] if steps == num_removals else [
        f"Only {steps} of the {num_removals} removals asked for were possible on a {count}-layer model."]

    alive = list(range(count))  # original indices of the current model's layers
    curve = [_nll(ctx.model, [], input_ids, states[-1])]
    order, last = [], {}
    for _ in range(steps):
        nlls = {p: _nll(ctx.model, alive[p + 1:], input_ids, states[p])
                for p, layer in enumerate(alive) if layer not in protected}
        best = min(nlls, key=lambda p: (nlls[p], p))
        order.append(alive[best])
        curve.append(nlls[best])
        last = {alive[p]: v for p, v in nlls.items() if p != best}
        del alive[best]
        states = states[: best + 1] + _states_after(ctx.model, alive[best:], input_ids, states[best])

    layer_scores = np.full(count, np.inf)  # protected: +inf
    layer_scores[order] = np.arange(steps)
    for rank, layer in enumerate(sorted(last, key=lambda i: (last[i], i))):  # never removed: after every removal
        layer_scores[layer] = steps + rank
    blocks = blocks_from_layers(np.where(np.isfinite(layer_scores), layer_scores, 0.0), protected)
    ppl = [math.exp(v) for v in curve]
    sizes = sorted({n for n in (steps // 4, steps // 2, steps) if n >= 1})
    return ImportanceResult(
        "sleb", blocks, "greedy removal step (0 = first; blocks: sum)", layer_scores=layer_scores,
        params={"num_removals": num_removals, "max_samples": max_samples, "protect_ends": protect_ends,
                "protected": sorted(protected), "removal_order": order, "ppl_curve": ppl},
        cuts={f"greedy {n}": sorted(order[:n]) for n in sizes}, block_exact=False, warnings=warnings,
    )


def spread(total: int, count: int) -> torch.Tensor:
    """``count`` window indices spread evenly over ``total`` (all of them when ``count ≥ total``)."""
    return torch.linspace(0, total - 1, min(count, total)).round().long().unique()


def step_lines(result: ImportanceResult) -> list[str]:
    """One line per greedy step: the baseline perplexity, then which layer went and the perplexity left."""
    order, ppl = result.params["removal_order"], result.params["ppl_curve"]
    lines = [f"SLEB step 0: calibration perplexity {ppl[0]:.3f} with all {result.num_layers} layers"]
    return lines + [f"SLEB step {step}: removes layer {layer} → calibration perplexity {value:.3f}"
                    for step, (layer, value) in enumerate(zip(order, ppl[1:]), start=1)]


def _suffix(model: torch.nn.Module, layers: list[int]) -> torch.nn.Module:
    """A weight-sharing view of ``model`` that keeps only ``layers`` (original indices, in order)."""
    keep = set(layers)
    return remove_layers(model, [i for i in range(len(decoder_layers(model))) if i not in keep])


@torch.no_grad()
def _nll(model: torch.nn.Module, layers: list[int], input_ids: torch.Tensor, hidden: torch.Tensor) -> float:
    """Mean next-token NLL of running ``layers`` (none: straight to the head) on ``hidden`` [N, T, D]."""
    view = _suffix(model, layers) if layers else None
    total = 0.0
    for ids, h in zip(input_ids.split(BATCH), hidden.split(BATCH)):
        if view is None:
            logits = logits_from_hidden(model, h)
        else:
            with inject_hidden(view, h):
                logits = view(input_ids=ids.to(input_device(view)), use_cache=False).logits
        loss = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1).float(),
                                                 ids[:, 1:].flatten().to(logits.device))
        total += loss.item() * len(ids)  # equal window lengths: the mean of chunk means, weighted
    return total / len(input_ids)


@torch.no_grad()
def _states_after(model: torch.nn.Module, layers: list[int], input_ids: torch.Tensor,
                  hidden: torch.Tensor) -> list[torch.Tensor]:
    """Outputs of each of ``layers`` run on ``hidden``: [N, T, D] float32 on the CPU, one per layer."""
    if not layers:
        return []
    view = _suffix(model, layers)
    chunks: list[list[torch.Tensor]] = [[] for _ in layers]
    view_layers = decoder_layers(view)

    def keep(position):
        def hook(_module, _args, output):
            chunks[position].append((output[0] if isinstance(output, tuple) else output).float().cpu())
            if position == len(layers) - 1:
                raise StopForward  # the states are all that is needed
        return hook

    hooks = [layer.register_forward_hook(keep(p)) for p, layer in enumerate(view_layers)]
    try:
        for ids, h in zip(input_ids.split(BATCH), hidden.split(BATCH)):
            with inject_hidden(view, h):
                run_until_stopped(view, input_ids=ids.to(input_device(view)), use_cache=False)
    finally:
        for hook in hooks:
            hook.remove()
    return [torch.cat(c) for c in chunks]
