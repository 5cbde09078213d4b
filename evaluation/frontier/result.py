"""A frontier's measured points: each family's point at each size, the Pareto front, and the best under a target.

Every number here was measured on a built model (:mod:`evaluation.frontier.run`). A family's point at a
size is its best measured point (lowest perplexity; then the better task score) whose value on the axis is
at most that fraction of the original's; the best under a target is chosen the same way among every point,
the original included. Both compare measured values with the bound, so neither is ever over it.

A deployment sees bytes and time, not zeros: on the bytes and latency axes a candidate that is neither smaller
in bytes as stored nor measurably faster than the original (:func:`gains`: unstructured sparsity stored densely,
2:4 without a sparse kernel) is never a family's point nor the best under a target, and the answer says so
when it would have looked best.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from prune.core.recipe import Recipe

from evaluation.frontier.compound import QUANTIZED
from evaluation.frontier.plan import AXES, FAMILIES, Target
from evaluation.frontier.screen import Screened, label_of
from evaluation.sweeps.cuts import from_json_number, to_json_number

MIB = 2**20
FASTER = 0.95  # a decode at most this share of the original's (timed in turns with it) counts as faster: 3 runs'
# medians of the same model differ by a few percent on a loaded machine
RENAMED_AXES = {"mib": "bytes"}  # an axis in older result files, by its name now


@dataclass(frozen=True)
class Point:
    """One measured model: what it is, what it costs and what it scores."""

    families: tuple[str, ...]  # () for the original
    size: float | None  # the size it was planned for (None: a fixed size, or the original)
    recipe: Recipe
    params: int  # parameters that are not zero
    weight_bytes: int  # its weights' bytes as stored (quantized: their real bytes; zeros stored densely in full)
    ms: float  # decode latency per token at batch 1
    dense_ms: float  # the original's, timed in turns with it
    ideal_speedup: float  # the original's per-token matmul FLOPs over this model's (decode is bound by bytes: floor_ms)
    perplexity: float
    task: float  # the task's primary metric, in lm-eval's units
    build_s: float
    measure_s: float
    floor_ms: float | None = None  # the decode's memory-bandwidth floor, where the speed rows carry one

    def value(self, axis: str) -> float:
        """This point on ``axis``: parameters, bytes or ms per token."""
        return {"params": float(self.params), "bytes": float(self.weight_bytes), "ms": self.ms}[axis]

    @property
    def label(self) -> str:
        return label_of(self.families)

    def to_json(self) -> dict:
        numbers = {k: to_json_number(getattr(self, k)) for k in ("ms", "dense_ms", "ideal_speedup", "perplexity",
                                                                 "task", "build_s", "measure_s", "floor_ms")}
        return {"families": list(self.families), "size": self.size, "recipe": self.recipe.to_json(),
                "params": self.params, "weight_bytes": self.weight_bytes, **numbers}

    @classmethod
    def from_json(cls, data: dict) -> Point:
        numbers = {k: from_json_number(data[k]) for k in ("ms", "dense_ms", "ideal_speedup", "perplexity", "task",
                                                          "build_s", "measure_s")}
        return cls(tuple(data["families"]), data["size"], Recipe.from_json(data["recipe"]), int(data["params"]),
                   int(data["weight_bytes"]), **numbers, floor_ms=to_json_number(data.get("floor_ms")))


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
    screened: tuple[Screened, ...] = ()  # candidates screened out (each names its rival), not measured in full
    screen: int = 0  # the screen's perplexity windows (0: every candidate measured in full)

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

    def counts(self, point: Point, axis: str | None = None) -> bool:
        """Whether ``point`` may stand on ``axis``: on bytes and latency, only if a deployment sees a gain."""
        return (axis or self.axis) == "params" or gains(point, self.dense)

    def cell(self, family: str, size: float) -> Point | str | None:
        """``family``'s point at ``size``, why it has none, or None (not measured yet)."""
        under = [p for p in self.points if family in p.families and self.fraction(p) <= size]
        fitting = [p for p in under if self.counts(p)]
        if fitting:
            return best(fitting)
        if under:
            return no_gain(best(under), self.dense)
        out = [p for p in self.screened if family in p.families and p.value(self.axis) <= self.bound(size)]
        if out:
            return screened_out(min(out, key=lambda p: p.perplexity), self.screen)
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
        named = {f for p in (*self.points, *self.screened) for f in p.families} | {f for f, _ in self.why}
        return [f for f in FAMILIES if f in named] + sorted(named - set(FAMILIES))  # then the repaired ones

    def front(self) -> list[Point]:
        """The Pareto front on the axis: no other point is as small and has a lower perplexity, smallest first (on
        bytes and latency, among the points a deployment sees a gain in)."""
        ordered = sorted((p for p in self.everything() if self.counts(p)), key=lambda p: (p.value(self.axis),
                                                                                         p.perplexity))
        found, lowest = [], math.inf
        for point in ordered:
            if point.perplexity < lowest:
                found.append(point)
                lowest = point.perplexity
        return found

    def meeting(self, target: Target) -> list[Point]:
        """Every point (the original included) at or under ``target``, a gain or not."""
        if target.of_original:  # a fraction, compared as one
            return [p for p in self.everything() if self.fraction(p, target.axis) <= target.value]
        return [p for p in self.everything() if p.value(target.axis) <= target.value]

    def best_under(self, target: Target) -> Point | None:
        """The best point at or under ``target`` that may stand on the target's axis; None if none is."""
        fitting = [p for p in self.meeting(target) if self.counts(p, target.axis)]
        return best(fitting) if fitting else None

    def passed_over(self, target: Target) -> Point | None:
        """The point that would have looked best under ``target`` but was left out for gaining nothing (or None)."""
        fitting = self.meeting(target)
        looks = best(fitting) if fitting else None
        return None if looks is None or self.counts(looks, target.axis) else looks

    def format_value(self, value: float, axis: str | None = None) -> str:
        axis = axis or self.axis
        if axis == "params":
            return f"{100 * value / self.dense.params:.1f} % of the parameters"
        return f"{value / MIB:.1f} MiB" if axis == "bytes" else f"{value:.1f} ms/token"

    def to_json(self) -> dict:
        return {"axis": self.axis, "sizes": list(self.sizes), "method": self.method, "task": self.task,
                "metric": self.metric, "limit": self.limit, "ppl_seq_len": self.ppl_seq_len,
                "ppl_windows": self.ppl_windows, "dense": self.dense.to_json(),
                "points": [p.to_json() for p in self.points],
                "why": [{"family": f, "size": s, "why": w} for (f, s), w in self.why.items()],
                "pending": self.pending, "front": [p.recipe.key for p in self.front()],
                "screened": [p.to_json() for p in self.screened], "screen": self.screen}

    @classmethod
    def from_json(cls, data: dict) -> FrontierResult:
        return cls(RENAMED_AXES.get(data["axis"], data["axis"]), tuple(data["sizes"]), data["method"], data["task"],
                   data["metric"], data["limit"], data["ppl_seq_len"], data["ppl_windows"],
                   Point.from_json(data["dense"]), tuple(Point.from_json(p) for p in data["points"]),
                   {(w["family"], w["size"]): w["why"] for w in data["why"]}, data.get("pending", 0),
                   tuple(Screened.from_json(p) for p in data.get("screened", ())), data.get("screen", 0))


def best(points: list[Point]) -> Point:
    """The lowest perplexity; among equals, the better task score (lm-eval's metrics here: higher is better)."""
    return min(points, key=lambda p: (p.perplexity, -p.task))


def gains(point: Point, dense: Point) -> bool:
    """Whether a deployment sees ``point``'s compression: fewer bytes as stored than the original, or a decode
    measurably faster than the original's timed beside it (the original itself always stands)."""
    return not point.families or point.weight_bytes < dense.weight_bytes or point.ms <= FASTER * point.dense_ms


def no_gain(point: Point, dense: Point) -> str:
    """Why ``point`` stands on no bytes or latency axis."""
    return (f"{point.label} ({point.recipe.short()}) is neither smaller nor faster: it stores "
            f"{point.weight_bytes / MIB:.1f} MiB (the original {dense.weight_bytes / MIB:.1f}) and decodes at "
            f"{point.ms:.1f} ms/token against the original's {point.dense_ms:.1f} timed beside it (faster means at "
            f"least {100 * (1 - FASTER):g} % faster); zeros stored densely save nothing a deployment sees")


def screened_out(point: Screened, windows: int) -> str:
    """Why a family's point at a size was not measured in full: its screen, and the rival that beat it."""
    return (f"screened out: {point.recipe.short()}, {point.weight_bytes / MIB:.1f} MiB as stored, perplexity "
            f"{point.perplexity:.4g} on the screen's {windows} windows, beaten on every window beyond the screen's "
            f"noise by {point.beaten_by} (measure it in full: --frontier_all, or the page's 'Measure every "
            "candidate in full')")


def in_percent(result: FrontierResult) -> bool:
    """Whether the task's metric shows in percent (accuracies), in the table and the target's line alike."""
    return result.metric in ("acc", "acc_norm")


def format_table(result: FrontierResult) -> str:
    """A Markdown table: each family's point at each size, the front marked ★, no gain †; then why a family has
    none."""
    unit = "%" if in_percent(result) else ""
    scale = 100 if unit else 1
    front = {p.recipe.key for p in result.front()}
    head = (f"Frontier by {AXES[result.axis]}: WikiText-2 test perplexity ({result.ppl_windows} × "
            f"{result.ppl_seq_len} tokens, no BOS), {result.task} {result.metric} (first {result.limit or 'all'}), "
            f"decode at batch 1 (ms/token; in brackets the memory-bandwidth floor, where measured). ★: on the Pareto "
            f"front. †: neither smaller in bytes nor faster than the original (zeros stored densely save nothing).")
    lines = [head, "", "| size | family | model | MiB as stored | params not zero | ms/token (floor) | perplexity | "
             f"{result.task} {unit} | build s |", "|---|---|---|---:|---:|---:|---:|---:|---:|"]

    def row(size: str, family: str, p: Point) -> str:
        mark = (" ★" if p.recipe.key in front else "") + ("" if gains(p, result.dense) else " †")
        floor = "" if p.floor_ms is None else f" ({p.floor_ms:.1f})"
        return (f"| {size} | {family}{mark} | {p.recipe.short()} | {p.weight_bytes / MIB:.1f} | "
                f"{100 * p.params / result.dense.params:.1f} % | {p.ms:.1f}{floor} | {p.perplexity:.2f} | "
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


def what_it_shows(result: FrontierResult, size: float) -> str:
    """The rows at ``size`` in words, written from their numbers (so that words about a table never drift from it):
    the best point a deployment gains from, against the original, and the best one without quantization."""
    rows = [p for f in result.families() if isinstance(p := result.cell(f, size), Point) and gains(p, result.dense)]
    at = f"At {100 * size:g} % of {AXES[result.axis]}"
    if not rows:
        return f"{at}, no family has a point a deployment gains from."
    dense, lead = result.dense, best(rows)
    score = (lambda p: f"{100 * p.task:.1f} %") if in_percent(result) else (lambda p: f"{p.task:.4f}")

    def said(p: Point) -> str:
        return (f"{p.label} ({p.recipe.short()}): perplexity {p.perplexity:.2f} and {result.task} {score(p)} in "
                f"{100 * p.weight_bytes / dense.weight_bytes:.0f} % of the bytes, {p.ms:.1f} ms/token "
                f"({p.dense_ms / p.ms:.1f}× the original's speed)")

    words = (f"{at}, the best is {said(lead)}; the original: perplexity "
             f"{dense.perplexity:.2f}, {result.task} {score(dense)}, {dense.ms:.1f} ms/token.")
    unquantized = [p for p in rows if not any(f.endswith(QUANTIZED) for f in p.families)]
    if unquantized and best(unquantized) is not lead:
        words += f" Without quantization the best is {said(best(unquantized))}."
    elif not unquantized:
        words += " No point without quantization reaches this size with a gain."
    return words


def target_line(result: FrontierResult, target: Target, chosen: Point | None) -> str:
    """'Best under 80 % of the original's bytes as stored: int8 (…): 130.2 MiB as stored, …' or why none; then why
    a point that looked better was left out, or that the chosen one gains nothing a deployment sees."""
    left = result.passed_over(target)
    after = "" if left is None else (f" Left out, though its perplexity ({left.perplexity:.2f}) was lower: "
                                     f"{no_gain(left, result.dense)}.")
    if chosen is None:
        smallest = min(result.everything(), key=lambda p: p.value(target.axis))
        return (f"No measured model is under {target.words()}: the smallest is {smallest.label}, at "
                f"{result.format_value(smallest.value(target.axis), target.axis)}.{after}")
    if not gains(chosen, result.dense):
        after += f" Beware: {no_gain(chosen, result.dense)}; size by bytes to compare what a device holds."
    score = f"{100 * chosen.task:.1f} %" if in_percent(result) else f"{chosen.task:.4f}"
    return (f"Best under {target.words()}: {chosen.label} ({chosen.recipe.describe()}): {_deployed(chosen)} "
            f"(the original {_deployed(result.dense)}), {result.format_value(chosen.params, 'params')}, perplexity "
            f"{chosen.perplexity:.2f}, {result.task} {result.metric} {score}.{after}")


def _deployed(point: Point) -> str:
    """What a deployment sees of ``point``: '130.2 MiB as stored, 40.1 ms/token (floor 9.8)'."""
    floor = "" if point.floor_ms is None else f" (floor {point.floor_ms:.1f})"
    return f"{point.weight_bytes / MIB:.1f} MiB as stored, {point.ms:.1f} ms/token{floor}"
