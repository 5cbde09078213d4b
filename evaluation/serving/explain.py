"""Explaining a cut as a visitor's jobs: the feedback beside the range, divergence, the logit lens.

A part of :class:`~evaluation.serving.backend.Backend`; it keeps the original's residual stream for the feedback
(:class:`evaluation.explain.cut.Explainer`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from prune.core.architectures import check_causal
from prune.core.calibration import Calibration
from prune.core.recipe import Recipe

from evaluation.explain import cut as explain, logit_lens
from evaluation.measure import generation
from evaluation.explain.cut import CutFeedback, DivergenceReport
from evaluation.core.jobs import building, Progress
from evaluation.core.pool import ModelSpec
from evaluation.core.store import ResultStore
from evaluation.serving.models import Models, Variants


FEEDBACK_NEEDS = "The cut's next-token feedback (agreement, KL, perplexity)"


class Explain:
    """Explaining a cut as a visitor's jobs."""

    def __init__(self, models: Models):
        self.models = models
        self.explainer = explain.Explainer()

    def cut_feedback(self, spec: ModelSpec, recipe: Recipe, *, calibration: Calibration | None = None,
                     windows: int = explain.FEEDBACK_WINDOWS, seq_len: int = explain.FEEDBACK_SEQ_LEN,
                     use_cache: bool = True, progress: Progress | None = None, owner: str | None = None) -> CutFeedback:
        """Perplexity, mean KL and top-1 agreement of ``recipe``'s model against the original, on a small fixed
        slice of ``calibration`` (default: the backend's): ``windows`` × ``seq_len`` tokens, for feedback on a drag.

        A cut or drop resumes from the original's residual stream (computed on the first call per model and
        slice) and runs beside any other job: not under the device lock, which a visitor's long job may hold
        for minutes, but one feedback at a time, on private hook-free copies of the shared weights (see
        ``evaluation.explain.cut``). Any other recipe is built and run whole under the device lock. A newer call of
        the same ``owner`` (None: one anonymous caller) cancels an older one still running or waiting (that one
        raises ``Cancelled``), as does the owner's Stop; results are cached.
        """
        superseded = self.explainer.ticket(owner, lambda: None)  # first: a newer release, even a cached one, wins
        self.models.load(spec, progress=progress, owner=owner, timed=False)  # its numbers need no speed
        base = self.models.base(spec)
        check_causal(base.model, FEEDBACK_NEEDS)
        cal = explain.feedback_slice(calibration or self.models.default_calibration, windows, seq_len)
        store = ResultStore(enabled=use_cache)
        key = {"kind": "cut_feedback", **self.models.key(base, recipe), "slice": cal.key()}
        if (cached := store.get(key)) is not None:
            return replace(CutFeedback.from_json(cached), seconds=0.0, cached=True)
        # a base parked off the device comes back under the device lock, as for any other job
        resumes = (explain.resume_layer(recipe, base.info.num_layers) is not None
                   and not self.models.residency.waiting(base.model))
        with self.models.jobs.run("the cut feedback", progress, owner=owner, hold=not resumes) as job:
            def check():
                job.check()
                superseded()

            if not resumes:
                self.models.base(spec, job)
            variant = None if resumes else self.models.variants.get(base, recipe, building(job, recipe.short()))
            # its private copy is taken beside the device lock: nothing moves meanwhile
            with self.models.residency.steady():
                found = self.explainer.feedback(base.fingerprint, base.model, base.tokenizer, cal, recipe, variant,
                                                check)
        store.put(key, found.to_json())
        return found

    def divergence(self, spec: ModelSpec, variants: Variants, prompt: str, *, max_new_tokens: int = 64,
                   answers: Mapping[str, list[int]] | None = None, progress: Progress | None = None,
                   owner: str | None = None) -> DivergenceReport:
        """Where each compressed model's answer leaves the original's greedy one, and teacher-forced on that
        answer, its per-token KL and top-1 agreement (see ``explain.divergence``).

        ``answers``: a column's own generated ids (the ``token_ids`` a generation state carries); a column
        without them is answered greedily here.
        """
        settings = generation.check_settings(max_new_tokens=max_new_tokens, temperature=0.0, top_p=1.0, seed=0)
        with self.models.jobs.run("the divergence", progress, owner=owner) as job:
            base, sides = self.models.sides(spec, variants, job)
            check_causal(base.model, "The divergence")
            self.models.ready(base, sides, job)  # if they do not fit together, each reads its weights for its pass
            job.update(0.0, "Answering greedily and comparing token by token…")
            return explain.divergence(sides, base.tokenizer, prompt, max_new_tokens=settings["max_new_tokens"],
                                      answers=answers, check=job.check)

    def logit_lens(self, spec: ModelSpec, variants: Variants, prompt: str, *, last: int | None = 24,
                   progress: Progress | None = None, owner: str | None = None) -> dict[str, logit_lens.LogitLens]:
        """The logit lens of the original and of each compressed model on the prompt's ``last`` positions."""
        with self.models.jobs.run("the logit lens", progress, owner=owner) as job:
            base, sides = self.models.sides(spec, variants, job)
            check_causal(base.model, "The logit lens")
            self.models.ready(base, sides, job)  # if they do not fit together, each reads its weights for its pass
            job.update(0.0, "Reading every layer's residual stream…")
            return dict(logit_lens.lenses(sides, base.tokenizer, prompt, base.info.num_layers, last=last,
                                          check=job.check))
