"""Surgical rank search: lower each projection's rank while a score on a search split stays close to the original's.

The loop of the authors' ``surgical.py`` (task accuracy) and ``perplexity_test.py`` (perplexity), in
``nyunAI/SFSD-LLM``: projections are visited from the last layer's last to the first layer's first;
for a projection of break-even rank κ = d·k/(d+k) the candidates are 1, ⌊0.1κ⌋, ⌊0.2κ⌋, … ⌊κ⌋
(``steps`` = 10 tenths), tried from the lowest; the first whose model scores within the tolerance
is kept, every other projection as the search left it. When only κ passes (factors as large as the
matrix) or nothing does, the projection stays dense. The tolerance is the authors':

* a score where higher is better (accuracy): at least the original's minus ``delta``;
* perplexity (lower is better): at most the original's × (1 + ``growth``)^n, n the projections
  visited so far, this one included (their 1.005^(224 − index)): the allowance grows as the model shrinks.

The search split picks the ranks; the test split (disjoint, the caller's) is scored on the
original and on the result, and optionally after each layer (the points for a plot of parameters
against the scores).

Where LayerCut differs from the authors' code: the bases (eigenvectors of each projection's
output covariance, or its singular vectors) are computed once on the *original* model's
activations (they take them from a first pass that decomposed every projection at rank κ);
each candidate is scored once on the whole search split (their task search scores three chunks
of 6.7 % and keeps the largest rank any chunk needs, then re-checks on the whole 20 %); every
chosen projection is searched (their code skips the first 28 and the very last). Rebuilding the
result from its ranks (``Decompose`` with ``ranks``) calibrates sequentially, so it is close to,
not identical with, the searched model, which the result holds.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from torch import nn

from prune.core.architectures import decoder_layers
from prune.core.calibration import Calibration
from prune.core.errors import InvalidInput, quoted
from prune.lowrank.bases import factored_module
from prune.lowrank.decomposition import RANKS_FIELD, Ranks, check_space, chosen, original_bases, put
from prune.lowrank.step import Decompose
from prune.core.surgery import clone_layers
from prune.core.sizes import size_of

Score = Callable[[nn.Module], float]
Progress = Callable[[float, str], object]


@dataclass(frozen=True)
class Tolerance:
    """When a search score is close enough to the original's (see the module docstring)."""

    higher_is_better: bool = True
    delta: float = 0.0  # higher is better: score ≥ original − delta
    growth: float = 0.005  # lower is better: score ≤ original · (1 + growth)^visited

    def __post_init__(self):
        for name in ("delta", "growth"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
                raise InvalidInput(f"The tolerance's {name} is a number of at least 0, not {quoted(value)}.")

    def bound(self, original: float, visited: int) -> float:
        """The worst search score allowed after ``visited`` projections."""
        if self.higher_is_better:
            return original - self.delta
        return original * (1 + self.growth) ** visited

    def allows(self, score: float, original: float, visited: int) -> bool:
        bound = self.bound(original, visited)
        return score >= bound if self.higher_is_better else score <= bound


@dataclass(frozen=True)
class Point:
    """The model after one projection was searched: its parameters, its search score, and its test score when taken.

    The first point, ``layer`` −1, is the original (both scores taken)."""

    layer: int
    path: str
    rank: int | None  # None: left dense
    params: int
    search: float
    test: float | None = None


@dataclass(frozen=True)
class SearchResult:
    ranks: Ranks  # the decomposed projections
    points: tuple[Point, ...]  # one per searched projection, in search order
    params: tuple[int, int]  # (original, result)
    search: tuple[float, float]  # (original, result) on the search split
    test: tuple[float, float]  # (original, result) on the test split
    model: nn.Module  # the searched model (the original is untouched)
    space: str = "feature"

    def step(self, calibration: Calibration | None = None) -> Decompose:
        """The recipe step that rebuilds :attr:`model` from the original (same ``calibration`` as the search)."""
        return Decompose.of(self.space, ranks=self.ranks, calibration=calibration, sequential=False)


def candidates(outputs: int, inputs: int, steps: int = 10) -> list[int]:
    """1, then ⌊j/steps · κ⌋ for j = 1 … steps, κ = d·k/(d + k): ascending, without repeats."""
    even = outputs * inputs / (outputs + inputs)
    return sorted({1, *(max(1, math.floor(j * even / steps)) for j in range(1, steps + 1))})


def surgical_search(model: nn.Module, tokenizer=None, **settings) -> SearchResult:
    """Search the ranks of the chosen projections (last first) and score the result on the test split.

    Takes :func:`searching`'s arguments and returns its last item.
    """
    *_, result = searching(model, tokenizer, **settings)
    return result


def searching(model: nn.Module, tokenizer=None, *, search: Score, test: Score, tolerance: Tolerance = Tolerance(),
              space: str = "feature", projections: Iterable[str] | None = None, layers: Iterable[int] | None = None,
              steps: int = 10, calibration: Calibration | None = None, test_each_layer: bool = False,
              progress: Progress | None = None, batch_size: int = 8) -> Iterator[Point | SearchResult]:
    """The search as it goes: a :class:`Point` after each projection, then the :class:`SearchResult`.

    ``search`` and ``test`` score a model on disjoint data (e.g. a task's validation split in two).
    ``progress(fraction, message)`` is called after each projection (raising there cancels; the
    original is never touched). The bases are :func:`prune.lowrank.decomposition.original_bases` of the original,
    so ``Decompose(space, ranks=result.ranks, sequential=False)`` rebuilds the searched model.
    """
    space = check_space(space)
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise InvalidInput(f"The search steps are a whole number of at least 1, not {quoted(steps)}.")
    targets = chosen(size_of(model), projections, layers)[::-1]
    report = progress or (lambda _fraction, _message: None)
    report(0.0, f"Rank search: reading the bases of {len(targets)} projections…")
    keep = {(i, m.path): math.ceil(m.outputs * m.inputs / (m.outputs + m.inputs)) for i, m in targets}
    bases = dict(original_bases(model, tokenizer, space, keep, calibration, batch_size))  # none reaches further
    working = clone_layers(model)  # changed projection by projection; the original never is
    layers_of = decoder_layers(working)
    originals = {(i, m.path): decoder_layers(model)[i].get_submodule(m.path) for i, m in targets}
    report(0.0, "Rank search: scoring the original on the search and test splits…")
    base_search, base_test = float(search(model)), float(test(model))
    current, ranks, points = base_search, {}, []
    yield Point(-1, "", None, _params(model), base_search, base_test)
    for visited, (index, matrix) in enumerate(targets, start=1):
        key, original = (index, matrix.path), originals[(index, matrix.path)]
        kept, top = None, candidates(matrix.outputs, matrix.inputs, steps)
        for rank in top:
            put(layers_of[index], matrix.path, factored_module(original, bases[key], rank))
            score = float(search(working))
            if tolerance.allows(score, base_search, visited):
                kept = rank
                break
        if kept is None or kept == top[-1]:  # factors would not pay, or nothing passes: stays dense
            put(layers_of[index], matrix.path, original)
            kept = None
        else:
            ranks[key], current = kept, score
        layer_done = visited == len(targets) or targets[visited][0] != index
        scored = float(test(working)) if test_each_layer and layer_done else None
        points.append(Point(index, matrix.path, kept, _params(working), current, scored))
        yield points[-1]
        report(visited / len(targets), f"Rank search: layer {index} {matrix.path} → "
                                       f"{'dense' if kept is None else f'rank {kept}'} ({visited} of {len(targets)})")
    record = [{} for _ in layers_of]
    for (index, path), rank in sorted(ranks.items()):
        record[index][path] = rank
    setattr(working.config, RANKS_FIELD, record)
    final_test = points[-1].test if points and points[-1].test is not None else float(test(working))
    yield SearchResult(ranks, tuple(points), (_params(model), _params(working)), (base_search, current),
                       (base_test, final_test), working, space)


def _params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
