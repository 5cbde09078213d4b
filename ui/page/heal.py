"""Healing in the page: the edited slot's model retrained briefly into the other slot, with a live loss curve,
then WikiText-2 test perplexity (never trained on) of all three columns (see :meth:`Backend.heal`)."""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from evaluation.serving.healing import LossPoint
from prune.core.errors import InvalidInput
from prune.healing.step import LABELS as HEAL_LABELS, Heal

from ui import explain_plots, inputs, plots, text
from ui.handlers import Context, need_model, owner, reporter, user_errors
from ui.number_input import NumberInput
from ui.page.events import DEVICE, by_name, gpu
from ui.plot_view import PlotView
from ui.session import Session

PPL_SEQ_LEN, PPL_WINDOWS = 256, 32  # the held-out check after healing: 8,192 tokens of WikiText-2 test


def heal_limits(steps, budget_s) -> tuple[int | None, float | None]:
    """Healing's steps and time budget (None: the method's default, no budget), checked once: the job and its
    estimate read them alike."""
    return (inputs.whole_number(steps, "Healing steps", minimum=0, maximum=10_000) or None,
            inputs.real_number(budget_s, "The time budget", minimum=0, maximum=3600) or None)


@dataclass
class HealBox:
    method: gr.Radio
    steps: NumberInput
    budget: NumberInput  # seconds
    button: gr.Button
    estimate: gr.Markdown
    status: gr.Markdown
    plot: PlotView  # the loss per step

    @classmethod
    def layout(cls) -> HealBox:
        with gr.Accordion("Heal the edited slot's model into the other slot (LoRA, or its last layers)", open=False,
                          elem_id="heal-box"):
            gr.Markdown(text.heal_help())
            with gr.Row(equal_height=True):
                settings = dict(
                    method=gr.Radio([(label, name) for name, label in HEAL_LABELS.items()], value="lora",
                                    label="Method", elem_id="heal-method", scale=2),
                    steps=NumberInput(0, label="Steps (0: the method's default)", minimum=0, elem_id="heal-steps"),
                    budget=NumberInput(0, label="Time budget, s (0: none)", minimum=0, elem_id="heal-budget"),
                    button=gr.Button("Heal", variant="primary", elem_id="heal-btn", scale=0, min_width=240))
            estimate = gr.Markdown(elem_id="heal-estimate")
            status = gr.Markdown(elem_id="heal-status")
            plot = PlotView(plots.empty_figure("Heal to see the loss per step"), height=380, elem_id="heal-plot")
        return cls(**settings, estimate=estimate, status=status, plot=plot)


class HealHandlers:
    """The heal event: the loss curve and status while training, then the view, then the perplexity results."""

    def __init__(self, context: Context, page):
        self.context = context
        self.box, self.view, self.results = page.cut.heal, page.view, page.benchmarks.results

    @user_errors
    def heal(self, session: Session, method: str, steps, budget_s, request: gr.Request = None,
             progress=gr.Progress()):
        """Heal the edited slot's model into the other slot, drawing each step's loss; then perplexity on text
        never trained on for the original, the unhealed and the healed model."""
        need_model(session)
        recipe = session.cut()
        if recipe is None:
            raise InvalidInput(f"Choose a cut for {session.editing} first: healing retrains a compressed model.")
        if recipe.last("heal") is not None:
            raise InvalidInput(f"{session.editing} is already healed: heal the model it was healed from.")
        step = Heal.of(method, *heal_limits(steps, budget_s))
        target = session.other
        backend, box = self.context.backend, self.box
        points: list[LossPoint] = []

        def curve():  # the loss so far
            return explain_plots.heal_figure(points, step.short())

        for item in backend.heal(session.spec, recipe, step, progress=reporter(progress), owner=owner(request)):
            if not isinstance(item, LossPoint):
                break
            points.append(item)
            yield {box.plot: curve(), box.status: text.heal_progress(points, session.editing, target)}
        replaced = session.cut(target)
        session = session.with_cut(item.recipe, target)
        shown = self.view.show(session)
        status = text.heal_done(item.record, session.editing, target, replaced)
        yield {box.plot: curve(), box.status: status + " Measuring held-out perplexity…", **shown}
        found = backend.perplexity(session.spec, session.variants(), seq_lens=(PPL_SEQ_LEN,), bos=(False,),
                                   max_windows=PPL_WINDOWS, progress=reporter(progress), owner=owner(request))
        session = session.with_results(found)
        yield {box.plot: curve(),
               box.status: status + " " + text.heal_perplexity(found, PPL_WINDOWS, PPL_SEQ_LEN),
               **shown, self.view.session: session, **self.results.show(session)}


def wire(page, handlers) -> dict:
    box = page.cut.heal
    heal = box.button.click(gpu(handlers.heal.heal), [page.session, box.method, box.steps, box.budget],
                            [box.plot, box.status, *page.view.outputs(), *page.benchmarks.results.outputs()],
                            api_name="heal", show_progress_on=[box.status], **DEVICE)
    return by_name(heal)
