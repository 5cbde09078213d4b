"""Layer importance as a visitor's job: ``prune.score`` on a loaded model, and how stable its best block is.

A part of :class:`~evaluation.serving.backend.Backend`; it keeps one residual stream per (model, calibration) in
memory, the last few only, so a second method on the same text scores without a forward pass.
"""

from __future__ import annotations

from collections import OrderedDict

import prune
from prune.core.calibration import Calibration
from prune.core.paths import digest
from prune.depth.methods import get_method
from prune.depth.methods.context import Context
from prune.depth.stability import Stability, block_stability

from evaluation.core.jobs import Progress, cancellable
from evaluation.core.store import ResultStore
from evaluation.core.pool import Loaded, ModelSpec
from evaluation.serving.models import Models

CONTEXTS_KEPT = 2  # residual streams kept in memory (each is [L+1, N, T, D] floats)


class Analysis:
    """Importance scores and their stability, each as the calling visitor's job."""

    def __init__(self, models: Models):
        self.models = models
        self._contexts: OrderedDict[tuple[str, str], Context] = OrderedDict()

    def score(self, spec: ModelSpec, method: str, *, calibration: Calibration | None = None,
              progress: Progress | None = None, owner: str | None = None, use_cache: bool = True,
              **options) -> prune.ImportanceResult:
        """``prune.score`` (and its disk cache), keeping one residual stream per calibration in memory."""
        method_spec = get_method(method)
        with self.models.jobs.run(f"the {method_spec.label} analysis", progress, owner=owner) as job:
            base = self.models.base(spec, job)
            job.update(0.0, f"Scoring layers with {method_spec.label}…")
            context = self._context(base, calibration or self.models.default_calibration)
            with cancellable(base.model, job):
                return prune.score(None, None, method, context=context, use_cache=use_cache, **options)

    def stability(self, spec: ModelSpec, method: str, block_size: int, *, calibration: Calibration | None = None,
                  resamples: int = 20, progress: Progress | None = None, owner: str | None = None,
                  **options) -> Stability:
        """How often each block of ``block_size`` wins over bootstrap resamples of the calibration windows; kept on
        disk like the analysis (a restart reads it: no residual stream computed)."""
        with self.models.jobs.run("the stability check", progress, owner=owner) as job:
            base = self.models.base(spec, job)
            calibration, store = calibration or self.models.default_calibration, ResultStore()
            key = {"kind": "stability", "model": base.fingerprint, "method": method, "block_size": block_size,
                   "resamples": resamples, "options": options, "calibration": digest(calibration.key())}
            if (kept := store.get(key)) is not None:
                return Stability.from_json(kept)
            job.update(0.0, f"Re-scoring {resamples} resamples of the calibration windows…")
            context = self._context(base, calibration)
            with cancellable(base.model, job):
                found = block_stability(context, method, block_size, resamples=resamples, **options)
            store.put(key, found.to_json())
            return found

    def _context(self, base: Loaded, calibration: Calibration) -> Context:
        """The method context of (model, calibration): its residual stream is computed once and kept."""
        key = (base.fingerprint, digest(calibration.key()))
        if key not in self._contexts:
            while len(self._contexts) >= CONTEXTS_KEPT:  # bound the memory held by residual streams
                self._contexts.popitem(last=False)
            self._contexts[key] = Context(base.model, base.tokenizer, calibration)
        self._contexts.move_to_end(key)
        return self._contexts[key]
