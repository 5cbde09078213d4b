"""The cut sweep: the measured benchmark quality of every block of K layers, and how well
each importance method predicts it.

lm-eval builds the task's requests and computes its metrics (so the numbers are the ones
`simple_evaluate` gives); in between, the original is scored once and every cut
[s, s+K) resumes from the original's residual h_s (evaluation.quality.reuse), within a memory
budget.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from torch import nn

from prune.core.architectures import check_causal, decoder_layers
from prune.core.errors import InvalidCut, InvalidInput
from prune.depth.result import ImportanceResult

from evaluation.measure.measurement import proportion_stderr
from evaluation.quality.fast_lm import Answer, FastLM, Pair, distinct_pairs
from evaluation.quality import lm_eval_adapter
from evaluation.quality.offline_tasks import standard_name
from evaluation.quality.reuse import DEFAULT_BUDGET_BYTES, Cut, scoring_cuts

Progress = Callable[[float, str], None]
SHARE_METRICS = ("acc", "acc_norm", "exact_match", "mc1")  # a share of questions answered right


@dataclass
class SweepResult:
    """Measured quality of the model with each block [start, start + block_size) removed.

    ``metrics[name][i]`` is the task's metric ``name`` (e.g. acc, acc_norm,
    word_perplexity) with the block starting at ``starts[i]`` removed; ``baseline`` holds
    the unpruned model's values.
    """

    task: str
    block_size: int
    num_layers: int
    limit: int | None
    starts: list[int]
    metrics: dict[str, list[float]]
    baseline: dict[str, float]
    higher_is_better: dict[str, bool] = field(default_factory=dict)
    elapsed_s: float = 0.0
    documents: int | None = None  # questions scored (what the noise of each value depends on)

    @property
    def complete(self) -> bool:
        """Whether every cut is measured (a sweep under way yields the ones so far)."""
        return len(self.starts) == self.num_layers - self.block_size + 1

    @property
    def acc(self) -> list[float] | None:
        return self.metrics.get("acc")

    @property
    def acc_norm(self) -> list[float] | None:
        return self.metrics.get("acc_norm")

    @property
    def primary_metric(self) -> str:
        """The metric rankings use (see :func:`primary_metric`)."""
        return primary_metric(self.metrics)

    def stderr(self, value: float, metric: str | None = None) -> float | None:
        """The standard error of a value of ``metric`` over this sweep's questions (lm-eval's, for a share of
        questions right); None for other metrics."""
        return proportion_stderr(value, self.documents) if (metric or self.primary_metric) in SHARE_METRICS else None

    def quality_loss(self, metric: str | None = None) -> np.ndarray:
        """How much worse than the baseline each cut is (higher = worse), per start."""
        metric = metric or self.primary_metric
        values = np.asarray(self.metrics[metric], dtype=float)
        sign = 1.0 if self.higher_is_better.get(metric, True) else -1.0
        return sign * (self.baseline[metric] - values)

    def best_start(self, metric: str | None = None) -> int:
        return self.starts[int(np.nanargmin(self.quality_loss(metric)))]

    def worst_start(self, metric: str | None = None) -> int:
        return self.starts[int(np.nanargmax(self.quality_loss(metric)))]

    def to_json(self) -> dict:
        data = asdict(self)
        data["metrics"] = {k: [to_json_number(v) for v in vs] for k, vs in self.metrics.items()}
        data["baseline"] = {k: to_json_number(v) for k, v in self.baseline.items()}
        return data

    @classmethod
    def from_json(cls, data: dict) -> SweepResult:
        return cls(**{**data, "metrics": {k: [from_json_number(v) for v in vs] for k, vs in data["metrics"].items()},
                      "baseline": {k: from_json_number(v) for k, v in data["baseline"].items()}})


def primary_metric(names: Iterable[str]) -> str:
    """The metric a task is judged by: acc_norm, acc, then a perplexity, then the first one."""
    names = list(names)
    for name in ("acc_norm", "acc", "word_perplexity", "perplexity"):
        if name in names:
            return name
    return names[0]


def to_json_number(value: float) -> float | None:
    """A float for JSON: None for NaN and ±inf, which strict JSON lacks."""
    return None if value is None or not math.isfinite(value) else float(value)


def from_json_number(value) -> float:
    """The float :func:`to_json_number` wrote (None → NaN)."""
    return math.nan if value is None else float(value)


@dataclass
class SweepReport:
    """A cut sweep and how well each importance method predicts it."""

    sweep: SweepResult
    agreement: dict[str, float]  # method → Spearman rank correlation with the measured loss
    scores: dict[str, list[float]]  # method → its block score at each start of the sweep
    failed: dict[str, str] = field(default_factory=dict)  # method → why its analysis failed (the others went on)



# ---------------------------------------------------------------- the LM that sweeps


class _SweepLM(FastLM):
    """Answers lm-eval from tables it fills itself, for the original and every cut.

    While ``recording`` it keeps lm-eval's token requests and answers placeholders; :meth:`measure` then
    scores them all (the original's prefix once), and with ``replay = None`` or ``replay = cut`` it answers,
    without computing, with the original's or that cut's log-likelihoods.
    """

    def __init__(self, model, tokenizer, batch_size: int):
        super().__init__(model, tokenizer, batch_size)
        self.requests: list = []
        self.recording = True
        self.answers: dict[Cut | None, dict[Pair, Answer]] = {}
        self.replay: Cut | None = None

    def _answers(self, requests, quiet: bool = False) -> list[Answer]:
        if self.recording:
            self.requests += list(requests)
            return [Answer(0.0, False, 0.0)] * len(requests)
        pairs, where = distinct_pairs(requests, self.max_length)
        table = self.answers[self.replay]
        return [table[pairs[i]] for i in where]

    def measure(self, cuts: list[Cut], budget: int, progress: Progress | None) -> Iterator[Cut | None]:
        """Score the recorded requests; yields None when the original's answers are in, then each cut as its are."""
        self.recording = False
        pairs, _where, batches = self.plan(self.requests)
        for key, per_batch in scoring_cuts(self.model, batches, cuts, memory_budget_bytes=budget,
                                           softmax_dtype=self.softmax_dtype, progress=progress):
            self.answers[key] = {pairs[i]: answer for batch, answers in zip(batches, per_batch)
                                 for i, answer in zip(batch.pairs, answers)}
            yield key


# ---------------------------------------------------------------- running a task


def load_task(task: str, data_dir: Path | None = None) -> tuple[dict, str]:
    """lm-eval's loaded task dict for one standard task (set up as simple_evaluate does), and its name."""
    request = lm_eval_adapter.check_request([task], data_dir=data_dir)
    return lm_eval_adapter.load_tasks(request), request.names[0]


def task_metrics(results: dict, task: str) -> tuple[dict[str, float], dict[str, bool]]:
    """``{metric: value}`` and ``{metric: higher_is_better}`` of one standard task from lm-eval's results."""
    found = {standard_name(k): v for k, v in results["results"].items()}
    values = {}
    for key, value in found[task].items():
        metric, _, _filter = key.partition(",")
        if _filter and not metric.endswith("_stderr") and isinstance(value, (int, float)):
            values[metric] = float(value)
    better = {standard_name(k): v for k, v in results.get("higher_is_better", {}).items()}.get(task, {})
    return values, {m: bool(b) for m, b in better.items() if m in values}


def evaluate_loaded(lm, loaded: dict, limit: int | None) -> dict:
    """lm-eval on already loaded tasks, without the stderr bootstrap (the sweep's many runs)."""
    return lm_eval_adapter.run(lm, loaded, limit=limit, bootstrap_iters=0)


def sweeping(model: nn.Module, tokenizer, task: str, block_sizes: Iterable[int], *, limit: int | None,
             data_dir: Path | None = None, memory_budget_bytes: int = DEFAULT_BUDGET_BYTES, batch_size: int = 16,
             progress: Progress | None = None) -> Iterator[dict[int, SweepResult]]:
    """Every block size's :class:`SweepResult` so far: after the original is scored (no cuts yet), then after
    each cut (the original's run shared by all). The last is complete."""
    check_causal(model, "The cut sweep (it replays a causal model's hidden states)")
    began = time.perf_counter()
    count = len(decoder_layers(model))
    sizes = sorted({int(k) for k in block_sizes})
    if not sizes or sizes[0] < 1 or sizes[-1] >= count:
        raise InvalidCut(f"Block sizes must be 1…{count - 1} layers, got {sizes}.")
    cuts = [(s, s + k) for k in sizes for s in range(count - k + 1)]
    loaded, name = load_task(task, data_dir)  # the caller checked the task; this loads it once
    lm = _SweepLM(model, tokenizer, batch_size)
    evaluate_loaded(lm, loaded, limit)  # records the requests
    measured: dict[Cut | None, dict[str, float]] = {}
    for key in lm.measure(cuts, memory_budget_bytes, progress):
        lm.replay = key
        results = evaluate_loaded(lm, loaded, limit)
        measured[key], better = task_metrics(results, name)
        if key is None:
            higher, documents = better, lm_eval_adapter.documents(results, name)
        yield {k: _so_far(measured, name, k, count, limit, higher, time.perf_counter() - began, documents)
               for k in sizes}


def _so_far(measured: dict, task: str, k: int, count: int, limit: int | None, better: dict, elapsed: float,
            documents: int | None) -> SweepResult:
    """The sweep of block size ``k`` as far as ``measured`` goes (None: the original)."""
    baseline = measured[None]
    starts = [s for s in range(count - k + 1) if (s, s + k) in measured]
    return SweepResult(task=task, block_size=k, num_layers=count, limit=limit, starts=starts,
                       metrics={m: [measured[(s, s + k)][m] for s in starts] for m in baseline}, baseline=baseline,
                       higher_is_better=better, elapsed_s=elapsed, documents=documents)


def sweep_sizes(model: nn.Module, tokenizer, task: str, block_sizes: Iterable[int], *, limit: int | None,
                data_dir: Path | None = None, memory_budget_bytes: int = DEFAULT_BUDGET_BYTES,
                batch_size: int = 16, progress: Progress | None = None) -> dict[int, SweepResult]:
    """`sweep` for several block sizes at once, sharing the original's run."""
    *_, results = sweeping(model, tokenizer, task, block_sizes, limit=limit, data_dir=data_dir,
                           memory_budget_bytes=memory_budget_bytes, batch_size=batch_size, progress=progress)
    return results


def sweep(model: nn.Module, tokenizer, task: str, block_size: int, *, limit: int | None,
          data_dir: Path | None = None, memory_budget_bytes: int = DEFAULT_BUDGET_BYTES,
          batch_size: int = 16, progress: Progress | None = None) -> SweepResult:
    """Measured ``task`` quality with every block of ``block_size`` layers removed, one per start.

    ``progress(fraction, message)`` is called as cuts finish (a gr.Progress fits).
    """
    return sweep_sizes(model, tokenizer, task, [block_size], limit=limit, data_dir=data_dir,
                       memory_budget_bytes=memory_budget_bytes, batch_size=batch_size,
                       progress=progress)[int(block_size)]


# ---------------------------------------------------------------- agreement with the proxies


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's rank correlation (ties get average ranks); NaN when undefined."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(x) < 2 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return math.nan
    from scipy.stats import spearmanr

    return float(spearmanr(x, y).statistic)


def rank_agreement(result: SweepResult, importance_results: Iterable[ImportanceResult] | Mapping[str, ImportanceResult],
                   metric: str | None = None) -> dict[str, float]:
    """Spearman correlation, per method, between its block score and the measured quality loss.

    Both say "higher = worse to remove", so +1 means the method ranks the cuts exactly as
    measured. Blocks a method marks protected (+inf) or does not score are left out.
    """
    items = importance_results.items() if isinstance(importance_results, Mapping) else \
        ((r.method, r) for r in importance_results)
    loss = result.quality_loss(metric)
    agreement = {}
    for method, importance in items:
        if importance.num_layers != result.num_layers:
            raise InvalidInput(f"Method {method} scored a {importance.num_layers}-layer model; the sweep measured "
                               f"a {result.num_layers}-layer one.")
        scores = np.asarray(importance.block_scores, dtype=float)[result.block_size - 1, result.starts]
        keep = np.isfinite(scores) & np.isfinite(loss)
        agreement[method] = spearman(scores[keep], loss[keep])
    return agreement


def format_sweep(result: SweepResult, agreement: Mapping[str, float] | None = None) -> str:
    """A plain-text table of the sweep (and the methods' rank agreement) for the command line."""
    names = list(result.metrics)
    lines = [(f"{result.task}, {result.limit} docs: every block of {result.block_size} layers removed "
              f"(ranking by {result.primary_metric})"),
             "block     " + "".join(f"{n:>16}" for n in names),
             "none      " + "".join(f"{result.baseline[n]:16.4f}" for n in names)]
    best, worst = result.best_start(), result.worst_start()
    for i, start in enumerate(result.starts):
        mark = "  <- best" if start == best else "  <- worst" if start == worst else ""
        block = f"[{start}, {start + result.block_size})"
        lines.append(f"{block:<10}" + "".join(f"{result.metrics[n][i]:16.4f}" for n in names)
                     + mark)
    if agreement:
        lines.append("rank agreement with the measured loss (Spearman, 1 = perfect):")
        for method, rho in sorted(agreement.items(), key=lambda kv: -np.nan_to_num(kv[1], nan=-2)):
            lines.append(f"  {method:<22}{rho:+.3f}" if math.isfinite(rho) else f"  {method:<22}undefined")
    return "\n".join(lines)
