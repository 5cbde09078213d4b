"""Explaining the cut in the page: numbers beside the range on every release (see
:meth:`evaluation.backend.Backend.cut_feedback`)."""

from __future__ import annotations

import gradio as gr

from evaluation.jobs import Cancelled

from .handlers import Handlers, _owner, user_errors
from .session import Session


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
