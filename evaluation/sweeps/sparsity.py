"""The sparsity sweep: a task's accuracy and WikiText-2 perplexity at a list of sparsity levels, per method.

Beside the cut sweep (:mod:`evaluation.sweeps.cuts`), which removes whole blocks of layers, this zeroes
a growing fraction of every decoder matrix (:mod:`prune.sparsity.masks`) and measures what each method
keeps. A point is the model ``Recipe().then(Sparsify.of(method, level, calibration=…))`` derives;
level 0 is the dense model itself, measured once and shared by every method. The task runs
through the cut sweep's lm-eval door (tasks loaded once, the fast scorer, no stderr bootstrap)
and is judged by its primary metric (acc_norm where the task has it); perplexity is
:mod:`evaluation.quality.perplexity`'s over the first windows of WikiText-2 test, without BOS. Each point
is cached on its own, so a rerun is instant and an interrupted sweep resumes where it stopped.
"""

from __future__ import annotations

import threading
import time
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass

from prune.core.architectures import CAUSAL, kind_of
from prune.core.calibration import Calibration
from prune.core.errors import InvalidInput, quoted
from prune.core.paths import digest
from prune.core.recipe import Recipe
from prune.sparsity.step import Sparsify
from prune.sparsity.masks import MAX_SPARSITY, METHODS, check_request

from evaluation.quality import lm_eval_adapter, perplexity
from evaluation.quality.fast_lm import make_fast
from evaluation.core.jobs import Job, cancellable
from evaluation.core.store import ResultStore
from evaluation.sweeps.cuts import evaluate_loaded, from_json_number, primary_metric, task_metrics, to_json_number
from evaluation.core.settings import BATCH_SIZE, PERPLEXITY

DEFAULT_LEVELS = (0.0, 0.1, 0.5, 0.9, 0.99)
_BUILD_SHARE = 0.6  # of a point's progress bar: deriving the sparse model (SparseGPT dominates)


@dataclass(frozen=True)
class SweepPlan:
    """What one sparsity sweep measures, checked once where the request enters (:func:`check_plan`)."""

    levels: tuple[float, ...]  # sorted, unique, 0 … MAX_SPARSITY
    methods: tuple[str, ...]  # from prune.sparsity.masks.METHODS, in the caller's order
    calibration: Calibration | None  # for wanda and sparsegpt (None: the built-in text)
    ppl_seq_len: int = PERPLEXITY.seq_len
    ppl_windows: int = PERPLEXITY.windows

    def recipe(self, method: str, level: float) -> Recipe:
        """The model of one point: the dense model at level 0, else one unstructured sparsify step."""
        return Recipe() if level == 0 else Recipe().then(Sparsify.of(method, level, calibration=self.calibration))

    def points(self) -> list[tuple[str, Recipe]]:
        """(name, recipe) of every distinct model to measure: the dense one first, then each method's levels."""
        out = [("dense", Recipe())]
        return out + [(f"{method} at {100 * level:g} %", self.recipe(method, level))
                      for method in self.methods for level in self.levels if level > 0]


def check_plan(levels: Iterable[float] = DEFAULT_LEVELS, methods: Iterable[str] | str = METHODS,
               calibration: Calibration | None = None, *, ppl_seq_len: int = PERPLEXITY.seq_len,
               ppl_windows: int = PERPLEXITY.windows) -> SweepPlan:
    """A checked plan: levels sorted and unique, known methods, whole positive perplexity settings."""
    return SweepPlan(check_levels(levels), check_methods(methods), calibration,
                     _whole(ppl_seq_len, 2, "The perplexity window length"),
                     _whole(ppl_windows, 1, "The number of perplexity windows"))


def check_levels(levels: Iterable[float]) -> tuple[float, ...]:
    """Sparsity fractions from 0 to MAX_SPARSITY, returned sorted and without repeats."""
    try:
        values = list(levels)
    except TypeError:
        values = [levels]
    bad = [v for v in values if isinstance(v, bool) or not isinstance(v, (int, float))
           or not 0.0 <= float(v) <= MAX_SPARSITY]
    if bad or not values:
        what = f"not {quoted(bad[0])}" if bad else "none were given"
        raise InvalidInput(f"Sparsity levels are fractions from 0 to {MAX_SPARSITY} (0.5: half the weights zero); "
                           f"{what}.")
    return tuple(sorted({float(v) for v in values}))


def check_methods(methods: Iterable[str] | str) -> tuple[str, ...]:
    """Known sparsity methods in the caller's order, each once."""
    names = [methods] if isinstance(methods, str) else list(methods)
    if not names:
        raise InvalidInput(f"Choose at least one sparsity method: {', '.join(METHODS)}.")
    for name in names:
        check_request(name, 0.5)  # an unknown name fails with the list of known ones
    return tuple(dict.fromkeys(names))


def _whole(value, least: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise InvalidInput(f"{what} must be a whole number ≥ {least}, not {quoted(value)}.")
    return value


@dataclass(frozen=True)
class SparsitySweepResult:
    """Task metric and perplexity of every method at every level: ``accuracy[method][i]`` is at ``levels[i]``.

    ``accuracy`` holds the task's ``metric`` in lm-eval's units (a fraction for acc and
    acc_norm); level 0 is the dense model, the same value for every method. ``prune_s`` and
    ``measure_s`` are the seconds each point took when it was measured (a cached point keeps them;
    0 to prune the dense model).
    """

    task: str
    metric: str
    limit: int | None
    levels: tuple[float, ...]
    methods: tuple[str, ...]
    accuracy: dict[str, tuple[float, ...]]
    perplexity: dict[str, tuple[float, ...]]
    dense_accuracy: float
    dense_perplexity: float
    prune_s: dict[str, tuple[float, ...]]
    measure_s: dict[str, tuple[float, ...]]
    higher_is_better: bool = True
    ppl_seq_len: int = PERPLEXITY.seq_len
    ppl_windows: int = PERPLEXITY.windows

    @property
    def scale(self) -> float:
        """100 for metrics shown in percent (acc, acc_norm, …), else 1."""
        return 100.0 if self.metric in lm_eval_adapter.PERCENT_METRICS else 1.0

    def seconds(self, method: str) -> float:
        """Time the method's points took to prune and measure, the shared dense point and points not measured yet
        left out."""
        return sum(p + m for level, p, m in zip(self.levels, self.prune_s[method], self.measure_s[method])
                   if level > 0 and math.isfinite(p + m))

    def to_json(self) -> dict:
        data = asdict(self)
        for name in ("accuracy", "perplexity", "prune_s", "measure_s"):
            data[name] = {m: [to_json_number(v) for v in values] for m, values in data[name].items()}
        for name in ("dense_accuracy", "dense_perplexity"):
            data[name] = to_json_number(data[name])
        data["levels"], data["methods"] = list(self.levels), list(self.methods)
        return data

    @classmethod
    def from_json(cls, data: dict) -> SparsitySweepResult:
        data = dict(data)
        for name in ("accuracy", "perplexity", "prune_s", "measure_s"):
            data[name] = {m: tuple(from_json_number(v) for v in values) for m, values in data[name].items()}
        for name in ("dense_accuracy", "dense_perplexity"):
            data[name] = from_json_number(data[name])
        return cls(**{**data, "levels": tuple(data["levels"]), "methods": tuple(data["methods"])})


def sweep_levels(model, tokenizer, request: lm_eval_adapter.TaskRequest, plan: SweepPlan, **settings
                 ) -> SparsitySweepResult:
    """Measure every point of ``plan`` (:func:`levels_so_far`'s last result)."""
    *_, result = levels_so_far(model, tokenizer, request, plan, **settings)
    return result


def levels_so_far(model, tokenizer, request: lm_eval_adapter.TaskRequest, plan: SweepPlan, *,
                  wikitext_rows: list[str], batch_size: int = BATCH_SIZE, store: ResultStore | None = None,
                  identify: Callable[[Recipe], dict] | None = None,
                  job: Job | None = None) -> Iterator[SparsitySweepResult]:
    """The sweep after each point of ``plan`` on the request's first task and on WikiText-2 (``wikitext_rows``),
    points not measured yet NaN; the last is complete.

    With ``store`` each point is read from, or written to, the results cache under the key
    ``identify(recipe)`` (what names the derived model: the backend's model fingerprint and
    recipe key) plus every setting that changes the numbers. ``job`` reports one span per point
    and cancels between layers of a build and between forwards of a measurement.
    """
    with_perplexity = kind_of(model) == CAUSAL  # an encoder (-decoder) has none: its points hold NaN
    if with_perplexity:
        perplexity.check_seq_lens(model, (plan.ppl_seq_len,))
    job = job or Job("the sparsity sweep", None, threading.Event())
    task = request.names[0]
    settings = {"kind": "sparsity_point", "task": task, "limit": request.limit, "num_fewshot": request.num_fewshot,
                "data": request.data, "batch_size": batch_size, "scorer": "fast", "ppl_seq_len": plan.ppl_seq_len,
                "ppl_windows": plan.ppl_windows, "text": digest("\n".join(wikitext_rows))}
    inputs: dict = {}  # the loaded task and the WikiText-2 ids, made at the first point not cached

    def measured(name: str, recipe: Recipe, step: Job) -> dict:
        if not inputs:
            step.update(0.0, f"Loading {task} and WikiText-2…")
            inputs.update(loaded=lm_eval_adapter.load_tasks(request),
                          ids=perplexity.token_ids(tokenizer, wikitext_rows) if with_perplexity else None)
        return _measure(model, tokenizer, recipe, name, task, request.limit, inputs, plan, batch_size, step)

    found: dict[str, dict] = {}
    todo = plan.points()
    for index, (name, recipe) in enumerate(todo):
        step = job.sub(index / len(todo), (index + 1) / len(todo))
        key = {**settings, **identify(recipe)} if store is not None and identify is not None else None
        point = store.get(key) if key is not None else None
        if point is None:
            point = measured(name, recipe, step)
            if key is not None:
                store.put(key, point)
        step.update(1.0, f"{name}: {task} {_summary(point)}")
        found[recipe.key] = point
        if index == len(todo) - 1:
            job.update(1.0, "Sparsity sweep done.")
        yield _result(found, plan, task, request.limit)


def _measure(model, tokenizer, recipe: Recipe, name: str, task: str, limit: int | None, inputs: dict,
             plan: SweepPlan, batch_size: int, step: Job) -> dict:
    """One point: derive the model (reporting per layer), then the task metrics and the perplexity."""
    began = time.perf_counter()
    build = step.sub(0.0, _BUILD_SHARE)
    derived = recipe.apply(model, tokenizer, lambda f, message: build.update(f, f"{name}: {message}"))
    pruned = time.perf_counter()
    step.update(_BUILD_SHARE, f"{name}: {task}…")
    with cancellable(derived, step):
        metrics, better = task_metrics(evaluate_loaded(make_fast(derived, tokenizer, batch_size), inputs["loaded"],
                                                       limit), task)
        ppl = math.nan
        if inputs["ids"] is not None:
            step.update(0.9, f"{name}: WikiText-2 perplexity…")
            ppl = perplexity.measure_perplexity(derived, tokenizer, inputs["ids"], label=name,
                                                seq_lens=(plan.ppl_seq_len,), bos=(False,),
                                                max_windows=plan.ppl_windows)[0].value
    done = time.perf_counter()
    return {"metrics": {k: to_json_number(v) for k, v in metrics.items()}, "higher_is_better": better,
            "perplexity": to_json_number(ppl), "prune_s": pruned - began, "measure_s": done - pruned}


def _summary(point: dict) -> str:
    metric = primary_metric(point["metrics"])
    ppl = from_json_number(point["perplexity"])
    found = f"{metric} {from_json_number(point['metrics'][metric]):.4g}"
    return found + (f", perplexity {ppl:.4g}" if math.isfinite(ppl) else "")


def _result(found: dict[str, dict], plan: SweepPlan, task: str, limit: int | None) -> SparsitySweepResult:
    """The points gathered into per-method rows, ordered by level."""
    dense = found[Recipe().key]
    metric = primary_metric(dense["metrics"])

    def row(method: str, value: Callable[[dict], float]) -> tuple[float, ...]:
        points = (found.get(plan.recipe(method, level).key) for level in plan.levels)
        return tuple(math.nan if point is None else value(point) for point in points)

    def per_method(value: Callable[[dict], float]) -> dict[str, tuple[float, ...]]:
        return {method: row(method, value) for method in plan.methods}

    return SparsitySweepResult(
        task=task, metric=metric, limit=limit, levels=plan.levels, methods=plan.methods,
        accuracy=per_method(lambda p: from_json_number(p["metrics"].get(metric))),
        perplexity=per_method(lambda p: from_json_number(p["perplexity"])),
        dense_accuracy=from_json_number(dense["metrics"][metric]),
        dense_perplexity=from_json_number(dense["perplexity"]),
        prune_s=per_method(lambda p: p["prune_s"]), measure_s=per_method(lambda p: p["measure_s"]),
        higher_is_better=bool(dense["higher_is_better"].get(metric, True)),
        ppl_seq_len=plan.ppl_seq_len, ppl_windows=plan.ppl_windows)


def format_table(result: SparsitySweepResult) -> str:
    """A Markdown table, method × level: "task metric / perplexity" (the metric alone for an encoder or an
    encoder-decoder, which have no perplexity), and each method's time."""
    unit = " %" if result.scale == 100 else ""
    with_ppl = math.isfinite(result.dense_perplexity)
    ppl = (f" / WikiText-2 test perplexity ({result.ppl_windows} × {result.ppl_seq_len} tokens, no BOS)" if with_ppl
           else " (no perplexity: not a causal LM)")
    dense = (f"{result.scale * result.dense_accuracy:.2f}{unit}"
             + (f" / {result.dense_perplexity:.2f}" if with_ppl else ""))
    head = f"{result.task} {result.metric}{unit} (first {result.limit or 'all'} documents){ppl}; dense: {dense}"
    lines = [head, "", "| method | " + " | ".join(f"{100 * level:g} %" for level in result.levels)
             + " | time (s): prune + measure |",
             "|---|" + "---:|" * (len(result.levels) + 1)]

    def cell(accuracy: float, ppl: float) -> str:
        if not math.isfinite(accuracy) or (with_ppl and not math.isfinite(ppl)):
            return "…"  # not measured yet
        return f"{result.scale * accuracy:.2f}" + (f" / {ppl:.4g}" if with_ppl else "")

    for method in result.methods:
        cells = [cell(a, p) for a, p in zip(result.accuracy[method], result.perplexity[method])]
        lines.append(f"| {method} | " + " | ".join(cells) + f" | {result.seconds(method):.0f} |")
    return "\n".join(lines)
