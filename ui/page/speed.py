"""The "Speed & memory" tab: every compared model's generation speed at a few batch sizes, and its memory.

The defaults are small (one batch size, one repeat, a short prompt), so that they finish quickly on a CPU
(``benchmarks/default_jobs.py`` times them); each button shows an estimate beside it (``ui.page.estimates``)."""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from evaluation.serving import ENGINE_NOTE, INT4_TYPES, LLAMA_CPP, llama_check
from prune.core.errors import InvalidInput

from ui import help_text, inputs, job_text, plots, slot_text, text
from ui.handlers import Context, main_unit, need_model, owner, reporter, user_errors
from ui.number_input import NumberInput
from ui.page.events import DEVICE, by_name, gpu
from ui.page.theme import EMPTY_TABLE
from ui.plot_view import PlotView
from ui.page.stale import Measured
from ui.tables import comparison_table
from ui.session import Session

MEMORY_NEW_TOKENS = 16  # tokens each model generates while its peak memory is watched


def speed_settings(batch_sizes: list, prompt_len, new_tokens, repeats) -> dict:
    """The speed job's settings, checked once: the job and its estimate read them alike."""
    if not batch_sizes:
        raise InvalidInput("Choose at least one batch size.")
    return dict(batch_sizes=tuple(sorted({inputs.whole_number(b, "A batch size", minimum=1, maximum=256)
                                          for b in batch_sizes})),
                prompt_len=inputs.whole_number(prompt_len, "Prompt tokens", minimum=1, maximum=8192),
                new_tokens=inputs.whole_number(new_tokens, "New tokens", minimum=2, maximum=1024),
                repeats=inputs.whole_number(repeats, "Repeats", minimum=1, maximum=50))


@dataclass
class SpeedTab:
    batches: gr.CheckboxGroup
    prompt_len: NumberInput
    new_tokens: NumberInput
    repeats: NumberInput
    compiled: gr.Checkbox  # also the compiled mode's rows (evaluation.measure.compiled); off: eager only
    llama_cpp: gr.Checkbox  # also each column's batch-1 rows in llama.cpp (evaluation.engines.llama_cpp)
    int4_type: gr.Dropdown  # the GGUF type an int4 column runs in there
    speed_btn: gr.Button
    memory_btn: gr.Button
    speed_stop: gr.Button
    speed_estimate: gr.Markdown
    memory_estimate: gr.Markdown
    speed_measured: Measured  # which models the speed numbers are for, or that they are out of date
    speed_table: gr.Dataframe
    speed_note: gr.Markdown
    speedup_plot: PlotView
    throughput_plot: PlotView
    memory_measured: Measured
    memory_table: gr.Dataframe
    memory_note: gr.Markdown
    memory_plot: PlotView

    @classmethod
    def layout(cls) -> SpeedTab:
        with gr.Tab("Speed & memory", id="speed"):
            gr.Markdown(help_text.SPEED_HELP)
            with gr.Row(equal_height=True):
                settings = dict(
                    batches=gr.CheckboxGroup(["1", "4", "8", "16", "32"], value=["1"], label="Batch sizes"),
                    prompt_len=NumberInput(32, label="Prompt tokens", minimum=1),
                    new_tokens=NumberInput(8, label="New tokens", minimum=2, elem_id="new-tokens"),
                    repeats=NumberInput(1, label="Repeats", minimum=1, elem_id="repeats"),
                    compiled=gr.Checkbox(False, label="Also compiled", info=help_text.COMPILED_INFO,
                                         elem_id="speed-compiled"),
                    llama_cpp=gr.Checkbox(False, label=f"Also in {LLAMA_CPP}", info=help_text.LLAMA_CPP_INFO,
                                          elem_id="speed-llama-cpp"),
                    int4_type=gr.Dropdown(list(INT4_TYPES), value=INT4_TYPES[0], label="int4 as",
                                          info=f"the GGUF type an int4 column runs in {LLAMA_CPP}",
                                          elem_id="speed-int4-type"))
            with gr.Row():
                buttons = dict(speed_btn=gr.Button("Measure speed", variant="primary", elem_id="speed-btn"),
                               memory_btn=gr.Button("Measure memory", variant="primary", elem_id="memory-btn"),
                               speed_stop=gr.Button("Stop", variant="stop", size="sm", scale=0, min_width=100))
            with gr.Row():
                buttons.update(speed_estimate=gr.Markdown(elem_id="speed-estimate"),
                               memory_estimate=gr.Markdown(elem_id="memory-estimate"))
            speed = dict(speed_measured=Measured.layout("speed-measured"),
                         speed_table=gr.Dataframe(EMPTY_TABLE, label="Speed", interactive=False, wrap=True,
                                                  elem_id="speed-table"),
                         speed_note=gr.Markdown(elem_id="speed-note"))
            with gr.Row():
                speed.update(speedup_plot=PlotView(plots.empty_figure("Measure speed to compare"), height=380,
                                                   elem_id="speedup-plot"),
                             throughput_plot=PlotView(plots.empty_figure("Measure speed to compare"), height=380,
                                                      elem_id="throughput-plot"))
            memory = dict(memory_measured=Measured.layout("memory-measured"),
                          memory_table=gr.Dataframe(EMPTY_TABLE, label="Memory", interactive=False, wrap=True,
                                                    elem_id="memory-table"),
                          memory_note=gr.Markdown(elem_id="memory-note"),
                          memory_plot=PlotView(plots.empty_figure("Measure memory to compare"), height=360,
                                               elem_id="memory-plot"))
        return cls(**settings, **buttons, **speed, **memory)


def llama_box(ticked: bool) -> dict:
    """A ticked *Also in llama.cpp* box after this machine's llama.cpp was tried once (per build and machine): off,
    saying why, where it runs no GGUF type here; saying which types it cannot run where some."""
    if not ticked:
        return gr.update()
    runs, why = llama_check()
    if not runs:
        return gr.update(value=False, interactive=False, info=why)
    return gr.update(info=why) if why else gr.update()


class SpeedHandlers:
    def __init__(self, context: Context, page):
        self.context, self.tab = context, page.speed

    @user_errors
    def speed(self, session: Session, batch_sizes: list, prompt_len, new_tokens, repeats, compiled: bool = False,
              llama_cpp: bool = False, int4_type: str = INT4_TYPES[0], request: gr.Request = None,
              progress=gr.Progress()):
        need_model(session)
        settings = speed_settings(batch_sizes, prompt_len, new_tokens, repeats)
        variants = session.variants()
        found = self.context.backend.measure.speed(
            session.spec, variants, batch_sizes=settings["batch_sizes"], prompt_len=settings["prompt_len"],
            new_tokens=(settings["new_tokens"],), repeats=settings["repeats"], compiled=bool(compiled),
            engine=LLAMA_CPP if llama_cpp else None, int4_type=int4_type, progress=reporter(progress),
            owner=owner(request))
        tab, names = self.tab, text.model_names(variants)
        return {tab.speed_table: comparison_table(found, variants),
                tab.speedup_plot: plots.speedup_figure(found, names),
                tab.throughput_plot: plots.comparison_figure(found, group="speed", unit="tokens/s", title="Throughput",
                                                             names=names),
                tab.speed_note: "  \n".join(filter(None, (slot_text.model_notes(found, "sparsity_note"),
                                                          slot_text.model_notes(found, ENGINE_NOTE),
                                                          job_text.beyond_ideal_note(found)))),
                **tab.speed_measured.fresh(session)}

    @user_errors
    def memory(self, session: Session, request: gr.Request = None, progress=gr.Progress()):
        need_model(session)
        variants = session.variants()
        found = self.context.backend.measure.memory(session.spec, variants, new_tokens=MEMORY_NEW_TOKENS,
                                                    progress=reporter(progress), owner=owner(request))
        sizes = [m for m in found if m.unit]  # the parameter count has no unit and another scale
        tab = self.tab
        return {tab.memory_table: comparison_table(found, variants),
                tab.memory_plot: plots.comparison_figure(sizes, unit=main_unit(sizes), title="Memory",
                                                         names=text.model_names(variants)),
                tab.memory_note: slot_text.model_notes(found, "note"), **tab.memory_measured.fresh(session)}


def wire(page, handlers) -> dict:
    tab = page.speed
    speeds, session, durations = handlers.speed, page.session, handlers.durations
    speed = tab.speed_btn.click(gpu(speeds.speed, durations.speed),
                                [session, tab.batches, tab.prompt_len, tab.new_tokens, tab.repeats, tab.compiled,
                                 tab.llama_cpp, tab.int4_type],
                                [tab.speed_table, tab.speedup_plot, tab.throughput_plot, tab.speed_note,
                                 *tab.speed_measured.outputs()],
                                api_name="speed", **DEVICE)
    memory = tab.memory_btn.click(gpu(speeds.memory, durations.memory), [session],
                                  [tab.memory_table, tab.memory_plot, tab.memory_note, *tab.memory_measured.outputs()],
                                  api_name="memory", **DEVICE)
    tab.llama_cpp.input(llama_box, [tab.llama_cpp], [tab.llama_cpp], api_name="speed_llama_check")
    return by_name(speed, memory)
