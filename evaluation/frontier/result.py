"""A frontier's measured points: each family's point at each size, the Pareto front, and the best under a target.

Every number here was measured on a built model (:mod:`evaluation.frontier.run`). A family's point at a
size is its best measured point (lowest perplexity; then the better task score) whose value on the axis is
at most that fraction of the original's; the best under a target is chosen the same way among every point,
the original included. Both compare measured values with the bound, so neither is ever over it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from prune.core.recipe import Recipe

from evaluation.frontier.plan import AXES, FAMILIES, Target
from evaluation.sweeps.cuts import from_json_number, to_json_number

MIB = 2**20


@dataclass(frozen=True)
class Point:
    """One measured model: what it is, what it costs and what it scores."""

    families: tuple[str, ...]  # () for the original
    size: float | None  # the size it was planned for (None: a fixed size, or the original)
    recipe: Recipe
    params: int  # parameters that are not zero
    weight_bytes: int  # what its weights take in memory (quantized: their real bytes)
    ms: float  # decode latency per token at batch 1
    dense_ms: float  # the original's, timed in turns with it
    ideal_speedup: float  # the original's per-token matmul FLOPs over this model's
    perplexity: float
    task: float  # the task's primary metric, in lm-eval's units
    build_s: float
    measure_s: float

    def value(self, axis: str) -> float:
        """This point on ``axis``: parameters, MiB or ms per token."""
        return {"params": float(self.params), "mib": self.weight_bytes / MIB, "ms": self.ms}[axis]

    @property
    def ideal_ms(self) -> float:
        """The latency a FLOPs-proportional speedup would give."""
        return self.dense_ms / self.ideal_speedup

    @property
    def label(self) -> str:
        return " / ".join(self.families) if self.families else "original"

    def to_json(self) -> dict:
        numbers = {k: to_json_number(getattr(self, k)) for k in ("ms", "dense_ms", "ideal_speedup", "perplexity",
                                                                 "task", "build_s", "measure_s")}
        return {"families": list(self.families), "size": self.size, "recipe": self.recipe.to_json(),
                "params": self.params, "weight_bytes": self.weight_bytes, **numbers}

    @classmethod
    def from_json(cls, data: dict) -> Point:
        numbers = {k: from_json_number(data[k]) for k in ("ms", "dense_ms", "ideal_speedup", "perplexity", "task",
                                                          "build_s", "measure_s")}
        return cls(tuple(data["families"]), data["size"], Recipe.from_json(data["recipe"]), int(data["params"]),
                   int(data["weight_bytes"]), **numbers)


@dataclass(frozen=True)
class FrontierResult:
    """The original and every point measured so far (``pending`` candidates not yet), on one axis."""

    axis: str
    sizes: tuple[float, ...]
    method: str
    task: str
    metric: str
    limit: int | None
    ppl_seq_len: int
    ppl_windows: int
    dense: Point
    points: tuple[Point, ...]
    why: dict[tuple[str, float], str] = field(default_factory=dict)  # (family, size) → why it reaches no point
    pending: int = 0  # candidates not measured yet

    @property
    def complete(self) -> bool:
        return self.pending == 0

    def bound(self, size: float) -> float:
        """The largest value on the axis a point at ``size`` may have."""
        return size * self.dense.value(self.axis)

    def fraction(self, point: Point, axis: str | None = None) -> float:
        """``point`` on the axis as a fraction of the original."""
        axis = axis or self.axis
        return point.value(axis) / self.dense.value(axis)

    def everything(self) -> list[Point]:
        return [self.dense, *self.points]

    def cell(self, family: str, size: float) -> Point | str | None:
        """``family``'s point at ``size``, why it has none, or None (not measured yet)."""
        fitting = [p for p in self.points if family in p.families and self.fraction(p) <= size]
        if fitting:
            return best(fitting)
        if (family, size) in self.why:
            return self.why[(family, size)]
        if self.pending:
            return None
        ours = [p for p in self.points if family in p.families]
        if not ours:
            return "not measured"
        smallest = min(p.value(self.axis) for p in ours)
        return f"measured {self.format_value(smallest)}, over {self.format_value(self.bound(size))}"

    def families(self) -> list[str]:
        """The families that have a point or a reason, in the table's order."""
        named = {f for p in self.points for f in p.families} | {f for f, _ in self.why}
        return [f for f in FAMILIES if f in named]

    def front(self) -> list[Point]:
        """The Pareto front on the axis: no other point is as small and has a lower perplexity, smallest first."""
        ordered = sorted(self.everything(), key=lambda p: (p.value(self.axis), p.perplexity))
        found, lowest = [], math.inf
        for point in ordered:
            if point.perplexity < lowest:
                found.append(point)
                lowest = point.perplexity
        return found

    def best_under(self, target: Target) -> Point | None:
        """The best point (the original included) at or under ``target``, on the target's axis; None if none is."""
        if target.axis == "params":  # a fraction, compared as one
            fitting = [p for p in self.everything() if self.fraction(p, "params") <= target.value]
        else:
            fitting = [p for p in self.everything() if p.value(target.axis) <= target.value]
        return best(fitting) if fitting else None

    def format_value(self, value: float, axis: str | None = None) -> str:
        axis = axis or self.axis
        if axis == "params":
            return f"{100 * value / self.dense.params:.1f} % of the parameters"
        return f"{value:.1f} MiB" if axis == "mib" else f"{value:.1f} ms/token"

    def to_json(self) -> dict:
        return {"axis": self.axis, "sizes": list(self.sizes), "method": self.method, "task": self.task,
                "metric": self.metric, "limit": self.limit, "ppl_seq_len": self.ppl_seq_len,
                "ppl_windows": self.ppl_windows, "dense": self.dense.to_json(),
                "points": [p.to_json() for p in self.points],
                "why": [{"family": f, "size": s, "why": w} for (f, s), w in self.why.items()],
                "pending": self.pending, "front": [p.recipe.key for p in self.front()]}

    @classmethod
    def from_json(cls, data: dict) -> FrontierResult:
        return cls(data["axis"], tuple(data["sizes"]), data["method"], data["task"], data["metric"], data["limit"],
                   data["ppl_seq_len"], data["ppl_windows"], Point.from_json(data["dense"]),
                   tuple(Point.from_json(p) for p in data["points"]),
                   {(w["family"], w["size"]): w["why"] for w in data["why"]}, data.get("pending", 0))


def best(points: list[Point]) -> Point:
    """The lowest perplexity; among equals, the better task score (lm-eval's metrics here: higher is better)."""
    return min(points, key=lambda p: (p.perplexity, -p.task))


def in_percent(result: FrontierResult) -> bool:
    """Whether the task's metric shows in percent (accuracies), in the table and the target's line alike."""
    return result.metric in ("acc", "acc_norm")


def format_table(result: FrontierResult) -> str:
    """A Markdown table: each family's point at each size, the front marked ★; then why a family has none."""
    unit = "%" if in_percent(result) else ""
    scale = 100 if unit else 1
    front = {p.recipe.key for p in result.front()}
    head = (f"Frontier by {AXES[result.axis]}: WikiText-2 test perplexity ({result.ppl_windows} × "
            f"{result.ppl_seq_len} tokens, no BOS), {result.task} {result.metric} (first {result.limit or 'all'}), "
            f"decode at batch 1 (ms/token; ideal: FLOPs-proportional). ★: on the Pareto front.")
    lines = [head, "", "| size | family | model | params | weight MiB | ms/token (ideal) | perplexity | "
             f"{result.task} {unit} | build s |", "|---|---|---|---:|---:|---:|---:|---:|---:|"]

    def row(size: str, family: str, p: Point) -> str:
        star = " ★" if p.recipe.key in front else ""
        return (f"| {size} | {family}{star} | {p.recipe.short()} | {100 * p.params / result.dense.params:.1f} % | "
                f"{p.weight_bytes / MIB:.1f} | {p.ms:.1f} ({p.ideal_ms:.1f}) | {p.perplexity:.2f} | "
                f"{scale * p.task:.1f} | {p.build_s:.1f} |")

    lines.append(row("100 %", "original", result.dense))
    notes = []
    for size in result.sizes:
        for family in result.families():
            found = result.cell(family, size)
            if isinstance(found, Point):
                lines.append(row(f"{100 * size:g} %", family, found))
            else:
                notes.append(f"- {100 * size:g} %, {family}: {found or 'not measured yet'}")
    return "\n".join(lines + ([""] + notes if notes else []))


def target_line(result: FrontierResult, target: Target, chosen: Point | None) -> str:
    """'Best under 80 % of the parameters: width (…), 79.6 % of the parameters, perplexity 148.2.' or why none."""
    if chosen is None:
        smallest = min(result.everything(), key=lambda p: p.value(target.axis))
        return (f"No measured model is under {target.words()}: the smallest is {smallest.label}, at "
                f"{result.format_value(smallest.value(target.axis), target.axis)}.")
    score = f"{100 * chosen.task:.1f} %" if in_percent(result) else f"{chosen.task:.4f}"
    return (f"Best under {target.words()}: {chosen.label} ({chosen.recipe.describe()}), at "
            f"{result.format_value(chosen.value(target.axis), target.axis)}, perplexity {chosen.perplexity:.2f}, "
            f"{result.task} {result.metric} {score}.")
