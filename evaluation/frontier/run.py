"""Measuring a frontier's candidates, each cached on its own (a stopped run resumes, a rerun is instant).

A point is built from its recipe on the original (which is never altered), then measured: its parameters
that are not zero and its weights' bytes (counted on the built model), WikiText-2 test perplexity
(:mod:`evaluation.quality.perplexity`, the first windows, no BOS), the task's primary metric through the
sweeps' lm-eval door (:mod:`evaluation.sweeps.cuts`: tasks loaded once, the fast scorer), and the decode
latency at batch 1 (:func:`evaluation.measure.speed.measure_speed`: a 128-token prompt, 32 new tokens, the
median of 3 runs), timed in turns with the original so that the machine's load falls on both alike, with the
decode's memory-bandwidth floor where the speed rows carry one (``details["floor_ms"]``). A point cached before
the speed rows carried floors keeps none (shown as missing, not measured again: its other numbers stand).

Unless the plan says otherwise (``screen=0``: ``--frontier_all``), every candidate is first screened
(:mod:`evaluation.frontier.screen`: built, counted, a few perplexity windows, each screen cached too), the run
yielding the :class:`~evaluation.frontier.screen.Screening` so far after each (an early answer); then the original
and the candidates no rival screens out are measured in full, the ones still held from their screen not built again,
the windows their screen read not read again. Every patched cut of the run fits on one calibration pass of the
original (:mod:`prune.patch.sharing`).
"""

from __future__ import annotations

import math
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import torch

from prune.core.architectures import layer_config
from prune.core.errors import InvalidInput, LayerCutError
from prune.core.paths import digest
from prune.core.recipe import Recipe
from prune.core.sizes import parameter_count
from prune.core.storage import weight_bytes
from prune.patch.sharing import sharing

from evaluation.engines import llama_cpp
from evaluation.frontier.plan import Candidate, FrontierPlan
from evaluation.frontier.result import FrontierResult, Point
from evaluation.frontier.screen import Screened, Screening, label_of
from evaluation.measure import bandwidth, memory, speed
from evaluation.quality import lm_eval_adapter, perplexity
from evaluation.quality.fast_lm import make_fast
from evaluation.core.jobs import Cancelled, Job, cancellable
from evaluation.core.store import ResultStore
from evaluation.sweeps.cuts import evaluate_loaded, from_json_number, primary_metric, task_metrics, to_json_number
from evaluation.core.settings import BATCH_SIZE

SPEED = {"batch_sizes": (1,), "prompt_len": 128, "new_tokens": (32,), "repeats": 3}
_BUILD_SHARE = 0.4  # of a point's progress bar
_SCREEN_SHARE = 0.4  # of the run's progress bar, when it screens


def points_so_far(model, tokenizer, request: lm_eval_adapter.TaskRequest, plan: FrontierPlan,
                  found: list[Candidate], why: dict, *, wikitext_rows: list[str], batch_size: int = BATCH_SIZE,
                  store: ResultStore | None = None, identify: Callable[[Recipe], dict] | None = None,
                  job: Job | None = None) -> Iterator[Screening | FrontierResult]:
    """The screen after each candidate (when the plan screens), then the frontier after the original and after each
    candidate measured in full; the last is complete.

    With ``store`` each screen and point is read from, or written to, the results cache under ``identify(recipe)``
    (the backend's model fingerprint and recipe key) and every setting that changes its numbers; ``job`` reports
    one span per candidate and cancels between layers of a build and between forwards of a measurement.
    """
    perplexity.check_seq_lens(model, (plan.ppl_seq_len,))
    job = job or Job("the frontier", None, threading.Event())
    task = request.names[0]
    text = {"ppl_seq_len": plan.ppl_seq_len, "text": digest("\n".join(wikitext_rows))}
    settings = {"kind": "frontier_point", "task": task, "limit": request.limit, "num_fewshot": request.num_fewshot,
                "data": request.data, "batch_size": batch_size, "scorer": "fast", **text,
                "ppl_windows": plan.ppl_windows,
                "speed": {k: list(v) if isinstance(v, tuple) else v for k, v in SPEED.items()},
                **({} if plan.engine is None else {"engine": plan.engine, "llama_cpp": llama_cpp.version()})}
    inputs: dict = {}  # the loaded task and the WikiText-2 ids, made at the first point not cached
    held: dict[str, tuple] = {}  # recipe key → (built model, build seconds) kept from the screen
    screened_nll: dict[str, tuple] = {}  # recipe key → its NLL on the screen's windows (not read again in full)
    why = dict(why)

    def key_of(key_settings: dict, recipe: Recipe) -> dict | None:
        return {**key_settings, **identify(recipe)} if store is not None and identify is not None else None

    def cached(key_settings: dict, recipe: Recipe, work: Callable[[], dict], families: tuple) -> dict:
        """The cached entry, else ``work()``'s (a candidate that cannot be built here: its reason, cached too)."""
        key = key_of(key_settings, recipe)
        entry = store.get(key) if key is not None else None
        if entry is None:
            try:
                entry = work()
            except Cancelled:
                raise
            except LayerCutError as err:  # this candidate cannot be built here: said in its cells, the rest go on
                if not families:
                    raise
                entry = {"failed": " ".join(str(err).split())}
            if key is not None:
                store.put(key, entry)
        return entry

    def refused(candidate: Candidate, entry: dict) -> bool:
        if "failed" in entry:
            why.update({(family, size): entry["failed"] for family in candidate.families
                        for size in ((candidate.size,) if candidate.size is not None else plan.sizes)})
        return "failed" in entry

    def measured_before(point: Screened) -> bool:
        """Whether the point's full measurement is in the cache (measured on request before: it stands as such)."""
        key = key_of(settings, point.recipe)
        return key is not None and store.get(key) is not None

    def ids():
        if "ids" not in inputs:  # tokenized once a run (about a second on the default model)
            inputs["ids"] = perplexity.token_ids(tokenizer, wikitext_rows)
        return inputs["ids"]

    todo, screened_out, share = [Candidate((), None, Recipe()), *found], (), 0.0
    cuts = [c.recipe.steps[0].layers for c in found if _patched_cut(c.recipe)]
    # every patched cut's calibration read in one pass of the original; the held models and GGUFs let go at the end
    with sharing(model, cuts), _releasing(held, inputs):
        if plan.screen:
            share, screening = _SCREEN_SHARE, None
            todo = [todo[0], *sorted(found, key=_screen_order)]
            screen_key = {"kind": "frontier_screen", **text, "windows": plan.screen}
            for index, candidate in enumerate(todo):
                step = job.sub(_SCREEN_SHARE * index / len(todo), _SCREEN_SHARE * (index + 1) / len(todo))
                entry = cached(screen_key, candidate.recipe, lambda: _screen(model, tokenizer, candidate.recipe, ids(),
                                                                             plan, step, held),
                               candidate.families)
                if refused(candidate, entry):
                    continue
                point = Screened(candidate.families, candidate.size, candidate.recipe, entry["params"],
                                 entry["weight_bytes"], tuple(entry["nll"]), entry["build_s"])
                screening = Screening(plan.axis, plan.sizes, plan.screen, point, (), len(todo) - 1) \
                    if screening is None else replace(screening, points=(*screening.points, point),
                                                      pending=len(todo) - index - 1)
                _hold_survivors(held, screening)
                screened_nll[point.recipe.key] = point.nll
                step.update(1.0, f"Screened {point.label}: perplexity {point.perplexity:.4g} on {plan.screen} windows")
                yield screening
            screened_out = tuple(p for p in screening.decided() if p.beaten_by and not measured_before(p))
            out = {p.recipe.key for p in screened_out}  # a point measured in full before stands as measured
            todo = [todo[0], *(c for c in found if c.recipe.key not in out)]
        points: list[Point] = []
        metric = None
        for index, candidate in enumerate(todo):
            span = (1 - share) / len(todo)
            step = job.sub(share + span * index, share + span * (index + 1))

            def measured(candidate=candidate, step=step) -> dict:
                if "loaded" not in inputs:
                    step.update(0.0, f"Loading {task} and WikiText-2…")
                    inputs["loaded"] = lm_eval_adapter.load_tasks(request)
                ids()
                return measure_point(model, tokenizer, candidate.recipe, task, request.limit, inputs, plan,
                                     batch_size, step, built=held.pop(candidate.recipe.key, None),
                                     first_nll=screened_nll.get(candidate.recipe.key, ()))

            entry = cached(settings, candidate.recipe, measured, candidate.families)
            if not refused(candidate, entry):
                metric = metric or primary_metric(entry["metrics"])
                points.append(point_of(candidate, entry, metric))
            step.update(1.0, f"{label_of(candidate.families)}: "
                             + (entry.get("failed") or f"perplexity {from_json_number(entry['perplexity']):.4g}"))
            if index == len(todo) - 1:
                job.update(1.0, "Frontier done.")
            yield FrontierResult(plan.axis, plan.sizes, plan.method, task, metric, request.limit, plan.ppl_seq_len,
                                 plan.ppl_windows, points[0], tuple(points[1:]), dict(why), len(todo) - index - 1,
                                 screened_out, plan.screen)


@contextmanager
def _releasing(held: dict, inputs: dict) -> Iterator[None]:
    """At the end of a run, however it ends: the models held from the screen, the GGUFs a run in llama.cpp wrote."""
    try:
        yield
    finally:
        held.clear()
        shutil.rmtree(inputs.get("gguf", ""), ignore_errors=True)


def _patched_cut(recipe: Recipe) -> bool:
    """Whether ``recipe`` cuts the original and then patches: the patch fits on the original's activations."""
    steps = recipe.steps
    return len(steps) > 1 and steps[0].kind == "cut" and steps[1].kind == "patch"


def _screen_order(candidate: Candidate) -> int:
    """Screened first, for an early answer worth having: cuts and drops (views: nothing to build), then int8
    (rounded to nearest: seconds), then the rest as planned (each calibrates)."""
    return 0 if all(step.view for step in candidate.recipe.steps) else 1 if "int8" in candidate.families else 2


def _screen(model, tokenizer, recipe: Recipe, ids, plan: FrontierPlan, step: Job, held: dict) -> dict:
    """Build ``recipe``'s model and count it, and its mean NLL on each of the screen's windows (the first of the full
    measurement's); the built model is held for its full measurement (:func:`_hold_survivors` lets go of it)."""
    began = time.perf_counter()
    derived = recipe.apply(model, tokenizer, lambda f, message: step.update(0.8 * f, f"{recipe.short()}: {message}"))
    build_s = time.perf_counter() - began
    step.update(0.8, f"{recipe.short()}: screening on {plan.screen} perplexity windows…")
    nll = []
    with cancellable(derived, step):
        for window in perplexity.windows(ids, plan.ppl_seq_len, None)[:plan.screen]:
            total, count = perplexity.window_nll(derived, window[None])
            nll.append(total / count)
    zeros = memory.zero_weights(derived)[0] if recipe.sparsity is not None else 0
    if derived is not model:
        held[recipe.key] = (derived, build_s)
    return {"params": parameter_count(derived) - zeros, "weight_bytes": weight_bytes(derived), "nll": nll,
            "build_s": build_s}


def _hold_survivors(held: dict, screening: Screening) -> None:
    """Let go of the built models the screen has ruled out so far; of the rest, the best on the screen while their
    bytes add up to at most the original's (memory for one more model, whatever the model's size)."""
    if not held:
        return
    alive = sorted((p for p in screening.decided() if p.beaten_by is None and p.recipe.key in held),
                   key=lambda p: p.perplexity)
    room, keep = screening.original.weight_bytes, set()
    for point in alive:
        if point.weight_bytes <= room:
            room -= point.weight_bytes
            keep.add(point.recipe.key)
    for key in set(held) - keep:
        del held[key]


def point_of(candidate: Candidate, entry: dict, metric: str) -> Point:
    """The point a cached (or fresh) entry records for ``candidate``."""
    number = {k: from_json_number(entry[k]) for k in ("ms", "dense_ms", "ideal_speedup", "perplexity")}
    return Point(candidate.families, candidate.size, candidate.recipe, entry["params"], entry["weight_bytes"],
                 **number, task=from_json_number(entry["metrics"].get(metric)), build_s=entry["build_s"],
                 measure_s=entry["measure_s"], floor_ms=to_json_number(entry.get("floor_ms")))


def _in_llama_cpp(timed: dict, tokenizer, inputs: dict, step: Job) -> list:
    """The decode rows of ``timed`` ({label: model}) in llama.cpp: each written as a GGUF of its storage's type
    (the original's once a run, in ``inputs``), timed in turns; a model llama.cpp cannot run is refused in one line."""
    if "gguf" not in inputs:  # one folder a run, removed at its end
        inputs["gguf"] = Path(tempfile.mkdtemp(prefix="layercut-frontier-gguf-"))
    folder = inputs["gguf"]
    files = {}
    for label, model in timed.items():
        if (why := llama_cpp.why_not(model)) is not None:
            raise InvalidInput(why)
        kind = llama_cpp.column_type(model)
        path = folder / ("original" if label == "original" else "point") / f"model.{kind}.gguf"
        if label != "original":
            shutil.rmtree(path.parent, ignore_errors=True)
        files[label] = llama_cpp.gguf_file(model, tokenizer, kind, path)
    prompt, new, repeats = SPEED["prompt_len"], SPEED["new_tokens"][0], SPEED["repeats"]
    found = llama_cpp.measure_speed(files, prompt_len=prompt, new_tokens=new, repeats=repeats,
                                    vocab=layer_config(timed["original"]).vocab_size,
                                    bandwidth_limit=bandwidth.bandwidth(torch.device("cpu")), check=step.check)
    if died := next((m.details[llama_cpp.NOTE] for m in found if llama_cpp.NOTE in m.details), None):
        raise InvalidInput(died)  # the point says why, as a model llama.cpp cannot run does
    return [replace(m, name=m.name.removesuffix(llama_cpp.SUFFIX)) for m in found]


def _perplexity(model, ids, plan: FrontierPlan, first_nll: tuple) -> float:
    """WikiText-2 test perplexity over the plan's windows (no BOS), as :func:`perplexity.measure_perplexity`
    computes it; the first windows' mean NLLs given in ``first_nll`` are counted as given, only the rest read."""
    chunks = perplexity.windows(ids, plan.ppl_seq_len, None)[:plan.ppl_windows]
    return math.exp(perplexity.mean_nll(model, chunks, known=first_nll)[0])


def measure_point(model, tokenizer, recipe: Recipe, task: str, limit: int | None, inputs: dict, plan: FrontierPlan,
                  batch_size: int, step: Job, built: tuple | None = None, first_nll: tuple = ()) -> dict:
    """Build ``recipe``'s model (reporting per layer; ``built``: the model and its build seconds, held from its
    screen), then count, score and time it (see the module docstring); ``first_nll``: its mean NLL on the first
    perplexity windows, read by its screen (those windows are not read again)."""
    name = recipe.short()
    if built is None:
        began = time.perf_counter()
        build = step.sub(0.0, _BUILD_SHARE)
        derived = recipe.apply(model, tokenizer, lambda f, message: build.update(f, f"{name}: {message}"))
        built_at = time.perf_counter()
    else:
        derived, build_s = built
        built_at = time.perf_counter()
        began = built_at - build_s
    with cancellable(derived, step):
        zeros = memory.zero_weights(derived)[0] if recipe.sparsity is not None else 0
        step.update(_BUILD_SHARE, f"{name}: {task}…")
        metrics, _ = task_metrics(evaluate_loaded(make_fast(derived, tokenizer, batch_size), inputs["loaded"], limit),
                                  task)
        step.update(0.7, f"{name}: WikiText-2 perplexity…")
        ppl = _perplexity(derived, inputs["ids"], plan, first_nll)
        step.update(0.85, f"{name}: decode latency…")
        timed = {"original": model} if derived is model else {"original": model, name: derived}
        found = speed.measure_speed(timed, **SPEED, job=step.sub(0.85, 1.0)) if plan.engine is None else \
            _in_llama_cpp(timed, tokenizer, inputs, step.sub(0.85, 1.0))
    decode = {m.model: m for m in found if m.name.startswith(speed.DECODE)}
    ours = decode[name if derived is not model else "original"]
    context = SPEED["prompt_len"] + SPEED["new_tokens"][0] // 2
    return {"metrics": {k: to_json_number(v) for k, v in metrics.items()}, "perplexity": to_json_number(ppl),
            "params": parameter_count(derived) - zeros, "weight_bytes": weight_bytes(derived),
            "ms": ours.value, "dense_ms": decode["original"].value,
            "floor_ms": to_json_number(ours.details.get("floor_ms")),
            "ideal_speedup": speed.ideal_speedup(model, derived, context),
            "build_s": built_at - began, "measure_s": time.perf_counter() - built_at}
