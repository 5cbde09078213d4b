"""Experts merged instead of removed: REAP's merging baseline, so the page can show its claim — pruning beats merging
on generation — on the model in hand (Lasby et al. 2025, §3; their ``merge.py`` and ``cluster.py``).

From one pass over the calibration text, per layer:

* the **kept** experts are the most frequently routed ones (M-SMoE's dominant experts, Li et al. 2024): the
  int(E · fraction) least frequent are merged away, ties as :func:`prune.experts.removal.kept_experts` breaks them;
* each merged-away expert joins the kept expert whose **characteristic activation** — its mean output over every
  calibration token, HC-SMoE's expert similarity (Chen et al. 2024) — is nearest in Euclidean distance;
* each kept expert becomes the **frequency-weighted average** of its group's weights (their
  ``frequency_weighted_average``: the share of the layer's tokens routed to each member weighs its matrices);
  a group whose members no token reached is left as the kept expert was;
* the merged-away experts then go with their router rows, as pruning removes them.

On purpose unlike their code: they write the merged weights into every member of a group and keep all E router rows
(tied copies, so the stored bytes shrink only when tied on saving); here the group is one expert and the members'
router rows go, so the export is a standard checkpoint with fewer experts. The token's routing therefore differs
where a token chose a merged-away expert: it now takes its next choice among the kept.
"""

from __future__ import annotations

import torch
from torch import nn

from prune.core.calibration import Calibration
from prune.core.experts import expert_stacks_of, routed
from prune.experts.removal import kept_experts, remove_experts
from prune.experts.saliency import Progress, expert_outputs, held, moe_layers, read_calibration, remember


@torch.no_grad()
def merge_statistics(model: nn.Module, tokenizer, calibration: Calibration | None = None, *, batch_size: int = 8,
                     progress: Progress | None = None) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
    """{layer index: (frequency [E], the share of the layer's tokens routed to each expert; characteristic activation
    [E, hidden], each expert's mean output over every token)} from one pass of ``calibration`` (or the pass already
    made on these weights and text)."""
    calibration = calibration or Calibration()
    layers = moe_layers(model)
    if (found := held(model, "merging", calibration, batch_size)) is not None:
        return found
    sums = {i: [torch.zeros(expert_stacks_of(m)[0].count, dtype=torch.float64), None, 0] for i, m in layers.items()}
    read_calibration(model, tokenizer, calibration, {m: _recorder(sums[i]) for i, m in layers.items()}, batch_size,
                     progress, "Merging experts")
    found = {i: (count / count.sum().clamp(min=1), outputs / max(tokens, 1))
             for i, (count, outputs, tokens) in sums.items()}
    remember(model, calibration, found, batch_size, kind="merging")
    return found


def _recorder(found: list):
    """A pre-hook adding one call's routed counts, every expert's summed output over every token, and the token count
    into ``found`` = [counts, sums, tokens]."""
    def hook(module, args, kwargs):
        hidden, chosen, _ = routed(args, kwargs)
        count = expert_stacks_of(module)[1].count
        counts = torch.bincount(chosen.flatten().clamp(0, count), minlength=count + 1)  # a sentinel: E
        found[0] += counts[:count].double()
        sums = torch.zeros(count, hidden.shape[-1], dtype=torch.float64)
        for expert, out in expert_outputs(module, hidden, chosen, set(range(count))):
            sums[expert] = out.sum(0).double()
        found[1] = sums if found[1] is None else found[1] + sums
        found[2] += len(hidden)
    return hook


def groups(frequency: torch.Tensor, activation: torch.Tensor, fraction: float) -> dict[int, list[int]]:
    """{kept expert: the experts merged into it, itself first}: the int(E · fraction) least frequent experts each join
    the kept expert of the nearest characteristic activation (ties: the lower index)."""
    kept = kept_experts({0: frequency}, fraction)[0]
    found = {expert: [expert] for expert in kept}
    for expert in sorted(set(range(len(frequency))) - set(kept)):
        distance = (activation[kept] - activation[expert]).norm(dim=-1)
        found[kept[int(torch.argmin(distance))]].append(expert)
    return found


def mixing(plan: dict[int, list[int]], frequency: torch.Tensor) -> torch.Tensor:
    """[kept, E]: row r gives the kept expert r (in index order) the frequency-weighted average of its group (its
    own weights where no token reached any member)."""
    mix = torch.zeros(len(plan), len(frequency), dtype=torch.float64)
    for row, kept in enumerate(sorted(plan)):
        members = torch.tensor(plan[kept])
        share = frequency[members].double()
        mix[row, members] = share / share.sum() if share.sum() > 0 else (members == kept).double()
    return mix


def merge_experts(model: nn.Module, statistics: dict[int, tuple[torch.Tensor, torch.Tensor]],
                  fraction: float) -> nn.Module:
    """A variant of ``model`` whose layers keep E − int(E · fraction) experts, each the frequency-weighted average of
    its group; ``model`` is untouched."""
    layers = moe_layers(model)
    plans = {i: groups(*statistics[i], fraction) for i in layers}
    return remove_experts(model, {i: sorted(plan) for i, plan in plans.items()}, layers,
                          mix={i: mixing(plan, statistics[i][0]) for i, plan in plans.items()})
