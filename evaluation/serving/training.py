"""Jobs that train, fit or search: the surgical rank search, healing (streaming as they go), the linear patch.

A part of :class:`~evaluation.serving.backend.Backend`. ``prune.healing.train`` reports each step through a
callback; healing runs it in a worker thread (with the caller's context, so a page's progress bar still updates)
and turns the callbacks into values the caller iterates: one :class:`LossPoint` per step (step 0 is before
training), then the healed model. Stopping the iteration (a page closed) cancels the worker at its next step and
waits for it.
"""

from __future__ import annotations

import contextvars
import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass

from torch import nn

from prune.lowrank import rank_search
from prune.core.calibration import Calibration
from prune.healing.train import HEALED_FIELD
from prune.patch.replaceme import PATCHED_FIELD
from prune.lowrank.rank_search import Point, SearchResult
from prune.core.recipe import Recipe
from prune.core.step import Earlier

from evaluation.sweeps import search_splits
from evaluation.core.jobs import Job, Progress, building
from evaluation.core.pool import ModelSpec
from evaluation.core.settings import RANK_SEARCH
from evaluation.serving.models import Models


@dataclass(frozen=True)
class LossPoint:
    step: int  # optimizer steps done (0: before training)
    steps: int  # asked for
    train: float  # mean loss of this step's batch (at step 0: of the first batch, before training)
    heldout: float | None  # loss on the held-out windows, when measured at this step


@dataclass(frozen=True)
class HealDone:
    """A finished heal: the recipe of the healed model (cached as its variant) and what its config records."""

    recipe: Recipe
    record: dict  # prune.healing.train's layercut_healed: method, steps done, losses, whether the budget stopped it


@dataclass(frozen=True)
class PatchDone:
    """A finished linear patch: the recipe of the patched cut (cached as its variant) and what its config records."""

    recipe: Recipe
    record: dict  # prune.patch.replaceme's layercut_patched: method, seconds, each block's fit error


@dataclass(frozen=True)
class RankSearchDone:
    """A finished rank search and the recipe that rebuilds its model (cached as that recipe's variant)."""

    result: SearchResult
    recipe: Recipe | None  # None when every projection stayed dense


class Training:
    """Jobs that train or search and stream as they go."""

    def __init__(self, models: Models):
        self.models = models

    def rank_search(self, spec: ModelSpec, *, space: str = "feature", criterion: str = search_splits.WIKITEXT,
                    tolerance: float = RANK_SEARCH.tolerance, limit: int | None = RANK_SEARCH.limit, layers=None,
                    projections=None, steps: int = 10, calibration: Calibration | None = None,
                    progress: Progress | None = None, owner: str | None = None) -> Iterator[Point | RankSearchDone]:
        """The surgical rank search on the original (:mod:`prune.lowrank.rank_search`) as it goes, one job of ``owner``.

        Yields the original's :class:`~prune.lowrank.rank_search.Point`, one after each projection (scored on
        the test split after each layer), then :class:`RankSearchDone` with the recipe that rebuilds the
        searched model (None if no projection could be lowered), which is cached as that recipe's
        variant (so comparisons find it built).
        ``criterion`` and ``tolerance``: see :func:`evaluation.sweeps.search_splits.criterion_splits`; the search
        split is the first fifth. Stop cancels between candidates.
        """
        calibration = None if space == "weight" else calibration or self.models.default_calibration

        def run():
            with self.models.jobs.run("the rank search", progress, owner=owner) as job:
                base = self.models.base(spec, job)
                search, test, bound = search_splits.criterion_splits(criterion, tolerance, base.tokenizer,
                                                                     self.models.data_dir, limit=limit)
                checked = [lambda m, score=score: (job.check(), score(m))[1] for score in (search, test)]
                found = None
                for found in rank_search.searching(base.model, base.tokenizer, search=checked[0], test=checked[1],
                                                   tolerance=bound, space=space, projections=projections,
                                                   layers=layers, steps=steps, calibration=calibration,
                                                   test_each_layer=True, progress=job.update):
                    if isinstance(found, rank_search.Point):
                        yield found
                recipe = None
                if found.ranks:  # else every projection stayed dense: nothing to compare
                    recipe = Recipe((found.step(calibration),),
                                    origin=f"surgical rank search on {criterion} (tolerance {tolerance:g})")
                    self.models.variants.put(base, recipe, found.model)
                yield RankSearchDone(found, recipe)

        return run()

    def heal(self, spec: ModelSpec, recipe: Recipe, step, *, progress: Progress | None = None,
             owner: str | None = None) -> Iterator[LossPoint | HealDone]:
        """Heal ``recipe``'s model with the step ``step`` (:class:`prune.healing.step.Heal`) as ``owner``'s job.

        Yields each training step's loss (step 0 before training; the held-out loss every few steps) and
        then :class:`HealDone`; the healed model is cached as ``recipe.then(step)``'s variant, beside the
        unhealed one, which stays untouched. A budget that stops early is recorded in the healed config
        (its steps done may differ in a rebuild after eviction). Stop cancels between steps.
        """
        healed_recipe = recipe.then(step)  # checked: a heal never comes first

        def run():
            with self.models.jobs.run(f"healing {recipe.short()}", progress, owner=owner) as job:
                base = self.models.base(spec, job)
                unhealed = self.models.variants.get(base, recipe, building(job, recipe.short()))
                for item in _healing(job, step, unhealed, base.tokenizer, base.model):
                    if isinstance(item, LossPoint):
                        yield item
                        continue
                    self.models.variants.put(base, healed_recipe, item)
                    yield HealDone(healed_recipe, dict(getattr(item.config, HEALED_FIELD, {})))

        return run()

    def patch(self, spec: ModelSpec, recipe: Recipe, step, *, progress: Progress | None = None,
              owner: str | None = None) -> PatchDone:
        """Patch ``recipe``'s cut with the step ``step`` (:class:`prune.patch.step.Patch`) as ``owner``'s job; the
        patched model is cached as ``recipe.then(step)``'s variant, beside the plain cut, which stays untouched."""
        patched = recipe.then(step)  # checked: a patch follows a cut directly
        with self.models.jobs.run(f"patching {recipe.short()}", progress, owner=owner) as job:
            base = self.models.base(spec, job)
            model = self.models.variants.get(base, patched, job.update)
            return PatchDone(patched, dict(getattr(model.config, PATCHED_FIELD, {})))


def _healing(job: Job, heal_step, model: nn.Module, tokenizer, original: nn.Module) -> Iterator[LossPoint | nn.Module]:
    """Heal ``model`` with the recipe step ``heal_step`` inside ``job``: each step's loss, then the healed model.

    ``original``: the model the recipe started from (distillation's teacher)."""
    events: queue.Queue = queue.Queue()

    def train():
        try:
            healed = heal_step.apply(model, tokenizer, progress=job.update, earlier=Earlier(original),
                                     callback=lambda *point: events.put(LossPoint(*point)))
            events.put(("done", healed))
        except BaseException as err:  # re-raised in the caller's thread, Cancelled included
            events.put(("failed", err))

    worker = threading.Thread(target=contextvars.copy_context().run, args=(train,), daemon=True,
                              name="layercut-heal")
    worker.start()
    try:
        while True:
            item = events.get()
            if isinstance(item, LossPoint):
                yield item
                continue
            kind, value = item
            if kind == "failed":
                raise value
            yield value
            return
    finally:
        if worker.is_alive():  # the caller stopped listening: stop the training at its next step
            job.stop()
            worker.join()
