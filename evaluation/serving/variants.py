"""Compared models built from recipes, cached by (base model, recipe key) within a memory budget.

A depth cut shares every weight with its base model and costs nothing; later kinds of step
(sparsity, width, low-rank, healing) own new tensors: a sparse variant owns a dense copy of every
matrix it pruned, zeros included; a width-pruned one its smaller matrices; a decomposed one its
factors. What a variant costs is the bytes of the tensors it does not share with its base
(:func:`estimated_bytes` tells it before building); when the cached variants cost more than the
budget, the least recently used go first.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, replace

import psutil
import torch

from prune.core.recipe import Recipe, stamp
from prune.core.sizes import size_of
from prune.core.step import Estimate
from prune.core.storage import held

from evaluation.core.jobs import Progress
from evaluation.core.pool import Loaded

DEFAULT_BUDGET_BYTES = 4 * 2**30


def own_bytes(model: torch.nn.Module, base: torch.nn.Module) -> int:
    """Bytes of ``model``'s tensors held in memory and not shared with ``base`` (a variant built from disk layer by
    layer keeps its weights in its files: placeholders on the meta device, no bytes)."""
    shared = {t.data_ptr() for t in held(base)}
    seen: dict[int, int] = {}
    for tensor in held(model):  # plain tensors: a quantized weight's values and scales
        if tensor.device.type != "meta" and tensor.data_ptr() not in shared:
            seen[tensor.data_ptr()] = tensor.numel() * tensor.element_size()
    return sum(seen.values())


def estimated_bytes(base: torch.nn.Module, recipe: Recipe) -> int:
    """What ``recipe``'s variant of ``base`` will own, before building it: each step counts its own
    (``Step.estimate``: the matrices a sparsify step copies, the smaller ones a width step builds, the
    factors of a low-rank step, what a heal step trains); depth cuts are applied as cheap views, so that a
    later step counts only the kept layers.
    """
    found = Estimate(base=base, model=base, size=size_of(base))
    for item in recipe.steps:
        after = item.resize(found.size)
        found = replace(item.estimate(found, after), size=after)
    return found.owned


@dataclass(frozen=True)
class ServerMemory:
    """What the server process has resident, beside what its variant cache holds and may hold."""

    rss_bytes: int
    held_bytes: int  # by the variants cached now
    budget_bytes: int  # the variant cache's budget


@dataclass(frozen=True)
class Side:
    """One column of a comparison: its label, how it derives from the base, and the model."""

    label: str
    recipe: Recipe
    model: torch.nn.Module


class VariantCache:
    """Derived models by (base fingerprint, recipe key); least recently used out past the budget."""

    def __init__(self, budget_bytes: int = DEFAULT_BUDGET_BYTES):
        self.budget_bytes = budget_bytes
        self._items: OrderedDict[tuple[str, str], tuple[torch.nn.Module, int]] = OrderedDict()
        self._guard = threading.Lock()

    def get(self, base: Loaded, recipe: Recipe, progress: Progress | None = None) -> torch.nn.Module:
        """The model ``recipe`` derives from ``base`` (the base itself for the empty recipe).

        Built outside the cache's lock: a long build (SparseGPT) reports ``progress`` per layer,
        where a job's cancellation can stop it.
        """
        if recipe.is_original:
            return base.model
        key = (base.fingerprint, recipe.key)
        with self._guard:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key][0]
        model = recipe.apply(base.model, base.tokenizer, progress)
        self._keep(key, model, own_bytes(model, base.model))
        return model

    def put(self, base: Loaded, recipe: Recipe, model: torch.nn.Module) -> None:
        """Cache ``model`` as what ``recipe`` derives from ``base`` (built elsewhere, e.g. by a rank search)."""
        stamp(model, recipe)
        self._keep((base.fingerprint, recipe.key), model, own_bytes(model, base.model))

    def _keep(self, key: tuple[str, str], model: torch.nn.Module, cost: int) -> None:
        with self._guard:
            self._items[key] = (model, cost)
            self._items.move_to_end(key)
            while len(self._items) > 1 and self.used_bytes > self.budget_bytes:
                self._items.popitem(last=False)

    def models(self) -> list[torch.nn.Module]:
        with self._guard:
            return [model for model, _ in self._items.values()]

    @property
    def used_bytes(self) -> int:
        return sum(cost for _, cost in list(self._items.values()))  # a snapshot: read while others build

    def __len__(self) -> int:
        return len(self._items)

    def server_memory(self) -> ServerMemory:
        """The process's resident memory beside what this cache holds and its budget, for display."""
        return ServerMemory(psutil.Process().memory_info().rss, self.used_bytes, self.budget_bytes)
