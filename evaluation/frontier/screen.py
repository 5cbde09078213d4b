"""The frontier's screen: every candidate built and estimated cheaply, so that only those that could matter are
measured in full.

A candidate's **screen** is its built model's bytes as stored and parameters not zero (counted, as the full
measurement counts them) and its WikiText-2 test negative log-likelihood on each of the first ``windows`` windows
of the full measurement's own (``SCREEN_WINDOWS``, 512 tokens each, no BOS): no task, no decode timing.

A candidate is **screened out** when a rival beats it clearly (:func:`beats`): the rival is no larger on the
frontier's axis, a deployment gains from it (fewer bytes than the original, or any point on the parameters axis),
and on the screen's windows the rival's NLL is lower on every window, by a mean paired difference larger than
``SIGMAS`` standard errors of those per-window differences (the screen's own noise, measured on each pair) and
than ``FLOOR`` (5 % in perplexity). Such a point cannot be on the Pareto front unless the windows the screen did not
read reverse the gap. Always measured in full: the original, every candidate no rival beats (every point that could
be on the front) and the ``KEEP`` best on the screen at each size. The latency axis is not screened: a decode is
measured, not estimated, so every candidate is measured in full there, as it is with ``screen=False``
(``--frontier_all``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from statistics import fmean, stdev

from prune.core.recipe import Recipe

SCREEN_WINDOWS = 4  # perplexity windows a candidate's screen reads (the full measurement reads 16)
SIGMAS = 3.0  # a rival beats a point by more than this many standard errors of their per-window differences
FLOOR = math.log(1.05)  # and by more than 5 % in perplexity
KEEP = 2  # the best on the screen at each size are measured in full whatever their rivals


def screen_windows(axis: str, ppl_windows: int, screen: bool = True) -> int:
    """The windows a frontier's screen reads: the first ``SCREEN_WINDOWS`` of its perplexity windows, or 0 (no
    screen) when it is turned off, sized by latency (measured, not estimated) or left under two (no noise to
    measure)."""
    windows = min(SCREEN_WINDOWS, ppl_windows) if screen and axis != "ms" else 0
    return windows if windows >= 2 else 0


def label_of(families: tuple[str, ...]) -> str:
    """A candidate's name in tables and messages: its families ('depth, paper / depth, block'), or 'original'."""
    return " / ".join(families) if families else "original"


@dataclass(frozen=True)
class Screened:
    """One candidate's screen: what it is, its counted size and its NLL per window; ``beaten_by`` names the rival
    that screened it out (None: measured in full)."""

    families: tuple[str, ...]
    size: float | None
    recipe: Recipe
    params: int
    weight_bytes: int
    nll: tuple[float, ...]  # mean NLL per predicted token, one per window
    build_s: float
    beaten_by: str | None = None

    @property
    def perplexity(self) -> float:
        """The screen's perplexity over its windows (each predicts as many tokens)."""
        return math.exp(fmean(self.nll))

    @property
    def label(self) -> str:
        return label_of(self.families)

    def value(self, axis: str) -> float:
        return float(self.params if axis == "params" else self.weight_bytes)

    def to_json(self) -> dict:
        return {"families": list(self.families), "size": self.size, "recipe": self.recipe.to_json(),
                "params": self.params, "weight_bytes": self.weight_bytes, "nll": list(self.nll),
                "build_s": self.build_s, "beaten_by": self.beaten_by}

    @classmethod
    def from_json(cls, data: dict) -> Screened:
        return cls(tuple(data["families"]), data["size"], Recipe.from_json(data["recipe"]), int(data["params"]),
                   int(data["weight_bytes"]), tuple(float(v) for v in data["nll"]), float(data["build_s"]),
                   data.get("beaten_by"))


def beats(rival: Screened, point: Screened) -> bool:
    """Whether ``rival``'s NLL is lower than ``point``'s on every window, by a mean beyond ``SIGMAS`` standard errors
    of the per-window differences and beyond ``FLOOR`` (at least two windows: one has no measured noise)."""
    gaps = [mine - theirs for mine, theirs in zip(point.nll, rival.nll, strict=True)]
    if len(gaps) < 2 or min(gaps) <= 0:
        return False
    mean = fmean(gaps)
    return mean > FLOOR and mean > SIGMAS * stdev(gaps) / math.sqrt(len(gaps))


@dataclass(frozen=True)
class Screening:
    """The screen so far: the original's and each candidate's (``pending`` not screened yet), on one axis."""

    axis: str
    sizes: tuple[float, ...]
    windows: int
    original: Screened
    points: tuple[Screened, ...]
    pending: int = 0

    def counts(self, point: Screened) -> bool:
        """Whether a deployment gains from ``point`` as far as the screen can tell (fewer bytes; any point by
        parameters): only such a point screens out another."""
        return self.axis == "params" or point.weight_bytes < self.original.weight_bytes

    def decided(self) -> tuple[Screened, ...]:
        """Every point, each with the rival that screens it out (a rival no larger on the axis that :func:`beats`
        it, the lowest perplexity among them), except the ``KEEP`` best at each size."""
        kept = {p.recipe.key for size in self.sizes for p in self.best_at(size)[:KEEP]}
        out = []
        for point in self.points:
            rivals = [r for r in self.points if r is not point and self.counts(r)
                      and r.value(self.axis) <= point.value(self.axis) and beats(r, point)]
            rival = min(rivals, key=lambda r: r.perplexity) if rivals and point.recipe.key not in kept else None
            out.append(replace(point, beaten_by=None if rival is None else
                               f"{rival.label} ({rival.recipe.short()}, {rival.perplexity:.4g})"))
        return tuple(out)

    def best_at(self, size: float) -> list[Screened]:
        """The points at or under ``size`` that count, best on the screen first."""
        bound = size * self.original.value(self.axis)
        return sorted((p for p in self.points if self.counts(p) and p.value(self.axis) <= bound),
                      key=lambda p: p.perplexity)

    def words(self) -> str:
        """The early answer: the best on the screen at each size so far, and what is left."""
        leads = []
        for size in self.sizes:
            found = self.best_at(size)
            leads.append(f"at {100 * size:g} % {found[0].label} ({found[0].perplexity:.4g})" if found else
                         f"at {100 * size:g} % nothing yet")
        left = f"{self.pending} to go" if self.pending else "done: measuring the survivors in full"
        return (f"Screening ({self.windows} perplexity windows a candidate, no task, no timing; "
                f"{len(self.points)} screened, {left}). Best on the screen so far: {'; '.join(leads)} "
                f"(the original {self.original.perplexity:.4g}).")


def format_screen(screening: Screening) -> str:
    """A Markdown table of the screen so far, best first."""
    unit = "MiB" if screening.axis != "params" else "% params"
    lines = [f"Screen: WikiText-2 test perplexity over the first {screening.windows} windows, bytes and parameters "
             f"counted on each built model. {screening.pending} candidates to go.", "",
             f"| family | recipe | {unit} | screen perplexity |", "|---|---|---:|---:|"]
    for p in (screening.original, *sorted(screening.points, key=lambda p: p.perplexity)):
        size = f"{p.weight_bytes / 2**20:.1f}" if screening.axis != "params" else \
            f"{100 * p.params / screening.original.params:.1f}"
        lines.append(f"| {p.label} | {p.recipe.short()} | {size} | {p.perplexity:.4g} |")
    return "\n".join(lines)
