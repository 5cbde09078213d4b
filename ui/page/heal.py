"""Repairs in the page: the edited slot's model healed briefly into the other slot (on the text or distilled from the
original), with a live loss curve, or its cut patched by a linear map (no training; also one click beside the range),
then WikiText-2 test perplexity (never trained on) of all three columns (see
:meth:`evaluation.serving.training.Training.heal`)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import gradio as gr

from evaluation.serving import LossPoint
from prune.core.errors import InvalidInput, LayerCutError
from prune.healing.step import LABELS as HEAL_LABELS, Heal
from prune.patch.step import CALIBRATION as PATCH_CALIBRATION, LABELS as PATCH_LABELS, Patch

from ui import explain_plots, help_text, inputs, plots, repair_text
from ui.handlers import Context, need_model, owner, reporter, user_errors
from ui.number_input import NumberInput
from ui.page.events import DEVICE, by_name, gpu
from ui.plot_view import PlotView
from ui.session import Session

PPL_SEQ_LEN, PPL_WINDOWS = 256, 32  # the held-out check after healing: 8,192 tokens of WikiText-2 test
PATCH = "patch-"  # the method radio's patch entries: "patch-lstsq", "patch-cosine"
METHODS = {**HEAL_LABELS, **{PATCH + name: label for name, label in PATCH_LABELS.items()}}
# The loss a heal trains on: the text's next-token loss, or distillation from the original (prune.healing.distill)
LOSSES = {"task": ("The text's next-token loss", {}),
          "kd": ("KD: forward KL to the original (Minitron)", {"teacher": "forward_kl"}),
          "kd_mix": ("KD and the next-token loss, half each", {"teacher": "forward_kl", "kd_ratio": 0.5}),
          "rkl": ("Reverse KL to the original (token-level MiniLLM)", {"teacher": "reverse_kl"})}


def heal_limits(steps, budget_s) -> tuple[int | None, float | None]:
    """Healing's steps and time budget (None: the method's default, no budget), checked once: the job and its
    estimate read them alike."""
    return (inputs.whole_number(steps, "Healing steps", minimum=0, maximum=10_000) or None,
            inputs.real_number(budget_s, "The time budget", minimum=0, maximum=3600) or None)


def heal_step(method: str, loss: str, temperature, steps, budget_s) -> Heal:
    """The heal the box's settings ask for (its loss and τ checked here, the rest by :meth:`Heal.of`)."""
    if loss not in LOSSES:
        raise InvalidInput(f"Unknown healing loss {loss!r}. Choose one of: {', '.join(LOSSES)}.")
    distilling = dict(LOSSES[loss][1])
    if distilling:
        distilling["temperature"] = inputs.real_number(temperature, "The temperature", minimum=0.05, maximum=20)
    return Heal.of(method, *heal_limits(steps, budget_s), **distilling)


@dataclass
class HealBox:
    method: gr.Radio
    loss: gr.Radio  # what a heal trains on (a patch fits its map instead)
    temperature: NumberInput
    steps: NumberInput
    budget: NumberInput  # seconds
    button: gr.Button
    estimate: gr.Markdown
    status: gr.Markdown
    plot: PlotView  # the loss per step

    @classmethod
    def layout(cls) -> HealBox:
        with gr.Accordion("Repair the edited slot's model into the other slot: heal it (LoRA or its last layers, on "
                          "the text or distilled from the original), or patch its cut", open=False, elem_id="heal-box"):
            gr.Markdown(help_text.heal_help())
            settings = dict(method=gr.Radio([(label, name) for name, label in METHODS.items()], value="lora",
                                            label="Method", elem_id="heal-method"))
            with gr.Row(equal_height=True):
                settings.update(
                    loss=gr.Radio([(label, name) for name, (label, _) in LOSSES.items()], value="task",
                                  label="Healing loss (LoRA and last layers)", elem_id="heal-loss", scale=3),
                    temperature=NumberInput(1, label="Temperature τ (with a teacher)", minimum=0.05,
                                            elem_id="heal-temperature"),
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
        self.patch_status = page.header.analysis_md  # the status line Build reports in

    @user_errors
    def heal(self, session: Session, method: str, loss: str, temperature, steps, budget_s,
             request: gr.Request = None, progress=gr.Progress()):
        """Heal the edited slot's model into the other slot, drawing each step's loss (or patch its cut); then
        perplexity on text never trained on for the original, the unrepaired and the repaired model."""
        need_model(session)
        if method not in METHODS:
            raise InvalidInput(f"Unknown repair {method!r}. Choose one of: {', '.join(METHODS)}.")
        recipe = session.cut()
        if recipe is None:
            raise InvalidInput(f"Choose a cut for {session.editing} first: a repair follows a compression.")
        if method.startswith(PATCH):
            yield from self._patch(session, recipe, method.removeprefix(PATCH), self.box.status, request, progress)
            return
        if recipe.last("heal") is not None:
            raise InvalidInput(f"{session.editing} is already healed: heal the model it was healed from.")
        step = heal_step(method, loss, temperature, steps, budget_s)
        target = session.other
        backend, box = self.context.backend, self.box
        points: list[LossPoint] = []

        def curve():  # the loss so far
            return explain_plots.heal_figure(points, step.short(), repair_text.heal_objective(step.option))

        for item in backend.training.heal(session.spec, recipe, step, progress=reporter(progress),
                                          owner=owner(request)):
            if not isinstance(item, LossPoint):
                break
            points.append(item)
            yield {box.plot: curve(), box.status: repair_text.heal_progress(points, session.editing, target)}
        replaced = session.cut(target)
        session = session.with_cut(item.recipe, target)
        shown = self.view.show(session)
        status = repair_text.heal_done(item.record, session.editing, target, replaced)
        yield {box.plot: curve(), box.status: status + " Measuring held-out perplexity…", **shown}
        yield self._measured(session, {box.plot: curve()}, box.status, status, shown, request, progress)

    @user_errors
    def patch(self, session: Session, request: gr.Request = None, progress=gr.Progress()):
        """One click beside the range: the edited slot's cut patched by least squares into the other slot."""
        need_model(session)
        recipe = session.cut()
        if recipe is None or recipe.steps[-1].kind != Patch.after:
            raise InvalidInput(f"{session.editing} holds no depth cut to patch: select layers to cut first.")
        yield from self._patch(session, recipe, "lstsq", self.patch_status, request, progress, line=True)

    def _patch(self, session: Session, recipe, method: str, status_md, request, progress, line: bool = False):
        """``recipe`` followed by the linear patch, into the other slot; then the three columns' perplexity. ``line``:
        the status is the one-line status bar (its numbers first)."""
        step = Patch.of(method, replace(self.context.default_calibration, **PATCH_CALIBRATION))
        target = session.other
        yield {status_md: repair_text.patch_started(step, session.editing, target)}
        try:
            done = self.context.backend.training.patch(session.spec, recipe, step, progress=reporter(progress),
                                                       owner=owner(request))
        except LayerCutError as err:  # the status says why, not "Patching…" left behind; the error shows too
            yield {status_md: repair_text.patch_refused(session.editing, err)}
            raise
        replaced = session.cut(target)
        session = session.with_cut(done.recipe, target)
        shown = self.view.show(session)
        status = repair_text.patch_done(done.record, session.editing, target, replaced)
        yield {status_md: status + " Measuring held-out perplexity…", **shown}
        say = (lambda found: repair_text.patch_line(done.record, found, session.editing, target)) if line else None
        yield self._measured(session, {}, status_md, status, shown, request, progress, say)

    def _measured(self, session: Session, extra: dict, status_md, status: str, shown: dict, request, progress,
                  say=None) -> dict:
        """The three columns' WikiText-2 test perplexity after a repair, into the status (``say(found)``, else after
        ``status``) and the results."""
        found = self.context.backend.measure.perplexity(session.spec, session.variants(), seq_lens=(PPL_SEQ_LEN,),
                                                        bos=(False,), max_windows=PPL_WINDOWS,
                                                        progress=reporter(progress), owner=owner(request))
        session = session.with_results(found)
        said = say(found) if say else status + " " + repair_text.heal_perplexity(found, PPL_WINDOWS, PPL_SEQ_LEN)
        return {**extra, status_md: said, **shown, self.view.session: session, **self.results.show(session)}


def wire(page, handlers) -> dict:
    box, results = page.cut.heal, page.benchmarks.results.outputs()
    heal = box.button.click(gpu(handlers.heal.heal, handlers.durations.heal),
                            [page.session, box.method, box.loss, box.temperature, box.steps, box.budget],
                            [box.plot, box.status, *page.view.outputs(), *results],
                            api_name="heal", show_progress_on=[box.status], **DEVICE)
    status = page.header.analysis_md
    patch = page.cut.patch_btn.click(gpu(handlers.heal.patch, handlers.durations.patch), [page.session],
                                     [status, *page.view.outputs(), *results], api_name="patch",
                                     show_progress_on=[status], **DEVICE)
    return by_name(heal, patch)
