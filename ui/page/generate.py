"""The "Generate" tab: every compared model's answer to one prompt, streamed side by side; then where each
compressed answer leaves the original's, and the logit lens (see :class:`evaluation.serving.explain.Explain`)."""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from ui import explain_plots, help_text, inputs, plots, text
from ui.handlers import Context, need_model, owner, reporter, user_errors
from ui.number_input import NumberInput, SliderInput
from ui.page.events import DEVICE, by_name, gpu
from ui.palette import HIGHLIGHT, ORANGE, TEXT_HEX
from ui.page.stale import Measured
from ui.plot_view import PlotView
from ui.session import SLOTS, Session

COLUMNS = ("original", *SLOTS)
# The marked answer: its title as a block's label, the text from where it leaves the original's on a light orange,
# underlined in orange (seen without colour too), after a ▶; the legend beneath it in the page's smaller type.
_MARKED_CSS = f"""
.lc-title {{ display: inline-block; margin-bottom: 8px; padding: var(--block-label-padding);
             border-radius: var(--block-label-radius); background: var(--block-label-background-fill);
             color: var(--block-label-text-color); font-size: var(--block-label-text-size); font-weight: 600; }}
.lc-answer {{ white-space: pre-wrap; font-size: 1.05rem; line-height: 1.5; padding: 8px 10px;
              border: 1px solid var(--border-color-primary); border-radius: var(--radius-md); }}
mark.lc-left {{ background: {HIGHLIGHT}; color: {TEXT_HEX}; border-bottom: 3px solid {ORANGE}; padding: 0 2px;
                -webkit-box-decoration-break: clone; box-decoration-break: clone; }}
.lc-legend {{ font-size: 0.95rem; margin: 6px 2px 0; color: var(--body-text-color); }}
"""
LENS_POSITIONS = 12  # the prompt's last positions the logit lens shows (readable on a projector)


def max_new(value) -> int:
    """The answers' length, checked once: generation, divergence and the estimate read it alike."""
    return inputs.whole_number(value, "Max new tokens", minimum=1, maximum=2048)


@dataclass
class Column:
    """One model's answer (streamed as text; a compressed one's then shown marked where it leaves the original's)
    and its speed."""

    answer: gr.Textbox
    marked: gr.HTML | None  # None for the original
    stats: gr.Markdown


@dataclass
class GenerateTab:
    prompt: gr.Textbox
    gen_btn: gr.Button
    gen_stop: gr.Button
    estimate: gr.Markdown  # how long the default job takes here, before it starts
    max_new: SliderInput
    temperature: SliderInput
    top_p: SliderInput
    seed: NumberInput
    measured: Measured  # which models the answers are from, or that they are out of date
    columns: dict[str, Column]  # "original", "A", "B"
    answers: gr.State  # the last generation's token ids per column
    divergence_md: gr.Markdown
    divergence_plot: PlotView
    lens_btn: gr.Button
    lens_original: PlotView
    lens_cut: PlotView
    kind_note: gr.Markdown  # for a model that generates nothing here (an encoder), said instead of the tab's controls
    body: gr.Column  # the tab's controls and answers, hidden for such a model

    @classmethod
    def layout(cls) -> GenerateTab:
        with gr.Tab("Generate", id="generate"):
            kind_note = gr.Markdown(visible=False, elem_id="generate-kind-note")  # instead of the rest, when shown
            with gr.Column(elem_id="generate-body") as body:
                with gr.Row(equal_height=True):
                    prompt = gr.Textbox(help_text.EXAMPLE_PROMPTS[0], label="Prompt", lines=2, scale=4,
                                        elem_id="prompt")
                    with gr.Column(scale=1, min_width=160):
                        gen_btn = gr.Button("Generate", variant="primary", elem_id="generate-btn")
                        gen_stop = gr.Button("Stop", variant="stop", size="sm")
                        estimate = gr.Markdown(elem_id="generate-estimate")
                gr.Examples([[p] for p in help_text.EXAMPLE_PROMPTS], inputs=[prompt], label="Example prompts")
                with gr.Accordion("Sampling", open=False):
                    with gr.Row():
                        sampling = dict(max_new=SliderInput(8, 512, value=32, step=8, label="Max new tokens"),
                                        temperature=SliderInput(0, 2, value=0, step=0.05,
                                                                label="Temperature (0 = greedy)"),
                                        top_p=SliderInput(0.05, 1, value=1, step=0.05, label="Top-p"),
                                        seed=NumberInput(0, label="Seed"))
                measured = Measured.layout("generate-measured")
                with gr.Row(equal_height=True):
                    columns = {label: _column(label) for label in COLUMNS}
                answers = gr.State({})
                divergence_md = gr.Markdown(elem_id="divergence")
                divergence_plot = PlotView(plots.empty_figure("Generate with a cut to see where the answers part"),
                                           height=300, elem_id="divergence-strip")
                with gr.Accordion("Logit lens: the top next token each layer already predicts, for this prompt",
                                  open=False, elem_id="lens-box"):
                    gr.Markdown(help_text.LOGIT_LENS_HELP)
                    lens_btn = gr.Button("Show the logit lens", elem_id="lens-btn")
                    with gr.Row():
                        lens_original = PlotView(plots.empty_figure("The original's lens"), height=760,
                                                 elem_id="lens-original")
                        lens_cut = PlotView(plots.empty_figure("The edited slot's lens"), height=760,
                                            elem_id="lens-cut")
        return cls(prompt=prompt, gen_btn=gen_btn, gen_stop=gen_stop, estimate=estimate, **sampling, measured=measured,
                   columns=columns, answers=answers, divergence_md=divergence_md, divergence_plot=divergence_plot,
                   lens_btn=lens_btn, lens_original=lens_original, lens_cut=lens_cut, kind_note=kind_note, body=body)

    def answer_outputs(self) -> list:
        """The generation's outputs: every column's answer and stats, the answers' token ids, the marked
        answers (hidden while a new answer streams), then the note naming the models."""
        return [*(part for column in self.columns.values() for part in (column.answer, column.stats)), self.answers,
                *(self.columns[slot].marked for slot in SLOTS), *self.measured.outputs()]

    def marked_outputs(self) -> list:
        """The compressed columns' plain and marked answers (one of the two shows)."""
        return [part for slot in SLOTS for part in (self.columns[slot].answer, self.columns[slot].marked)]


def _column(label: str) -> Column:
    title = "Original model" if label == "original" else f"{label}: cut"
    with gr.Column(min_width=220):
        answer = gr.Textbox(label=title, lines=9, max_lines=20, interactive=False, elem_id=f"out-{label}",
                            elem_classes="gen-out")
        marked = None if label == "original" else gr.HTML(
            container=True, visible=False, max_height=560, elem_id=f"marked-{label}", css_template=_MARKED_CSS,
            js_on_load=None)
        return Column(answer, marked, gr.Markdown(elem_id=f"stats-{label}"))


class GenerateHandlers:
    """Generation and what explains it: the answers, where they part, the logit lens."""

    def __init__(self, context: Context, page):
        self.context, self.tab = context, page.generate

    @user_errors
    def generate(self, session: Session, prompt: str, max_new_tokens, temperature, top_p, seed,
                 request: gr.Request = None, progress=gr.Progress()):
        """Stream every compared model's answer to the same prompt, side by side; last, the answers' token ids."""
        need_model(session)
        prompt = inputs.prompt(prompt, self.context.policy)
        settings = dict(max_new_tokens=max_new(max_new_tokens),
                        temperature=inputs.real_number(temperature, "Temperature", minimum=0, maximum=5),
                        top_p=inputs.real_number(top_p, "Top-p", minimum=0, maximum=1),
                        seed=inputs.whole_number(seed, "The seed", minimum=0, maximum=inputs.LARGEST_SEED))
        variants = session.variants()
        for state in self.context.backend.measure.generate(session.spec, variants, prompt, progress=reporter(progress),
                                                           owner=owner(request), **settings):
            shown = {}
            for label, column in self.tab.columns.items():
                side = state.get(label)
                empty = f"(no {label} cut: choose one under Analyze & cut → Cut {label})"
                shown[column.answer] = gr.update(value=side["text"] if side else empty,
                                                 label=text.column_label(label, variants), visible=True)
                shown[column.stats] = text.generation_stats(side)
                if column.marked is not None:  # the last answer's mark goes; this one's comes after it
                    shown[column.marked] = gr.update(visible=False)
            shown[self.tab.answers] = {label: side["token_ids"] for label, side in state.items()}  # for explaining
            yield {**shown, **self.tab.measured.fresh(session)}

    @user_errors
    def divergence(self, session: Session, prompt: str, max_new_tokens, answers: dict | None,
                   request: gr.Request = None, progress=gr.Progress()):
        """After a generation: each compressed column marked where its answer leaves the original's greedy one,
        and, teacher-forced on that answer, each column's per-token KL strip and top-1 agreement."""
        need_model(session)
        tab, variants = self.tab, session.variants()
        if not variants or not answers:
            return {tab.divergence_plot: plots.empty_figure("Generate with a cut to see where the answers part"),
                    tab.divergence_md: ""}
        report = self.context.backend.explain.divergence(
            session.spec, variants, inputs.prompt(prompt, self.context.policy),
            max_new_tokens=max_new(max_new_tokens),
            answers={label: ids for label, ids in answers.items() if label in variants},
            progress=reporter(progress), owner=owner(request))
        shown = {tab.divergence_plot: explain_plots.divergence_figure(report, text.model_names(variants)),
                 tab.divergence_md: text.divergence_markdown(report)}
        for slot in SLOTS:
            column = report.columns.get(slot)
            if column is not None and column.first is not None:  # the marked answer in the plain one's place
                shown[tab.columns[slot].answer] = gr.update(visible=False)
                shown[tab.columns[slot].marked] = gr.update(
                    value=text.divergence_html(slot, variants, column.parts, column.first), visible=True)
        return shown

    @user_errors
    def logit_lens(self, session: Session, prompt: str, request: gr.Request = None, progress=gr.Progress()):
        """The logit lens of the original (the edited slot's removed layers marked) and of the edited slot's model."""
        need_model(session)
        recipe = session.cut()
        variants = {session.editing: recipe} if recipe is not None else {}
        lenses = self.context.backend.explain.logit_lens(session.spec, variants, inputs.prompt(prompt,
                                                                                               self.context.policy),
                                                 last=LENS_POSITIONS, progress=reporter(progress), owner=owner(request))
        original = explain_plots.logit_lens_figure(lenses["original"],
                                                   "Original: the top next token after each layer")
        if recipe is None:
            beside = plots.empty_figure(f"Choose a cut for {session.editing} to see its lens beside")
        else:
            beside = explain_plots.logit_lens_figure(lenses[session.editing],
                                             f"{session.editing} ({recipe.short()}): the layers it kept")
        return {self.tab.lens_original: original, self.tab.lens_cut: beside}


def wire(page, handlers) -> dict:
    tab = page.generate
    generating, session, durations = handlers.generate, page.session, handlers.durations
    # The streaming text is the progress; "minimal" still shows a waiting visitor its place in the queue.
    generate = gr.on([tab.gen_btn.click, tab.prompt.submit], gpu(generating.generate, durations.generate),
                     [session, tab.prompt, tab.max_new, tab.temperature, tab.top_p, tab.seed], tab.answer_outputs(),
                     api_name="generate", show_progress="minimal", **DEVICE)
    divergence = generate.success(
        gpu(generating.divergence, durations.explain), [session, tab.prompt, tab.max_new, tab.answers],
        [*tab.marked_outputs(), tab.divergence_plot, tab.divergence_md],
        api_name="divergence", show_progress_on=[tab.divergence_md], **DEVICE)
    lens = tab.lens_btn.click(gpu(generating.logit_lens, durations.explain), [session, tab.prompt],
                              [tab.lens_original, tab.lens_cut], api_name="logit_lens", **DEVICE)
    return by_name(generate, divergence, lens)
