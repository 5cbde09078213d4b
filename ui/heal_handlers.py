"""Healing in the page: the edited slot's model retrained briefly into the other slot, with a live loss curve,
then WikiText-2 test perplexity (never trained on) of all three columns (see :meth:`Backend.heal`)."""

from __future__ import annotations

import gradio as gr

from evaluation.serving.healing import LossPoint
from prune.core.errors import InvalidInput
from prune.healing.step import Heal

from ui import inputs, plots, text
from ui.handlers import Handlers, _need_model, _owner, reporter, user_errors
from ui.session import SLOTS, Session

PPL_SEQ_LEN, PPL_WINDOWS = 256, 32  # the held-out check after healing: 8,192 tokens of WikiText-2 test
NO_CHANGE = 10  # the cut outputs (8), the benchmark table and plot: unchanged while training


class HealHandlers:
    """The heal event; it shares the page's :class:`~ui.handlers.Handlers` (backend, outputs)."""

    def __init__(self, handlers: Handlers):
        self.h = handlers

    @user_errors
    def heal(self, session: Session, method: str, steps, budget_s, request: gr.Request = None,
             progress=gr.Progress()):
        """Heal the edited slot's model into the other slot, drawing each step's loss; then perplexity on text
        never trained on for the original, the unhealed and the healed model.

        Outputs: the loss curve, the status, the cut outputs, the benchmark table and plot.
        """
        _need_model(session)
        recipe = session.cut()
        if recipe is None:
            raise InvalidInput(f"Choose a cut for {session.editing} first: healing retrains a compressed model.")
        if any(isinstance(item, Heal) for item in recipe.steps):
            raise InvalidInput(f"{session.editing} is already healed: heal the model it was healed from.")
        step = Heal.of(method, inputs.whole_number(steps, "Healing steps", minimum=0, maximum=10_000) or None,
                       inputs.real_number(budget_s, "The time budget", minimum=0, maximum=3600) or None)
        target = next(slot for slot in SLOTS if slot != session.editing)
        points: list[LossPoint] = []
        for item in self.h.backend.heal(session.spec, recipe, step, progress=reporter(progress),
                                        owner=_owner(request)):
            if not isinstance(item, LossPoint):
                break
            points.append(item)
            yield (plots.heal_figure(points, step.short()), text.heal_progress(points, session.editing, target),
                   *[gr.update()] * NO_CHANGE)
        session = session.with_cut(item.recipe, target)
        cut_outputs = self.h._cut_outputs(session)
        status = text.heal_done(item.record, session.editing, target)
        yield plots.heal_figure(points, step.short()), status + " Measuring held-out perplexity…", *cut_outputs, \
            gr.update(), gr.update()
        found = self.h.backend.perplexity(session.spec, session.variants(), seq_lens=(PPL_SEQ_LEN,), bos=(False,),
                                          max_windows=PPL_WINDOWS, progress=reporter(progress), owner=_owner(request))
        session = session.with_results(found)
        table, figure, session = self.h._results_outputs(session)
        yield (plots.heal_figure(points, step.short()), status + " " + text.heal_perplexity(found, PPL_WINDOWS, PPL_SEQ_LEN),
               *cut_outputs[:-1], session, table, figure)
