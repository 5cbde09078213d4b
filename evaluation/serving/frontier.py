"""The frontier as a visitor's job: every family at each size, measured, and the best model under a target.

A part of :class:`~evaluation.serving.backend.Backend`; its run returns an iterator of results (the last is complete;
:func:`evaluation.core.jobs.final` takes it), checking its settings before the first one. The plan (the analyses'
candidates) and every point are cached, so a rerun does no model work and a stopped run resumes from the points it
finished (see :mod:`evaluation.frontier`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prune.core.calibration import Calibration
from prune.core.errors import InvalidInput
from prune.core.paths import digest
from prune.core.recipe import Recipe
from prune.core.storage import weight_bytes

from evaluation.frontier import compound, plan as planning
from evaluation.frontier.plan import (DEFAULT_AXIS, DEFAULT_METHOD, DEFAULT_SIZES, DROP_METHOD, FAMILIES, Candidate,
                                      FrontierPlan, Target)
from evaluation.frontier.result import FrontierResult
from evaluation.frontier.run import points_so_far
from evaluation.frontier.screen import Screening
from evaluation.quality import lm_eval_adapter, perplexity
from evaluation.core.jobs import Progress
from evaluation.core.pool import ModelSpec
from evaluation.core.store import ResultStore
from evaluation.core.settings import BATCH_SIZE, PERPLEXITY
from evaluation.serving.analysis import Analysis
from evaluation.serving.models import Models

MIN_TARGET = 0.05  # the smallest fraction of the original a target is planned at


class Frontier:
    """The frontier and its target as a visitor's job."""

    def __init__(self, models: Models, analysis: Analysis):
        self.models, self.analysis = models, analysis

    def run(self, spec: ModelSpec, request: lm_eval_adapter.TaskRequest, *, axis: str = DEFAULT_AXIS,
            sizes: Iterable[float] = DEFAULT_SIZES, target: Target | None = None, method: str = DEFAULT_METHOD,
            calibration: Calibration | None = None, ppl_seq_len: int = PERPLEXITY.seq_len,
            ppl_windows: int = PERPLEXITY.windows, families: Iterable[str] = FAMILIES,
            repair: compound.Repair | None = None, engine: str | None = None, screen: bool = True,
            batch_size: int = BATCH_SIZE, use_cache: bool = True, progress: Progress | None = None,
            owner: str | None = None) -> Iterator[Screening | FrontierResult]:
        """Every family's point at each size, as it goes: the screen after each candidate (``screen=False``: none,
        every candidate measured in full), then the result after the original and after each candidate measured in
        full; the last is complete.

        With ``target`` the axis is the target's and its size joins ``sizes``, so each family is planned to
        reach it (with no sizes of its own, a target the original meets or that no family plans for is refused in
        one line). ``families``: those tried (default: all of ``FAMILIES``); ``repair``: each structural point
        also trained before it is quantized (``evaluation.frontier.compound``); ``engine="llama.cpp"``: each point's
        decode timed in llama.cpp (its GGUF) instead of LayerCut's loop. The depth candidates come from
        ``method``'s analysis, the drops from the sub-layer analysis, both on ``calibration`` (None: the backend's
        default), as Wanda, width and low-rank calibrate.
        """
        calibration = calibration or self.models.default_calibration
        self.models.load(spec, progress=progress, owner=owner)
        if target is not None:
            axis, sizes = target.axis, (*sizes, *self._target_size(spec, target, alone=not tuple(sizes)))
        plan = planning.check_plan(axis, sizes, method, calibration, ppl_seq_len=ppl_seq_len, ppl_windows=ppl_windows,
                                   families=families, repair=repair, engine=engine, screen=screen)
        rows = perplexity.wikitext2_rows(self.models.data_dir)
        store = ResultStore(enabled=use_cache)
        found, why = self._candidates(spec, plan, store, progress, owner)

        def run():
            with self.models.jobs.run("the frontier", progress, owner=owner) as job:
                base = self.models.base(spec, job)
                yield from points_so_far(base.model, base.tokenizer, request, plan, found, why, wikitext_rows=rows,
                                         batch_size=batch_size, store=store,
                                         identify=lambda recipe: self.models.key(base, recipe), job=job)

        return run()

    def _target_size(self, spec: ModelSpec, target: Target, alone: bool) -> tuple[float, ...]:
        """The fraction of the original's parameters a target is planned at (none when the original meets it or it
        is under 5 %: ``alone``, with no other size to plan, says so in one line instead)."""
        if target.of_original:
            fraction = target.value
        elif target.axis == "bytes":
            fraction = target.value / weight_bytes(self.models.base(spec).model)
        else:  # the decode rate timed when the model loaded
            fraction = target.value / (1000 * self.models.rates(spec).decode_s_per_token)
        if alone and fraction >= 1:
            raise InvalidInput(f"The original already meets {target.words()}: there is nothing to cut.")
        if alone and fraction < MIN_TARGET:
            raise InvalidInput(f"{target.words()} is {100 * fraction:.2g} % of the original: no family is planned "
                               f"under {100 * MIN_TARGET:g} %.")
        return (round(fraction, 3),) if MIN_TARGET <= fraction < 1 else ()

    def _candidates(self, spec: ModelSpec, plan: FrontierPlan, store: ResultStore, progress: Progress | None,
                    owner: str | None) -> tuple[list[Candidate], dict]:
        """The plan's candidates, from the results cache, else from the two analyses (each its own job)."""
        base = self.models.base(spec)
        key = {"kind": "frontier_plan", **self.models.key(base, Recipe()), "axis": plan.axis, "sizes": list(plan.sizes),
               "method": plan.method, "calibration": digest(plan.calibration.key()),
               **({} if plan.families == FAMILIES else {"families": list(plan.families)}),  # older keys stay valid
               **({} if plan.repair is None else {"repair": [plan.repair.name, plan.repair.seconds]})}
        cached = store.get(key)
        if cached is None:
            depth = self.analysis.score(spec, plan.method, calibration=plan.calibration, progress=progress, owner=owner)
            if plan.method == DROP_METHOD:
                blocks = depth
            elif planning.drops_reach(base.model, plan):
                blocks = self.analysis.score(spec, DROP_METHOD, calibration=plan.calibration, progress=progress,
                                             owner=owner)
            else:  # no attention or MLP drop reaches a size: no sub-layer analysis
                blocks = None
            found, why = planning.candidates(base.model, plan, depth, blocks)
            cached = {"candidates": [{"families": list(c.families), "size": c.size, "recipe": c.recipe.to_json()}
                                     for c in found],
                      "why": [{"family": f, "size": s, "why": w} for (f, s), w in why.items()]}
            store.put(key, cached)
        return ([Candidate(tuple(c["families"]), c["size"], Recipe.from_json(c["recipe"]))
                 for c in cached["candidates"]],
                {(w["family"], w["size"]): w["why"] for w in cached["why"]})
