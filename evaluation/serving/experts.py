"""Which experts matter, as a visitor's job: the expert heatmap's saliency (:mod:`prune.experts.saliency`) on a loaded
mixture of experts, cached on disk like an analysis. The pass's statistics stay with the loaded model, so every
criterion and every keep fraction built after it reads no text again."""

from __future__ import annotations

import time

import torch

from prune.core.calibration import Calibration
from prune.core.recipe import Recipe
from prune.experts.map import ExpertMap
from prune.experts.saliency import METHODS, check_method, expert_saliency, from_statistics, remember, statistics

from evaluation.core.jobs import Progress, cancellable
from evaluation.core.pool import ModelSpec
from evaluation.core.store import ResultStore
from evaluation.serving.models import Models


class Experts:
    """The expert heatmap's saliency, as the calling visitor's job."""

    def __init__(self, models: Models):
        self.models = models

    def saliency(self, spec: ModelSpec, method: str, *, calibration: Calibration | None = None,
                 progress: Progress | None = None, owner: str | None = None, use_cache: bool = True) -> ExpertMap:
        """Every layer's saliency of each expert by ``method`` on ``calibration`` (default: the backend's)."""
        method = check_method(method)
        with self.models.jobs.run(f"the {METHODS[method]} expert saliency", progress, owner=owner) as job:
            base = self.models.base(spec, job)
            cal = calibration or self.models.default_calibration
            if method == "random":
                return ExpertMap.of(base.model, method, expert_saliency(base.model, None, method))
            store = ResultStore(enabled=use_cache)
            key = {"kind": "expert_statistics", **self.models.key(base, Recipe()), "calibration": cal.key()}
            started = time.perf_counter()
            if (cached := store.get(key)) is not None:  # the pass of an earlier run: held for the builds too
                found = {int(i): torch.tensor(sums, dtype=torch.float64) for i, sums in cached.items()}
                remember(base.model, cal, found)
                return ExpertMap.of(base.model, method, from_statistics(found, method))
            job.update(0.0, f"Reading the experts' {METHODS[method]} saliency on the calibration text…")
            with cancellable(base.model, job):
                found = statistics(base.model, base.tokenizer, cal, progress=job.update)
            seconds = time.perf_counter() - started
        store.put(key, {str(i): sums.tolist() for i, sums in found.items()})
        return ExpertMap.of(base.model, method, from_statistics(found, method), seconds)
