"""The sweeps as a visitor's jobs: every cut of K layers, the sparsity levels.

A part of :class:`~evaluation.serving.backend.Backend` (a mixin: it uses the backend's pool, variants, jobs
and results store).
"""

from __future__ import annotations

import prune
from prune.core.calibration import Calibration
from prune.core.surgery import check_cut_size
from prune.core.errors import LayerCutError
from prune.core.recipe import Recipe

from evaluation.quality import lm_eval_adapter, perplexity
from evaluation.sweeps import sparsity as sparsity_sweep, cuts as sweep
from evaluation.serving.jobs import Cancelled, Progress, cancellable
from evaluation.serving.models import ModelSpec
from evaluation.sweeps.sparsity import DEFAULT_LEVELS, SparsitySweepResult
from evaluation.serving.store import ResultStore
from evaluation.sweeps.cuts import SweepReport
from evaluation.settings import BATCH_SIZE, PERPLEXITY


class Sweeping:
    """The sweeps as a visitor's jobs."""

    def sweep(self, spec: ModelSpec, request: lm_eval_adapter.TaskRequest, block_size: int, *,
              methods: list[str] | None = None, calibration: Calibration | None = None, batch_size: int = BATCH_SIZE,
              use_cache: bool = True, progress: Progress | None = None, owner: str | None = None) -> SweepReport:
        """Measured quality of every cut of ``block_size`` layers on the request's first task, beside each method.

        Cached like benchmarks; ``methods`` (default: every registered one) are analysed on the
        original and ranked by agreement with the measurement. A method whose analysis fails is
        reported in ``failed`` and the others go on.
        """
        base = self._base(spec)
        check_cut_size(block_size, base.info.num_layers)
        task = request.names[0]
        store = ResultStore(enabled=use_cache)
        key = {"kind": "sweep", **self._key(base, Recipe()), "task": task, "block_size": block_size,
               "limit": request.limit, "batch_size": batch_size, "data": request.data}
        cached = store.get(key)
        if cached is not None:
            result = sweep.SweepResult.from_json(cached)
        else:
            with self.jobs.run(f"the sweep over blocks of {block_size}", progress, owner=owner) as job:
                with cancellable(base.model, job):
                    result = sweep.sweep(base.model, base.tokenizer, task, block_size, limit=request.limit,
                                          data_dir=request.data_dir, batch_size=batch_size, progress=job.update)
            store.put(key, result.to_json())
        analyses, failed = {}, {}
        for method in methods if methods is not None else list(prune.METHODS):
            try:
                analyses[method] = self.analyze(spec, method, calibration=calibration, progress=progress, owner=owner)
            except Cancelled:
                raise
            except LayerCutError as err:
                failed[method] = str(err)
        scores = {m: [float(v) for v in r.block_scores[block_size - 1, result.starts]] for m, r in analyses.items()}
        return SweepReport(result, sweep.rank_agreement(result, analyses), scores, failed)

    def sparsity_sweep(self, spec: ModelSpec, request: lm_eval_adapter.TaskRequest, *,
                       levels=DEFAULT_LEVELS, methods=prune.sparsity.masks.METHODS, calibration: Calibration | None = None,
                       ppl_seq_len: int = PERPLEXITY.seq_len, ppl_windows: int = PERPLEXITY.windows, batch_size: int = BATCH_SIZE, use_cache: bool = True,
                       progress: Progress | None = None, owner: str | None = None) -> SparsitySweepResult:
        """The request's first task and WikiText-2 perplexity at each sparsity level, per method (one job).

        Wanda and SparseGPT calibrate on ``calibration`` (None: the backend's default). Every
        (method, level) point is cached like the other results, so a rerun is instant and a
        cancelled sweep resumes from the points it finished (see ``evaluation.sweeps.sparsity``).
        """
        plan = sparsity_sweep.check_plan(levels, methods, calibration or self.default_calibration,
                                         ppl_seq_len=ppl_seq_len, ppl_windows=ppl_windows)
        rows = perplexity.wikitext2_rows(self.data_dir)
        with self.jobs.run("the sparsity sweep", progress, owner=owner) as job:
            base = self._base(spec)
            return sparsity_sweep.sweep_levels(base.model, base.tokenizer, request, plan, wikitext_rows=rows,
                                               batch_size=batch_size, store=ResultStore(enabled=use_cache),
                                               identify=lambda recipe: self._key(base, recipe), job=job)
