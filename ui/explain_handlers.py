"""Explaining the cut in the page: numbers beside the range on every release, and after a generation where each
compressed answer leaves the original's (see :meth:`evaluation.serving.backend.Backend.cut_feedback` and ``divergence``)."""

from __future__ import annotations

import gradio as gr

from evaluation.serving.jobs import Cancelled

from ui import inputs, plots, text
from ui.handlers import Handlers, _need_model, _owner, reporter, user_errors
from ui.session import SLOTS, Session

MARK = " ⟦▶ leaves the original here⟧ "
LENS_POSITIONS = 12  # the prompt's last positions the logit lens shows (readable on a projector)


class ExplainHandlers:
    """The explanation events; they share the page's :class:`~ui.handlers.Handlers` (backend, outputs)."""

    def __init__(self, handlers: Handlers):
        self.h = handlers

    @user_errors
    def feedback(self, session: Session, request: gr.Request = None):
        """The edited slot's model against the original on a small fixed slice: agreement, KL and perplexity.

        A newer release of the same visitor supersedes this one: it then changes nothing.
        """
        recipe = session.cut()
        if session.info is None or session.loading or recipe is None:
            return ""
        try:
            found = self.h.backend.cut_feedback(session.spec, recipe, owner=_owner(request))
        except Cancelled:
            return gr.update()  # a newer release (or Stop) took over: its own numbers will show
        how = "resumed from layer {}".format(found.resumed_at) if found.resumed else "the whole model run"
        took = "cached" if found.cached else f"{found.seconds:.1f} s, {how}"
        return (f"**{session.editing} against the original** on {found.tokens} next tokens of the calibration text: "
                f"**{found.summary()}** · {took}")

    @user_errors
    def divergence(self, session: Session, prompt: str, max_new_tokens, answers: dict | None,
                   request: gr.Request = None, progress=gr.Progress()):
        """After a generation: each compressed column marked where its answer leaves the original's greedy one,
        and, teacher-forced on that answer, each column's per-token KL strip and top-1 agreement.

        Outputs: the A and B texts, the strip chart, its caption.
        """
        _need_model(session)
        variants = session.variants()
        if not variants or not answers:
            return gr.update(), gr.update(), plots.empty_figure("Generate with a cut to see where the answers part"), ""
        report = self.h.backend.divergence(
            session.spec, variants, inputs.prompt(prompt, self.h.policy),
            max_new_tokens=inputs.whole_number(max_new_tokens, "Max new tokens", minimum=1, maximum=2048),
            answers={label: ids for label, ids in answers.items() if label in variants},
            progress=reporter(progress), owner=_owner(request))
        marked = []
        for slot in SLOTS:
            column = report.columns.get(slot)
            marked.append(gr.update() if column is None or column.first is None else
                          gr.update(value=column.parts[0] + MARK + column.parts[1]))
        return *marked, plots.divergence_figure(report), text.divergence_markdown(report)

    @user_errors
    def logit_lens(self, session: Session, prompt: str, request: gr.Request = None, progress=gr.Progress()):
        """The logit lens of the original (the edited slot's removed layers marked) and of the edited slot's model."""
        _need_model(session)
        recipe = session.cut()
        variants = {session.editing: recipe} if recipe is not None else {}
        lenses = self.h.backend.logit_lens(session.spec, variants, inputs.prompt(prompt, self.h.policy),
                                           last=LENS_POSITIONS, progress=reporter(progress), owner=_owner(request))
        original = plots.logit_lens_figure(lenses["original"], "Original: the top next token after each layer")
        if recipe is None:
            return original, plots.empty_figure(f"Choose a cut for {session.editing} to see its lens beside")
        return original, plots.logit_lens_figure(lenses[session.editing],
                                                 f"{session.editing} ({recipe.short()}): the layers it kept")
