"""How long each long job will take, said beside its button before it starts (``evaluation.measure.estimate``).

Each line is computed from the job's settings as they stand, the compared models' sizes and the rates the backend
measured for the loaded model on this machine; it changes with the settings, and after every event that loads a
model or changes a cut. A setting that is not a valid value yet, or no model, shows no line: the job itself says
what is wrong when it is asked to run.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import gradio as gr

from evaluation.serving import (C4_PERPLEXITY, C4_TASK, check_sizes, check_sparsity_plan, COMPOUND_STRUCTURES,
                                DEFAULT_AXIS, estimate, FIXED_FAMILIES, FRONTIER_SPEED, MEMORY_PROMPT_TOKENS,
                                names_a_judge, PERPLEXITY, screen_windows, SEARCH_SHARE, SEARCH_WINDOW, TASKS, WIKITEXT)
from prune.core.architectures import CAUSAL
from prune.core.errors import InvalidInput
from prune.core.surgery import largest_cut
from prune.healing.train import DEFAULTS as HEAL_DEFAULTS
from prune.lowrank.rank_search import candidates
from prune.patch.step import CALIBRATION as PATCH_CALIBRATION

from ui import help_text, inputs
from ui.handlers import Context
from ui.job_text import CACHED, ESTIMATE, JUDGE_NOT_COUNTED, SWEEP_OTHERS_COST, estimate_line
from ui.page.events import LIGHT
from ui.page.generate import max_new
from ui.page import mt_bench as judged
from ui.page.heal import PATCH, PPL_SEQ_LEN, PPL_WINDOWS, heal_limits
from ui.page.speed import MEMORY_NEW_TOKENS, speed_settings
from ui.session import Session

log = logging.getLogger(__name__)


def quiet(fn: Callable) -> Callable:
    """A job's seconds, or None when there is nothing to estimate yet (no model, a setting not valid yet)."""

    def seconds(self, session: Session, *values) -> float | None:
        if session.info is None or session.loading:
            return None
        # the info's rates reach a ZeroGPU worker
        rates = session.info.rates or self.context.backend.models.rates(session.spec)
        if rates is None:
            return None
        try:
            return fn(self, session, rates, *values)
        except InvalidInput:
            return None
        except Exception:  # an estimate must never stand in a job's way
            log.exception("Estimating %s failed", fn.__name__)
            return None

    seconds.__name__, seconds.__doc__ = fn.__name__, fn.__doc__  # not functools.wraps: Gradio reads the signature
    return seconds


def columns(session: Session) -> list[float]:
    """The compared models' compute, each as a share of the original's parameters (the original first)."""
    size = session.info.size
    return [1.0] + [recipe.size(size).total / size.total for recipe in session.variants().values()]


@dataclass(frozen=True)
class Line:
    """One job's estimate on the page: how its seconds are computed, where they show, from which settings."""

    job: str  # the Seconds method
    output: object  # a Markdown, or the button whose label carries it
    settings: list
    show: Callable[[float | None, tuple], object] = lambda seconds, _values: estimate_line(seconds)


class Seconds:
    """Each long job's seconds on this machine, from its settings as typed (None: no estimate)."""

    def __init__(self, context: Context):
        self.context = context

    def _limit(self, value, what: str) -> int | None:
        return self.context.policy.limit(value, what)

    @quiet
    def speed(self, session, rates, batch_sizes, prompt_len, new_tokens, repeats):
        return estimate.speed(rates, columns(session), **speed_settings(batch_sizes, prompt_len, new_tokens, repeats),
                              generates=session.info.kind == CAUSAL)

    @quiet
    def memory(self, session, rates):
        return estimate.memory(rates, columns(session), prompt_len=MEMORY_PROMPT_TOKENS, new_tokens=MEMORY_NEW_TOKENS,
                               generates=session.info.kind == CAUSAL)

    @quiet
    def benchmarks(self, session, rates, tasks, limit, num_fewshot):
        tasks = [t for t in tasks or () if t in TASKS]
        if not tasks:
            return None
        return estimate.benchmarks(rates, columns(session), tasks=tasks, limit=self._limit(limit, "Questions per task"),
                                   num_fewshot=inputs.whole_number(num_fewshot or 0, "Few-shot examples", minimum=0,
                                                                   maximum=25))

    @quiet
    def perplexity(self, session, rates, seq_len, windows, source=None):
        count = self._limit(windows, "Windows")
        if source == C4_TASK:  # the papers' windows (at most 2048 tokens: fewer where the model's positions are)
            return estimate.perplexity(rates, columns(session), seq_len=C4_PERPLEXITY.seq_len,
                                       windows=count or C4_PERPLEXITY.windows)
        return estimate.perplexity(rates, columns(session),
                                   seq_len=inputs.whole_number(seq_len, "The window", minimum=2, maximum=8192),
                                   windows=count or estimate.TASKS["wikitext"].documents)

    @quiet
    def mt_bench(self, session, rates, limit, turns, judge, remote_model, answer_tokens, judge_tokens):
        if session.info.kind != CAUSAL:
            return None
        request = judged.check(self.context, limit, turns, judge, remote_model, answer_tokens, judge_tokens)
        return request.seconds_at_most(rates, columns(session))

    @quiet
    def sweep(self, session, rates, task, block_size, limit, _others):
        size = inputs.whole_number(block_size, "Block size K", minimum=1, maximum=largest_cut(session.info.num_layers))
        return estimate.cut_sweep(rates, num_layers=session.info.num_layers, block_size=size, task=task,
                                  limit=self._limit(limit, "Questions"))

    @quiet
    def frontier(self, session, rates, sizes, task, limit, windows, families, repair, repair_s, everything=False):
        """At most every chosen family at every size (each fixed-size one once), the repaired twins' training, and
        unless ``everything``, each one's screen first."""
        count, chosen = len(check_sizes(sizes or "")), tuple(families or ())
        points = sum(1 if family in FIXED_FAMILIES else count for family in chosen)
        repaired = 0 if repair in (None, "", "none") else sum(
            count for family in chosen if family.split(" + ")[0] in COMPOUND_STRUCTURES
            or family.rsplit(" + ", 1)[0] in COMPOUND_STRUCTURES)
        seconds = inputs.whole_number(repair_s, "Repair seconds", minimum=1, maximum=3600) if repaired else 0
        windows = inputs.whole_number(windows, "Perplexity windows", minimum=1, maximum=1000)
        return estimate.frontier(rates, task=task, limit=self._limit(limit, "Questions"), points=points + repaired,
                                 seq_len=PERPLEXITY.seq_len, windows=windows,
                                 screen=screen_windows(DEFAULT_AXIS, windows, not everything),
                                 speed_tokens=(FRONTIER_SPEED["prompt_len"], FRONTIER_SPEED["new_tokens"][0],
                                               FRONTIER_SPEED["repeats"]), repaired=repaired, repair_s=seconds)

    @quiet
    def sparsity(self, session, rates, task, levels, methods, limit, windows):
        if not methods:
            return None
        calibration = self.context.default_calibration
        plan = check_sparsity_plan(list(inputs.percentages(levels, "Sparsity levels")), methods, calibration)
        points = [recipe for _name, recipe in plan.points()]
        return estimate.sparsity_sweep(
            rates, task=task, limit=self._limit(limit, "Questions"), points=len(points), seq_len=PERPLEXITY.seq_len,
            windows=inputs.whole_number(windows, "Perplexity windows", minimum=1, maximum=1000),
            calibrated=sum(any(getattr(step, "calibration", None) for step in recipe.steps) for recipe in points),
            calibration_tokens=calibration.n_samples * calibration.seq_len)

    @quiet
    def generation(self, session, rates, prompt, max_new_tokens):
        return estimate.generation(rates, columns(session), prompt=prompt or "", max_new_tokens=max_new(max_new_tokens))

    @quiet
    def rank_search(self, session, rates, space, criterion, limit, last_layers, projections):
        info = session.info
        count = inputs.whole_number(last_layers, "The layers searched", minimum=1, maximum=info.num_layers)
        names = {n.strip() for n in (projections or "").split(",") if n.strip()}
        searched = [m for layer in info.size.matrices[-count:] for m in layer
                    if not names or m.path in names or m.path.rpartition(".")[2] in names]
        limit = self._limit(limit, "Windows or questions")
        if criterion == WIKITEXT:
            tokens = (limit or estimate.TASKS["wikitext"].documents) * SEARCH_WINDOW
        else:
            tokens = estimate.task_tokens(criterion, limit)
        calibration = self.context.default_calibration
        return estimate.rank_search(rates, candidates=sum(len(candidates(m.outputs, m.inputs)) for m in searched),
                                    layers=count, search_tokens=SEARCH_SHARE * tokens,
                                    test_tokens=(1 - SEARCH_SHARE) * tokens,
                                    calibration_tokens=0 if space == "weight" else
                                    calibration.n_samples * calibration.seq_len)

    @quiet
    def healing(self, session, rates, method, loss, steps, budget_s):
        recipe = session.cut()
        if recipe is None:
            return None
        compute = recipe.size(session.info.size).total / session.info.size.total
        ppl_tokens = PPL_SEQ_LEN * PPL_WINDOWS
        if str(method).startswith(PATCH):
            return estimate.patching(rates, tokens=PATCH_CALIBRATION["n_samples"] * PATCH_CALIBRATION["seq_len"],
                                     columns=[1.0, compute, compute], ppl_tokens=ppl_tokens)
        if method not in HEAL_DEFAULTS:
            return None
        settings = HEAL_DEFAULTS[method]
        steps, budget_s = heal_limits(steps, budget_s)
        return estimate.healing(
            rates, compute, steps=steps or settings["steps"], batch=settings["batch"], seq_len=settings["seq_len"],
            heldout=settings["heldout"], eval_every=settings["eval_every"], columns=[1.0, compute, compute],
            ppl_tokens=ppl_tokens, budget_s=budget_s, teacher=loss != "task")

    @quiet
    def stability(self, session, rates, resamples):
        if session.result is None:
            return None
        return estimate.stability(method=session.result.method, analysis_s=session.result.elapsed_s,
                                  resamples=inputs.whole_number(resamples, "Resamples", minimum=2, maximum=200))


def _cached(seconds: float | None, _values: tuple) -> str:
    line = estimate_line(seconds)
    return line + CACHED if line else line


def _sweep_line(seconds: float | None, values: tuple) -> str:
    line = estimate_line(seconds)
    return line + (SWEEP_OTHERS_COST if values[-1] else "") + CACHED if line else line


def _stability_label(seconds: float | None, _values: tuple):
    line = estimate_line(seconds).removeprefix(ESTIMATE)
    return gr.update(value=f"{help_text.STABILITY_BUTTON} ({line})" if line else help_text.STABILITY_BUTTON)


def _at_most(seconds: float | None, _values: tuple) -> str:
    return estimate_line(seconds, at_most=True)


def _cached_at_most(seconds: float | None, _values: tuple) -> str:
    line = estimate_line(seconds, at_most=True)
    return line + CACHED if line else line


def _mt_bench_line(seconds: float | None, values: tuple) -> str:
    """At most (answers and verdicts may end before their caps); a judge other than the original not counted."""
    line = _cached_at_most(seconds, values)
    return line + JUDGE_NOT_COUNTED if line and names_a_judge(values[2]) else line


class EstimateHandlers:
    """The lines beside the long jobs' buttons: each after its own settings change, all after a model or cut did."""

    def __init__(self, context: Context, page):
        self.seconds = Seconds(context)
        self.lines = _lines(page)

    def line(self, line: Line) -> Callable:
        """The handler of one line: its settings in, its text (or label) out."""

        def show(session: Session, *values):
            return line.show(getattr(self.seconds, line.job)(session, *values), values)

        show.__name__ = f"estimate_{line.job}"
        return show

    def every(self, session: Session, *values) -> dict:
        """Every line (``values``: each line's settings in :func:`_lines`' order)."""
        shown, at = {}, 0
        for line in self.lines:
            shown[line.output] = self.line(line)(session, *values[at: at + len(line.settings)])
            at += len(line.settings)
        return shown

    def inputs(self) -> list:
        return [setting for line in self.lines for setting in line.settings]

    def outputs(self) -> list:
        return [line.output for line in self.lines]


def _lines(page) -> list[Line]:
    """Every long job's line on the page."""
    speed, bench, cut = page.speed, page.benchmarks, page.cut
    sweep, sparse, search, heal, frontier = bench.sweep, bench.sparsity, cut.search, cut.heal, bench.frontier
    return [
        Line("speed", speed.speed_estimate, [speed.batches, speed.prompt_len, speed.new_tokens, speed.repeats]),
        Line("memory", speed.memory_estimate, []),
        Line("benchmarks", bench.bench_estimate, [bench.tasks, bench.limit, bench.fewshot], _cached),
        Line("perplexity", bench.ppl_estimate, [bench.ppl_len, bench.ppl_windows, bench.ppl_text], _cached),
        Line("mt_bench", bench.mt_bench.estimate, bench.mt_bench.settings(), _mt_bench_line),
        Line("sweep", sweep.estimate, [sweep.task, sweep.block_size, sweep.limit, sweep.others], _sweep_line),
        Line("sparsity", sparse.estimate, [sparse.task, sparse.levels, sparse.methods, sparse.limit, sparse.windows],
             _cached),
        Line("frontier", frontier.estimate, [frontier.sizes, frontier.task, frontier.limit, frontier.windows,
                                             frontier.families, frontier.repair, frontier.repair_s,
                                             frontier.everything], _cached_at_most),
        Line("generation", page.generate.estimate, [page.generate.prompt, page.generate.max_new], _at_most),
        Line("rank_search", search.estimate, [search.space, search.criterion, search.limit, search.last_layers,
                                              search.projections], _at_most),
        Line("healing", heal.estimate, [heal.method, heal.loss, heal.steps, heal.budget]),
        Line("stability", cut.stability_btn, [cut.resamples], _stability_label),
    ]


def wire(page, handlers, events: dict, after: tuple[str, ...]) -> None:
    """Each line follows its own settings, and every line follows the events ``after`` (a model loaded, a cut
    changed: the compared models' sizes change)."""
    estimates, session = handlers.estimates, page.session
    for line in estimates.lines:
        if line.settings:
            gr.on([setting.change for setting in line.settings], estimates.line(line), [session, *line.settings],
                  line.output, api_name=f"estimate_{line.job}", **LIGHT)
    for event in after:
        events[event].success(estimates.every, [session, *estimates.inputs()], estimates.outputs(),
                              api_name=f"estimates_after_{event}", **LIGHT)
