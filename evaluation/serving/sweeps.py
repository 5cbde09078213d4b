"""The sweeps as a visitor's jobs: every cut of K layers, the sparsity levels; each streams as it goes.

A part of :class:`~evaluation.serving.backend.Backend`: each call returns an iterator of results (the last is
complete; :func:`evaluation.core.jobs.final` takes it), checking its settings before the first one.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import prune
from prune.core.calibration import Calibration
from prune.core.errors import LayerCutError
from prune.core.recipe import Recipe
from prune.core.surgery import check_cut_size

from evaluation.core.jobs import Cancelled, Progress, cancellable
from evaluation.core.pool import ModelSpec
from evaluation.core.settings import BATCH_SIZE, PERPLEXITY
from evaluation.core.store import ResultStore
from evaluation.quality import lm_eval_adapter, perplexity
from evaluation.sweeps import cuts as cut_sweep, sparsity as sparsity_sweep
from evaluation.sweeps.cuts import SweepReport
from evaluation.sweeps.sparsity import DEFAULT_LEVELS, SparsitySweepResult
from evaluation.serving.analysis import Analysis
from evaluation.serving.models import Models


class Sweeps:
    """The sweeps as a visitor's jobs."""

    def __init__(self, models: Models, analysis: Analysis):
        self.models, self.analysis = models, analysis

    def cuts(self, spec: ModelSpec, request: lm_eval_adapter.TaskRequest, block_size: int, *,
             known: Mapping[str, prune.ImportanceResult] | None = None, methods: list[str] | None = None,
             calibration: Calibration | None = None, batch_size: int = BATCH_SIZE, use_cache: bool = True,
             progress: Progress | None = None, owner: str | None = None) -> Iterator[SweepReport]:
        """Measured quality of every cut of ``block_size`` layers on the request's first task, beside each method: a
        report after the original is scored and after each cut, then one after each method is analysed.

        Cached like benchmarks (a cached sweep comes whole). ``known`` results (the page's: the analysis on show)
        stand beside the cuts as they arrive; ``methods`` (None: every registered one) are analysed on the original
        afterwards. All are ranked by agreement with the measurement once it is complete. A method whose analysis
        fails is reported in ``failed`` and the others go on.
        """
        base = self.models.base(spec)
        check_cut_size(block_size, base.info.num_layers)
        methods = list(prune.METHODS) if methods is None else methods
        analyses, failed = dict(known or {}), {}

        def report(result: cut_sweep.SweepResult) -> SweepReport:
            scores = {m: [float(v) for v in r.block_scores[block_size - 1, result.starts]] for m, r in analyses.items()}
            agreement = cut_sweep.rank_agreement(result, analyses) if result.complete else {}
            return SweepReport(result, agreement, scores, dict(failed))

        def run():
            result = None
            for result in self._measured_cuts(spec, request, block_size, batch_size, use_cache, progress, owner):
                yield report(result)
            for method in (m for m in methods if m not in analyses):
                try:
                    analyses[method] = self.analysis.score(spec, method, calibration=calibration, progress=progress,
                                                           owner=owner)
                except Cancelled:
                    raise
                except LayerCutError as err:
                    failed[method] = str(err)
                yield report(result)

        return run()

    def _measured_cuts(self, spec: ModelSpec, request: lm_eval_adapter.TaskRequest, block_size: int,
                       batch_size: int, use_cache: bool, progress: Progress | None,
                       owner: str | None) -> Iterator[cut_sweep.SweepResult]:
        """The sweep's measurements as they arrive, as ``owner``'s job; the finished one read from, or put in, the
        results cache."""
        base = self.models.base(spec)
        store = ResultStore(enabled=use_cache)
        key = {"kind": "sweep", **self.models.key(base, Recipe()), "task": request.names[0], "block_size": block_size,
               "limit": request.limit, "batch_size": batch_size, "data": request.data}
        cached = store.get(key)
        if cached is not None:
            yield cut_sweep.SweepResult.from_json(cached)
            return
        with self.models.jobs.run(f"the sweep over blocks of {block_size}", progress, owner=owner) as job:
            base = self.models.base(spec, job)
            with cancellable(base.model, job):
                for found in cut_sweep.sweeping(base.model, base.tokenizer, request.names[0], [block_size],
                                                limit=request.limit, data_dir=request.data_dir, batch_size=batch_size,
                                                progress=job.update):
                    yield found[block_size]
        store.put(key, found[block_size].to_json())

    def sparsity(self, spec: ModelSpec, request: lm_eval_adapter.TaskRequest, *, levels=DEFAULT_LEVELS,
                 methods=prune.sparsity.masks.METHODS, calibration: Calibration | None = None,
                 ppl_seq_len: int = PERPLEXITY.seq_len, ppl_windows: int = PERPLEXITY.windows,
                 batch_size: int = BATCH_SIZE, use_cache: bool = True, progress: Progress | None = None,
                 owner: str | None = None) -> Iterator[SparsitySweepResult]:
        """The request's first task and WikiText-2 perplexity at each sparsity level, per method, as it goes (one
        job): the result after each point, points not measured yet NaN.

        Wanda and SparseGPT calibrate on ``calibration`` (None: the backend's default). Every
        (method, level) point is cached like the other results, so a rerun is instant and a
        cancelled sweep resumes from the points it finished (see ``evaluation.sweeps.sparsity``).
        """
        plan = sparsity_sweep.check_plan(levels, methods, calibration or self.models.default_calibration,
                                         ppl_seq_len=ppl_seq_len, ppl_windows=ppl_windows)
        rows = perplexity.wikitext2_rows(self.models.data_dir)

        def run():
            with self.models.jobs.run("the sparsity sweep", progress, owner=owner) as job:
                base = self.models.base(spec, job)
                yield from sparsity_sweep.levels_so_far(base.model, base.tokenizer, request, plan, wikitext_rows=rows,
                                                        batch_size=batch_size, store=ResultStore(enabled=use_cache),
                                                        identify=lambda recipe: self.models.key(base, recipe), job=job)

        return run()
