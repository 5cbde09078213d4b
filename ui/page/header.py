"""The page's header: the top bar (name, status line, the About toggle), the introduction and settings behind
About (access, precision, calibration, method options), the model and method pickers with their buttons, the
method in plain words, the step methods' row and the cut banner."""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

import prune
from prune.core.calibration import BOS_CHOICES
from prune.sparsity.masks import PATTERNS

from ui import catalog, help_text, slot_text, text
from ui.handlers import Context
from ui.inputs import CALIBRATION_SOURCES
from ui.number_input import NumberInput, SliderInput
from ui.page.events import DEVICE, LIGHT, by_name, gpu
from ui.session import Session


@dataclass
class StepControls:
    """The row a step method (width, sparsity, low rank: one step on every layer) shows instead of Analyze."""

    row: gr.Row
    level: SliderInput
    pattern: gr.Radio
    stack: gr.Checkbox  # after the edited slot's cut, or on the original
    versus_btn: gr.Button  # width pruning against a depth cut of the same size


@dataclass
class CalibrationInputs:
    """Where the calibration text comes from, in the order every endpoint that calibrates takes them."""

    source: gr.Dropdown
    detail: gr.Textbox
    upload: gr.File
    samples: NumberInput
    seq_len: NumberInput
    bos: gr.Dropdown

    def inputs(self) -> list:
        return [self.source, self.detail, self.upload, self.samples, self.seq_len, self.bos]


@dataclass
class Header:
    model: gr.Dropdown
    method: gr.Dropdown
    load_btn: gr.Button
    analyze_btn: gr.Button
    build_btn: gr.Button
    stop_btn: gr.Button
    steps: StepControls
    token: gr.Textbox
    dtype: gr.Dropdown
    trust: gr.Checkbox
    calibration: CalibrationInputs
    options: gr.Textbox
    method_about: gr.Markdown
    model_md: gr.Markdown
    analysis_md: gr.Markdown
    memory_md: gr.Markdown
    banner: gr.Markdown

    @classmethod
    def layout(cls, context: Context) -> Header:
        """One screen at 1280×720: a one-line top bar (name, model, analysis, memory, the About toggle), the
        pickers, the method in plain words, the banner; the introduction and settings behind About."""
        first = next(iter(prune.METHODS.values()))
        with gr.Row(equal_height=True, elem_id="topbar"):
            gr.Markdown(f"**{help_text.NAME}**", elem_id="title", scale=0, min_width=100)
            status = dict(model_md=gr.Markdown("Loading the embedded model…", elem_id="model-info", scale=3),
                          analysis_md=gr.Markdown("", elem_id="analysis-info", scale=4),
                          memory_md=gr.Markdown(context.server_memory(), elem_id="server-memory", scale=3))
            about_btn = gr.Button("About & settings ▾", size="sm", scale=0, min_width=170, elem_id="about-btn")
        with gr.Column(elem_id="about", elem_classes=["lc-hidden"]):
            gr.Markdown(f"### {help_text.TITLE}\n{help_text.INTRO}")
            with gr.Row():
                access = dict(token=gr.Textbox(label="Hugging Face token (gated models)", type="password", scale=2),
                              dtype=gr.Dropdown(["auto", "float32", "bfloat16", "float16"], value="auto",
                                                label="Precision"),
                              trust=gr.Checkbox(label="Trust remote code", value=False,
                                                visible=not context.policy.shared))
            calibration = _calibration_row(context)
            options = gr.Textbox(text.options_text(first.options), label="Method options (name=value, …)")
        # A client-side toggle: no round trip, and the page below does not move until it is pressed.
        about_btn.click(None, js="() => document.getElementById('about').classList.toggle('lc-hidden')")
        with gr.Row(equal_height=True, elem_id="pickers"):
            pickers = dict(
                model=gr.Dropdown(context.model_choices(), value=context.default_model.name, allow_custom_value=True,
                                  scale=3, label="Model (hub id / folder / .gguf)", elem_id="model"),
                method=gr.Dropdown(catalog.method_choices(), value=first.name, scale=5, elem_id="method",
                                   label="Method (depth: score the blocks, then cut one)"),
                load_btn=gr.Button("Load model", scale=1, min_width=130),
                analyze_btn=gr.Button("Analyze", variant="primary", scale=1, min_width=110, elem_id="analyze"),
                build_btn=gr.Button("Build", variant="primary", scale=1, min_width=110, elem_id="build",
                                    visible=False),
                stop_btn=gr.Button("Stop", variant="stop", scale=0, min_width=80))
        method_about = gr.Markdown(help_text.method_markdown(first), elem_id="method-about")
        steps = _step_row()
        banner = gr.Markdown(slot_text.banner_markdown(Session()), elem_id="cut-banner")
        return cls(**pickers, steps=steps, **access, calibration=calibration, options=options,
                   method_about=method_about, **status, banner=banner)


def _step_row() -> StepControls:
    with gr.Row(equal_height=True, visible=False, elem_id="width-row") as row:
        level = SliderInput(**catalog.level_slider("wanda"), step=1, scale=3, elem_id="level")
        pattern = gr.Radio(list(PATTERNS), value=PATTERNS[0], label="Pattern", scale=2, elem_id="pattern")
        stack = gr.Checkbox(label="Start from this slot's cut (unticked: from the original)", value=False, scale=1,
                            elem_id="stack")
        versus_btn = gr.Button("Width against depth at this size (A: depth, B: width)", scale=2,
                               elem_id="versus-btn", visible=False)
    return StepControls(row, level, pattern, stack, versus_btn)


def _calibration_row(context: Context) -> CalibrationInputs:
    shared, default = context.policy.shared, context.default_calibration
    sources = [s for s in CALIBRATION_SOURCES if not (shared and s == "file")]
    with gr.Row():
        return CalibrationInputs(
            source=gr.Dropdown(sources, value="default",
                               label=f"Calibration source (default: {text.calibration_words(default)})"),
            detail=gr.Textbox(label="Text / hub dataset (name[:config]:split:column)" + ("" if shared else
                                                                                       " / file path"), scale=2),
            upload=gr.File(label="Upload a text file (source: upload)", file_types=["text"], type="filepath",
                           scale=1),
            samples=NumberInput(default.n_samples, label="Samples", minimum=1),
            seq_len=NumberInput(default.seq_len, label="Tokens per sample", minimum=2),
            bos=gr.Dropdown(list(BOS_CHOICES), value="auto", label="Prepend BOS (auto: as the tokenizer)",
                            min_width=120))


def wire(page, handlers) -> dict:
    """The header's events (the page's ``demo.load`` among them), by api name."""
    header = page.header
    picks, steps, view, cut = handlers.pick, handlers.steps, page.view, page.cut
    cut_outputs = view.outputs()
    load_outputs = [header.model_md, cut.block_size, *cut_outputs, page.generate.kind_note, page.generate.body,
                    cut.convention, cut.stability_md]
    cal = header.calibration
    analyze_inputs = [page.session, header.method, header.options, cal.source, cal.detail, cal.upload, cal.samples,
                      cal.seq_len, cut.block_size, cut.selection, cal.bos, cut.remove]
    analyze_outputs = [*cut_outputs, header.analysis_md]
    build_outputs = [*analyze_outputs, *cut.rank_map.outputs()]
    step = header.steps

    header.method.change(picks.method_info, header.method,
                         [header.method_about, header.options, header.analyze_btn, header.build_btn, step.row,
                          step.level, step.pattern, step.versus_btn], api_name="method_info", queue=False)
    durations = handlers.durations
    load = header.load_btn.click(gpu(picks.load_model, durations.load),
                                 [page.session, header.model, header.token, header.trust, header.dtype],
                                 [*load_outputs, header.analysis_md],
                                 api_name="load_model", show_progress_on=[header.model_md], **DEVICE)
    loaded = load.success(gpu(picks.analyze, durations.analyze), analyze_inputs, analyze_outputs,
                          api_name="analyze_loaded", show_progress_on=[view.heatmap], **DEVICE)
    load.failure(picks.model_back, [page.session], [header.model, header.model_md], api_name="model_back",
                 queue=False, show_progress="minimal")  # the load's one message is its error; the picker goes back
    build = header.build_btn.click(gpu(steps.build, durations.build),
                                   [page.session, header.method, step.level, step.pattern, step.stack, *cal.inputs()],
                                   build_outputs, api_name="build", show_progress_on=[view.banner], **DEVICE)
    versus = step.versus_btn.click(gpu(steps.width_vs_depth, durations.build),
                                   [page.session, step.level, cut.selection, *cal.inputs(), header.method],
                                   build_outputs, api_name="width_vs_depth", show_progress_on=[view.banner], **DEVICE)
    analyze = header.analyze_btn.click(gpu(picks.analyze, durations.analyze), analyze_inputs, analyze_outputs,
                                       api_name="analyze", show_progress_on=[view.heatmap], **DEVICE)
    # A new page's first screen was computed at start-up: it shows at once, beside any visitor's device job (else
    # the page-load job holds the device lock inside the backend, as every job does)
    startup = page.demo.load(picks.opening, [page.session, header.method],
                             [header.model, *load_outputs, header.analysis_md], api_name="startup",
                             show_progress_on=[view.heatmap], concurrency_limit=None)
    versus.success(steps.cut_size, [page.session], [cut.block_size], api_name="cut_size", **LIGHT)  # A's N layers
    return by_name(load, loaded, build, versus, analyze, startup)
