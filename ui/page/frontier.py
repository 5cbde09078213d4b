"""The frontier in the Benchmarks tab: every family at each size, measured as it goes, plotted against size and
against measured latency; and the best model under a target put into slot A with one click (see
:mod:`evaluation.frontier`)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import gradio as gr

from evaluation.serving import (AXES, check_repair, check_request, check_sizes, check_target, DEFAULT_AXIS,
                                DEFAULT_METHOD, DEFAULT_SIZES, FAMILIES, format_screen, frontier_table, PERPLEXITY,
                                REPAIRS, Screening, target_line)
from prune.core.errors import InvalidInput
from prune.depth.methods import METHODS

from ui import frontier_plots, help_text, inputs, plots, text
from ui.handlers import Context, need_model, owner, reporter, user_errors
from ui.number_input import NumberInput
from ui.page.events import DEVICE, LIGHT, by_name, gpu
from ui.plot_view import PlotView
from ui.session import SLOTS, Session

AXIS_CHOICES = [("bytes as stored", "bytes"), ("parameters not zero (zeros stored densely save nothing)", "params"),
                ("decode ms/token", "ms")]
INTO = SLOTS[0]  # the slot the best model goes into
NO_REPAIR = "none"
MAX_SIZES = 5  # sizes per run from the page (the command line takes any number)


@dataclass
class FrontierBox:
    axis: gr.Radio
    sizes: gr.Textbox
    task: gr.Dropdown
    limit: NumberInput
    windows: NumberInput
    families: gr.CheckboxGroup  # the families tried: each alone, and the structural ones quantized (compounds)
    repair: gr.Dropdown  # none, or a training repair of each structural point before it is quantized
    repair_s: NumberInput  # that repair's seconds a point
    everything: gr.Checkbox  # every candidate measured in full (no screen)
    button: gr.Button
    estimate: gr.Markdown  # the run's seconds at most, before it starts (ui.page.estimates)
    summary: gr.Markdown
    plot: PlotView
    table: gr.Markdown
    target: gr.Textbox
    best_btn: gr.Button
    best_md: gr.Markdown
    shown: gr.State  # (model spec, FrontierResult) of the frontier on show, written by its own job only

    @classmethod
    def layout(cls, limit_words: str) -> FrontierBox:
        with gr.Accordion("Frontier: what should I cut? Every family at each size, and the best under a target",
                          open=False, elem_id="frontier-box"):
            gr.Markdown(help_text.FRONTIER_HELP)
            with gr.Row(equal_height=True):
                settings = dict(
                    axis=gr.Radio(AXIS_CHOICES, value=DEFAULT_AXIS, label="Size by", elem_id="frontier-axis"),
                    sizes=gr.Textbox(", ".join(f"{100 * s:g}" for s in DEFAULT_SIZES),
                                     label="Sizes (% of the original)", elem_id="frontier-sizes"),
                    task=gr.Dropdown(help_text.task_choices(), value="hellaswag", label="Task",
                                     elem_id="frontier-task"),
                    limit=NumberInput(20, label=f"Questions ({limit_words})", minimum=0, elem_id="frontier-limit"),
                    windows=NumberInput(2, label=f"Perplexity windows ({PERPLEXITY.seq_len} tokens)", minimum=1,
                                        elem_id="frontier-windows"),
                    button=gr.Button("Run frontier", variant="primary", elem_id="frontier-btn"))
            with gr.Row(equal_height=True):
                settings.update(
                    families=gr.CheckboxGroup(list(FAMILIES), value=list(FAMILIES), scale=4,
                                              label="Families (each alone; the structural ones with int8 and int4)",
                                              elem_id="frontier-families"),
                    repair=gr.Dropdown([NO_REPAIR, *REPAIRS], value=NO_REPAIR, label="Repair before quantizing",
                                       info="kd: LoRA distilled from the original; lora: on WikiText-2 validation",
                                       elem_id="frontier-repair"),
                    repair_s=NumberInput(120, label="Repair seconds a point", minimum=1, elem_id="frontier-repair-s"),
                    everything=gr.Checkbox(False, label="Measure every candidate in full",
                                           info="off: each is screened on a few perplexity windows first, and only "
                                                "those that could be on the front are measured in full",
                                           elem_id="frontier-everything"))
            settings.update(estimate=gr.Markdown(elem_id="frontier-estimate"))
            summary = gr.Markdown(elem_id="frontier-summary")
            plot = PlotView(plots.empty_figure("Run the frontier to see every family against size"), height=460,
                            elem_id="frontier-plot")
            table = gr.Markdown(elem_id="frontier-table")
            with gr.Row(equal_height=True):
                target = gr.Textbox("bytes=0.8", label="Target: bytes=0.8 (of the original's), bytes=400MiB, ms=20 "
                                    "or params=0.8", scale=2, elem_id="frontier-target")
                best_btn = gr.Button(f"Put the best under it into {INTO}", elem_id="frontier-best-btn", scale=1)
            best_md = gr.Markdown(elem_id="frontier-best")
        return cls(**settings, summary=summary, plot=plot, table=table, target=target, best_btn=best_btn,
                   best_md=best_md, shown=gr.State(None))


class FrontierHandlers:
    """The frontier's run, and the best point put into slot A."""

    def __init__(self, context: Context, page):
        self.context = context
        self.box, self.view = page.benchmarks.frontier, page.view

    @user_errors
    def run(self, session: Session, axis: str, sizes: str, task: str, limit, windows, families=None,
            repair: str = NO_REPAIR, repair_s=120, everything: bool = False, request: gr.Request = None,
            progress=gr.Progress()):
        """Every family's candidate at each size, the table and the figure redrawn as each screen and each point
        arrives (each cached): the screen's early answer first, then the points measured in full (``everything``:
        every candidate, no screen); depth cuts by the analysis on show (else Block Influence); ``families``: those
        tried (None: all); ``repair``: each structural point also trained that many seconds before it is quantized."""
        need_model(session)
        if axis not in AXES:
            raise InvalidInput(f"Size the frontier by {', '.join(AXES)}, not {axis!r}.")
        backend = self.context.backend
        task_request = check_request([task], limit=self.context.policy.limit(limit, "Questions"),
                                     data_dir=backend.models.data_dir)
        method = session.result.method if session.result is not None and session.result.method in METHODS \
            else DEFAULT_METHOD
        chosen = check_sizes(sizes or "")
        if len(chosen) > MAX_SIZES:
            raise InvalidInput(f"Give at most {MAX_SIZES} sizes at once: "
                               "each adds a dozen models to build and measure.")
        box = self.box
        repaired = None if repair in (None, "", NO_REPAIR) else \
            check_repair(repair, inputs.whole_number(repair_s, "Repair seconds", minimum=1, maximum=3600))
        for result in backend.frontier.run(
                session.spec, task_request, axis=axis, sizes=chosen, method=method,
                calibration=session.calibration or self.context.default_calibration,
                ppl_windows=inputs.whole_number(windows, "Perplexity windows", minimum=1, maximum=1000),
                families=FAMILIES if families is None else tuple(families), repair=repaired,
                screen=not everything, progress=reporter(progress), owner=owner(request)):
            if isinstance(result, Screening):  # the early answer: nothing measured in full to put into a slot yet
                yield {box.plot: frontier_plots.screen_figure(result), box.table: format_screen(result),
                       box.summary: result.words(), box.shown: None}
            else:
                yield {box.plot: frontier_plots.frontier_figure(result), box.table: frontier_table(result),
                       box.summary: text.frontier_progress(result), box.shown: (session.spec, result)}

    @user_errors
    def best(self, session: Session, shown, target: str):
        """The frontier's best point under ``target`` (on any axis: every point's size, bytes and latency were
        measured; on bytes and latency never one that gains nothing over the original) into slot A, which the page
        then edits."""
        need_model(session)
        goal = check_target(target)
        if shown is None or shown[0] != session.spec:
            raise InvalidInput("Run the frontier on this model first: the best under a target is one of its points.")
        result = shown[1]
        chosen = result.best_under(goal)
        if chosen is None or chosen.recipe.is_original:
            return {self.box.best_md: target_line(result, goal, chosen)
                    + ("" if chosen is None else " Nothing to put into a slot.")}
        recipe = replace(chosen.recipe, origin=f"frontier: the best under {goal.words()}")
        session = replace(session.with_cut(recipe, INTO), editing=INTO)
        return {self.box.best_md: f"{target_line(result, goal, chosen)} Now in {INTO}: compare or export it.",
                **self.view.show(session)}


def wire(page, handlers) -> dict:
    box = page.benchmarks.frontier
    run = box.button.click(gpu(handlers.frontier.run, handlers.durations.frontier),
                           [page.session, box.axis, box.sizes, box.task, box.limit, box.windows, box.families,
                            box.repair, box.repair_s, box.everything],
                           [box.plot, box.table, box.summary, box.shown], api_name="frontier",
                           show_progress_on=[box.summary], **DEVICE)
    best = box.best_btn.click(handlers.frontier.best, [page.session, box.shown, box.target],
                              [box.best_md, *page.view.outputs()], api_name="frontier_best", **LIGHT)
    return by_name(run, best)
