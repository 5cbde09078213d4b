"""The expert heatmap's data: every layer's saliency of each expert, which experts a keep fraction keeps, and what a
fraction stores and reads — by arithmetic, before anything is built."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import nn

from prune.core.experts import expert_stacks_of, experts_per_token
from prune.core.sizes import parameter_count
from prune.experts.removal import kept_experts, removed_count
from prune.experts.saliency import METHODS, moe_layers


@dataclass(frozen=True)
class ExpertMap:
    """Saliency by layer (rows: the layers with experts) and expert, with the counts its bytes are computed from."""

    method: str  # a key of prune.experts.saliency.METHODS
    layers: tuple[int, ...]  # each row's decoder layer
    scores: tuple[tuple[float, ...], ...]  # [row][expert]
    top_k: int  # experts a token is routed to
    total_params: int  # the whole model's
    expert_params: int  # one expert's matrices and biases (alike in every layer)
    router_row: int  # the router's parameters for one expert
    element: int  # bytes of one expert weight
    seconds: float = 0.0  # the pass that read them (0: from the cache)

    @classmethod
    def of(cls, model: nn.Module, method: str, scores: dict[int, torch.Tensor], seconds: float = 0.0) -> ExpertMap:
        first = next(iter(moe_layers(model).values()))  # every layer's experts alike
        stacks = expert_stacks_of(first)
        count = stacks[0].count
        one = sum(p.numel() for p in first.parameters(recurse=False)) // count
        hidden = stacks[0].shape[1]
        row = hidden + (1 if _router_bias(model) else 0)
        return cls(method, tuple(scores), tuple(tuple(float(v) for v in scores[i]) for i in scores),
                   experts_per_token(model) or 1, parameter_count(model), one, row, stacks[0].weight.element_size(),
                   seconds)

    @property
    def experts(self) -> int:
        return len(self.scores[0])

    @property
    def label(self) -> str:
        return METHODS[self.method]

    def kept(self, fraction: float) -> dict[int, list[int]]:
        """Per layer, the experts kept when ``fraction`` of each layer's go (the lowest first)."""
        return kept_experts({i: torch.tensor(row) for i, row in zip(self.layers, self.scores)}, fraction)

    def removed(self, fraction: float) -> int:
        """Experts removed from each layer."""
        return removed_count(self.experts, fraction)

    def stored_bytes(self, fraction: float) -> int:
        """The model's weights once ``fraction`` of each layer's experts and their router rows are gone (at the
        experts' element size)."""
        gone = self.removed(fraction) * len(self.layers) * (self.expert_params + self.router_row)
        return (self.total_params - gone) * self.element

    def read_bytes(self, fraction: float) -> int:
        """The weights one token reads (batch 1): every other weight, and top-k of each layer's experts."""
        left = self.experts - self.removed(fraction)
        every = self.total_params - len(self.layers) * self.experts * self.expert_params
        return (every + len(self.layers) * min(self.top_k, left) * self.expert_params) * self.element

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> ExpertMap:
        return cls(**{**data, "layers": tuple(data["layers"]), "scores": tuple(map(tuple, data["scores"]))})


def _router_bias(model: nn.Module) -> bool:
    """Whether the routers carry a bias per expert (gpt-oss)."""
    return any(name.endswith(("router.bias", "gate.bias")) for name, _ in model.named_parameters())
