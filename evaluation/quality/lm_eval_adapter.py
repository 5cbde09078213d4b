"""lm-evaluation-harness behind one thin adapter: in-memory models, offline tasks, one result shape.

The model is scored in memory (no temporary checkpoint) by an lm-eval ``LM`` built by a
scorer from :data:`SCORERS`; tasks come from :func:`evaluation.quality.offline_tasks.task_manager`
(local files when a data folder is configured, the hub otherwise), the cloze tasks from
:mod:`evaluation.quality.cloze`, and results are mapped back to the standard task names.
Everything else is ``lm_eval.simple_evaluate`` with its own defaults, so a run here gives
what lm-eval gives on the same examples.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from prune.core.architectures import CAUSAL, kind_of
from prune.core.errors import InvalidInput, quoted

from evaluation.quality import cloze, offline_tasks
from evaluation.quality.cloze_request import REQUEST
from evaluation.core.jobs import Job
from evaluation.measure.measurement import Measurement

GROUP = "benchmarks"
# Every task a request may name: lm-eval's standard ones, then the cloze tasks (evaluation.quality.cloze).
TASKS: tuple[str, ...] = (*offline_tasks.SUPPORTED_TASKS, *cloze.CLOZE_TASKS)
# Tasks whose few-shot pool is the hub's split when run offline (see offline_tasks).
FEWSHOT_FAITHFUL_OFFLINE = ("arc_easy", "arc_challenge", "mmlu")
# Metrics reported in percent (their stderr too); everything else keeps lm-eval's unit.
PERCENT_METRICS = ("acc", "acc_norm", "exact_match", "f1", "mc1", "mc2", "win_rate", "win_rate_adjusted")
# lm-eval's seeds when ours is 0 (simple_evaluate's defaults: random 0, the others 1234).
_BASE_SEEDS = {"random_seed": 0, "numpy_random_seed": 1234, "torch_random_seed": 1234, "fewshot_random_seed": 1234}


def make_hflm(model, tokenizer, batch_size: int):
    """lm-eval's own HFLM on the in-memory model."""
    from lm_eval.models.huggingface import HFLM

    from evaluation.quality.fast_lm import building_in_memory_hflm

    with building_in_memory_hflm():
        return HFLM(pretrained=model, tokenizer=tokenizer, batch_size=batch_size)


# name → function(model, tokenizer, batch_size) -> lm_eval.api.model.LM; adding a scorer is one line.
def make_fast_scorer(model, tokenizer, batch_size: int):
    """LayerCut's FastLM: HFLM's log-likelihoods, each context run once (see evaluation.quality.fast_lm)."""
    from evaluation.quality.fast_lm import make_fast

    return make_fast(model, tokenizer, batch_size)


SCORERS: dict[str, Callable] = {"fast": make_fast_scorer, "hflm": make_hflm}
DEFAULT_SCORER = "fast"


def get_scorer(name: str) -> Callable:
    if name not in SCORERS:
        raise InvalidInput(f"Unknown scorer {quoted(name)}. Known scorers: {', '.join(SCORERS)}.")
    return SCORERS[name]


@dataclass(frozen=True)
class TaskRequest:
    """Benchmark tasks checked once, where the request enters; everything below trusts it."""

    names: tuple[str, ...]  # task names: lm-eval's standard ones and cloze tasks (TASKS)
    limit: int | None
    num_fewshot: int
    data_dir: Path | None
    data: str  # identifies the task data in cache keys: the local data's fingerprint or "hub", + each cloze task's


def _by_kind(names: Iterable[str]) -> tuple[list[str], list[str]]:
    """(lm-eval's standard tasks, the cloze tasks) among ``names``, each in the given order."""
    names = list(names)
    return [n for n in names if n not in cloze.CLOZE_TASKS], [n for n in names if n in cloze.CLOZE_TASKS]


def check_request(tasks: Iterable[str], *, num_fewshot: int = 0, limit: int | None = None,
                  data_dir: Path | None = None) -> TaskRequest:
    """Validate a benchmark request before any model work (and convert local data once)."""
    names = [tasks] if isinstance(tasks, str) else [t.strip() for t in tasks if t and t.strip()]
    unknown = [n for n in names if n not in TASKS]
    if unknown or not names:
        what = f"Unknown task(s) {', '.join(map(quoted, unknown[:3]))}" if unknown else "No task given"
        raise InvalidInput(f"{what}; supported: {', '.join(TASKS)}.")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise InvalidInput(f"The limit must be a whole number of examples ≥ 1 (or none for all), "
                           f"not {quoted(limit)}.")
    if isinstance(num_fewshot, bool) or not isinstance(num_fewshot, int) or num_fewshot < 0:
        raise InvalidInput(f"The number of few-shot examples must be a whole number ≥ 0, not {quoted(num_fewshot)}.")
    standard, own = _by_kind(names)
    if own and num_fewshot:
        raise InvalidInput(f"Cloze tasks ({', '.join(own)}) are asked without few-shot examples; use 0 few-shot.")
    if num_fewshot > 0 and data_dir is not None:
        unfaithful = [n for n in standard if n not in FEWSHOT_FAITHFUL_OFFLINE]
        if unfaithful:
            raise InvalidInput(
                f"Few-shot offline is only faithful for {', '.join(FEWSHOT_FAITHFUL_OFFLINE)}: the local data of "
                f"{', '.join(unfaithful)} lacks the split lm-eval draws its examples from. Use 0 few-shot for "
                "those tasks, or run them online (no data folder)."
            )
    keys = []
    if standard:  # the local data's fingerprint (fails on missing data), or the hub
        keys.append(offline_tasks.prepare_tasks(data_dir, offline_tasks.default_cache_dir(), standard).name
                    if data_dir is not None else "hub")
    keys += [cloze.fingerprint(name) for name in own]  # fails now, in one line, when the hub's CBT is unreachable
    return TaskRequest(tuple(names), limit, num_fewshot, data_dir, "+".join(keys))


def load_tasks(request: TaskRequest, seed: int = 0) -> dict:
    """lm-eval's loaded task dict, with simple_evaluate's few-shot settings and seed applied."""
    standard, own = _by_kind(request.names)
    if standard:
        manager, local = offline_tasks.task_manager(standard, data_dir=request.data_dir)
    else:
        from lm_eval.tasks import TaskManager

        manager, local = TaskManager(include_defaults=False), []
    loaded = manager.load([*local, *map(cloze.load, own)])
    for task_obj in loaded["tasks"].values():
        if request.num_fewshot and task_obj.get_config("num_fewshot") != 0:
            task_obj.set_config(key="num_fewshot", value=request.num_fewshot)
        elif task_obj.get_config("num_fewshot") is None:
            task_obj.set_config(key="num_fewshot", value=0)
        task_obj.set_fewshot_seed(seed=_BASE_SEEDS["fewshot_random_seed"] + seed)
    return loaded


def run(lm, loaded: dict, *, limit: int | None, seed: int = 0, bootstrap_iters: int = 1000,
        samples: dict[str, list[int]] | None = None) -> dict:
    """The one door into lm-eval: what ``simple_evaluate`` does for an ``LM`` object on loaded tasks.

    Seeds as simple_evaluate sets them, then ``lm_eval.evaluator.evaluate``; benchmarks and
    the sweep (which runs every cut on the same loaded tasks) both come through here.
    ``samples`` (loaded task name → document indices; not with ``limit``) scores chosen documents only.
    """
    import random

    import numpy as np
    import torch
    from lm_eval.evaluator import evaluate as lm_eval_evaluate

    random.seed(_BASE_SEEDS["random_seed"] + seed)
    np.random.seed(_BASE_SEEDS["numpy_random_seed"] + seed)
    torch.manual_seed(_BASE_SEEDS["torch_random_seed"] + seed)
    logging.getLogger("lm_eval").setLevel(logging.WARNING)
    return lm_eval_evaluate(lm=lm, task_dict=loaded, limit=limit, samples=samples, bootstrap_iters=bootstrap_iters,
                            log_samples=False, verbosity="WARNING")


def evaluate(model, tokenizer, request: TaskRequest, *, batch_size: int = 16, scorer: str = DEFAULT_SCORER,
             seed: int = 0, bootstrap_iters: int = 1000, job: Job | None = None, lm=None) -> dict[str, dict]:
    """Run the request's tasks on the in-memory model; returns ``{standard task: entry}`` (see :func:`_entries`).

    ``lm`` is a ready scorer for ``model`` (e.g. one half of ``reuse.make_fast_pair``).
    """
    standard, own = _by_kind(request.names)
    if standard and kind_of(model) != CAUSAL:
        raise InvalidInput(f"{', '.join(standard)} {'is' if len(standard) == 1 else 'are'} scored by log-likelihood, "
                           f"which LayerCut reads from causal LMs only: ask an encoder or an encoder-decoder the "
                           f"cloze tasks ({', '.join(cloze.CLOZE_TASKS)}).")
    answers_cloze = hasattr(lm, REQUEST) if lm is not None else scorer == DEFAULT_SCORER
    if own and not answers_cloze:
        raise InvalidInput(f"Cloze tasks ({', '.join(own)}) are scored by the {DEFAULT_SCORER} scorer only; "
                           f"the {quoted(scorer)} scorer has no cloze scoring.")
    lm = lm or get_scorer(scorer)(model, tokenizer, batch_size)
    with _observed(lm, model, job, batch_size):
        out = run(lm, load_tasks(request, seed), limit=request.limit, seed=seed, bootstrap_iters=bootstrap_iters)
    return _entries(out, list(request.names))


def _entries(out: dict, names: list[str]) -> dict[str, dict]:
    """Per requested task: its metrics (lm-eval keys), higher-is-better, sizes, and subtasks of groups."""
    results = {offline_tasks.standard_name(k): v for k, v in out.get("results", {}).items()}
    better = {offline_tasks.standard_name(k): v for k, v in out.get("higher_is_better", {}).items()}
    sizes = {offline_tasks.standard_name(k): v for k, v in out.get("n-samples", {}).items()}
    shots = {offline_tasks.standard_name(k): v for k, v in out.get("n-shot", {}).items()}
    versions = {offline_tasks.standard_name(k): v for k, v in out.get("versions", {}).items()}
    entries = {}
    for name in names:
        subtasks = sorted(k for k in results if k != name and k.startswith(name + "_")) if name == "mmlu" else []
        entries[name] = {
            "results": _clean(results.get(name, {}), name),
            "higher_is_better": better.get(name) or _guess_better(results.get(name, {})),
            "n-samples": sizes.get(name) or _sum_sizes(sizes, subtasks),
            "n-shot": shots.get(name),
            "version": versions.get(name),
            "subtasks": {k: _clean(results[k], k) for k in subtasks},
        }
    return entries


def documents(out: dict, name: str) -> int | None:
    """How many documents lm-eval scored for the standard task ``name`` (a group's subtasks together)."""
    sizes = _entries(out, [name])[name]["n-samples"] or {}
    return sizes.get("effective")


def _clean(metrics: dict, name: str) -> dict:
    """lm-eval's metric dict with numbers as floats ("N/A" stderr → None) and the standard alias."""
    cleaned = {}
    for key, value in metrics.items():
        if key == "alias":
            cleaned[key] = offline_tasks.standard_name(str(value).strip(" -")) or name
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            cleaned[key] = float(value)
        elif key.split(",")[0].endswith("_stderr"):
            cleaned[key] = None
    return cleaned


def _guess_better(metrics: dict) -> dict:
    names = {k.split(",")[0] for k in metrics if "," in k and not k.split(",")[0].endswith("_stderr")}
    return {n: not ("perplexity" in n or n == "bits_per_byte") for n in names}


def _sum_sizes(sizes: dict, subtasks: list[str]) -> dict | None:
    if not subtasks:
        return None
    parts = [sizes[s] for s in subtasks if s in sizes]
    return {"original": sum(p["original"] for p in parts), "effective": sum(p["effective"] for p in parts)}


def to_measurements(entries: dict[str, dict], *, model: str) -> list[Measurement]:
    """One :class:`Measurement` per task metric (percent for accuracies), stderr as the spread."""
    out = []
    for task, entry in entries.items():
        metrics, better = entry["results"], entry.get("higher_is_better") or {}
        for key, value in metrics.items():
            if "," not in key or key.split(",")[0].endswith("_stderr") or value is None:
                continue
            metric, filt = key.split(",", 1)
            stderr = metrics.get(f"{metric}_stderr,{filt}")
            scale = 100.0 if metric in PERCENT_METRICS else 1.0
            label = f"{task} {metric}" + ("" if filt == "none" else f" ({filt})")
            out.append(Measurement(
                label, value * scale, "%" if scale == 100 else "", bool(better.get(metric, True)),
                None if stderr is None or not math.isfinite(stderr) else stderr * scale, "stderr", model, GROUP,
                details={"task": task, "metric": metric, "n-samples": entry.get("n-samples"),
                         "n-shot": entry.get("n-shot")},
            ))
    return out


@contextmanager
def _observed(lm, model, job: Job | None, batch_size: int):
    """Progress and cancellation inside lm-eval: count requests per call and model forwards."""
    if job is None:
        yield
        return
    state = {"total": 0, "forwards": 0}

    def counting(method):
        def wrapper(requests, *args, **kwargs):
            state["total"] += len(requests)
            job.update(0.0, f"Scoring {len(requests)} {method.__name__} requests…")
            return method(requests, *args, **kwargs)

        return wrapper

    originals = {}
    for name in ("loglikelihood", "loglikelihood_rolling", "generate_until", REQUEST):
        if hasattr(lm, name):
            originals[name] = getattr(lm, name)
            setattr(lm, name, counting(originals[name]))

    def tick(_module, _args):
        state["forwards"] += 1
        done = min(state["forwards"] * batch_size, state["total"])
        job.update(min(done / max(state["total"], 1), 0.99), f"about {done} of {state['total']} requests scored")

    hook = model.register_forward_pre_hook(tick)
    try:
        yield
    finally:
        hook.remove()
        for name in originals:
            setattr(lm, name, originals[name])
