"""The "Analyze & cut" tab: the edited slot, the layer range, the heatmap, the presets (N layers, which, what to
remove), stability, the named cuts, the per-layer views, the export, and the rank search and healing below."""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from evaluation.serving import GGUF_TYPES, gguf_quantizer

from prune.depth.selection import SELECTIONS

from ui import help_text
from ui.number_input import NumberInput, SliderInput
from ui.page.cut_view import RankMap
from ui.page.events import DEVICE, LIGHT, by_name, gpu
from ui.page.experts import ExpertsBox
from ui.page.heal import HealBox
from ui.page.search import SearchBox
from ui.page.share import ShareBox
from ui.plot_view import PlotView
from ui.range_control import LayerRange
from ui.session import SLOTS
from ui.slot_text import NO_GGUF

HEATMAP_HEIGHT = 320  # with the header, the range and the tab strip: one 1280×720 screen
GGUF_CHOICES = [(NO_GGUF, NO_GGUF), *((f"{t} ({gguf_quantizer(t)})", t) for t in GGUF_TYPES)]  # "Q4_K_M (llama.cpp)"


@dataclass
class Export:
    slot: gr.Radio  # which model: follows the edited slot
    folder: gr.Textbox
    gguf: gr.Dropdown  # a GGUF type, to add the model as one .gguf (llama.cpp, Ollama); "none"
    button: gr.Button
    status: gr.Markdown
    files: gr.File  # the zip, and the .gguf beside it when one was written


@dataclass
class CutTab:
    slot: gr.Radio
    clear_btn: gr.Button
    patch_btn: gr.Button  # the edited slot's cut patched by ReplaceMe into the other slot (ui/page/heal.py)
    layer_range: LayerRange
    feedback_md: gr.Markdown  # the edited slot's numbers against the original
    convention: gr.Markdown  # how a block's indices read
    heatmap: PlotView
    block_size: SliderInput
    selection: gr.Radio
    remove: gr.Radio
    best_btn: gr.Button
    resamples: NumberInput
    stability_btn: gr.Button
    stability_md: gr.Markdown
    named: gr.Radio
    bars: PlotView
    greedy: PlotView
    rank_map: RankMap
    experts: ExpertsBox  # a mixture of experts' expert heatmap
    export: Export
    search: SearchBox
    heal: HealBox
    share: ShareBox

    @classmethod
    def layout(cls, context) -> CutTab:
        with gr.Tab("Analyze & cut", id="cut"):
            with gr.Row(elem_id="range-row"):
                with gr.Column(scale=0, min_width=290):
                    slot = gr.Radio([(f"Cut {s}", s) for s in SLOTS], value=SLOTS[0], elem_id="slot",
                                    label="You are editing", container=False)
                    with gr.Row():  # side by side: the first screen keeps its height
                        clear_btn = gr.Button("Clear this cut", size="sm", elem_id="clear-cut", min_width=90)
                        patch_btn = gr.Button("Patch the cut → B", size="sm", elem_id="patch-btn", min_width=90)
                with gr.Column(scale=6):
                    layer_range = LayerRange(elem_id="layer-range")
            with gr.Row():
                with gr.Column(scale=2):
                    heatmap = PlotView(height=HEATMAP_HEIGHT, elem_id="heatmap")
                    with gr.Accordion("How to read the heatmap and the layer numbers", open=False):
                        gr.Markdown(help_text.HEATMAP_HELP)
                        convention = gr.Markdown(help_text.index_convention(), elem_id="index-convention")
                with gr.Column(scale=1):
                    feedback_md = gr.Markdown(elem_id="cut-feedback")
                    side = _side_column()
            experts = ExpertsBox.layout()
            search = SearchBox.layout(context)
            heal = HealBox.layout()
            share = ShareBox.layout()
        return cls(slot=slot, clear_btn=clear_btn, patch_btn=patch_btn, layer_range=layer_range,
                   feedback_md=feedback_md, convention=convention, heatmap=heatmap, **side, experts=experts,
                   search=search, heal=heal, share=share)


def _side_column() -> dict:
    """The column beside the heatmap: the presets, stability, the named cuts, the per-layer views, the export."""
    with gr.Group():
        block_size = SliderInput(1, 29, value=5, step=1, label="N layers to cut", elem_id="block-size")
        selection = gr.Radio([(words, name) for name, words in SELECTIONS.items()], value="paper",
                             label="Which N layers", elem_id="selection")
        remove = gr.Radio(help_text.REMOVE_CHOICES, value="layers", label="Remove", elem_id="remove")
        best_btn = gr.Button("Select the N layers", elem_id="best-btn")
    with gr.Group():
        with gr.Row(equal_height=True):
            resamples = NumberInput(20, label="Bootstrap resamples", minimum=2, scale=1)
            stability_btn = gr.Button(help_text.STABILITY_BUTTON, scale=2, elem_id="stability-btn")
        stability_md = gr.Markdown(help_text.STABILITY_HELP, elem_id="stability")
    named = gr.Radio([], label="Persistence cuts (zigzag)", visible=False)
    bars = PlotView(height=300, elem_id="layer-bars")
    greedy = PlotView(height=300, elem_id="greedy-curve", visible=False)
    with gr.Column(visible=False) as rank_box:
        rank_map = RankMap(rank_box, PlotView(height=520, elem_id="rank-map"))
    with gr.Accordion("Export A or B (a Hugging Face checkpoint, one .zip)", open=False):
        export = Export(slot=gr.Radio(list(SLOTS), value=SLOTS[0], label="Which model", elem_id="export-slot"),
                        folder=gr.Textbox(label="Name (empty: <model>-minus-<n>-layers)"),
                        gguf=gr.Dropdown(GGUF_CHOICES, value=NO_GGUF, elem_id="export-gguf",
                                         label="Also as GGUF (llama.cpp, Ollama): its type"),
                        button=gr.Button("Export as one .zip", elem_id="export-btn"), status=gr.Markdown(),
                        files=gr.File(label="Download", elem_id="export-file", file_count="multiple"))
    return dict(block_size=block_size, selection=selection, remove=remove, best_btn=best_btn, resamples=resamples,
                stability_btn=stability_btn, stability_md=stability_md, named=named, bars=bars, greedy=greedy,
                rank_map=rank_map, export=export)


def wire(page, handlers) -> dict:
    """The tab's own events (the rank search and healing wire theirs), by api name."""
    tab = page.cut
    cuts, session, cut_outputs = handlers.cut, page.session, page.view.outputs()
    durations = handlers.durations
    slot = tab.slot.input(cuts.edit_slot, [session, tab.slot], cut_outputs, api_name="edit_slot", **LIGHT)
    clear = tab.clear_btn.click(cuts.clear_slot, [session], cut_outputs, api_name="clear_cut", **LIGHT)
    release = tab.layer_range.release(cuts.set_cut, [session, tab.layer_range], cut_outputs, api_name="set_cut",
                                      **LIGHT)
    click = tab.heatmap.point_click(cuts.select_cell, [session], cut_outputs, api_name="select_cell", **LIGHT)
    best = tab.best_btn.click(cuts.best_block, [session, tab.block_size, tab.selection, tab.remove], cut_outputs,
                              api_name="best_block", **LIGHT)
    named = tab.named.input(cuts.named_cut, [session, tab.named], cut_outputs, api_name="named_cut", **LIGHT)
    stability = tab.stability_btn.click(gpu(cuts.stability, durations.stability),
                                        [session, tab.block_size, tab.resamples],
                                        [tab.stability_md], api_name="stability", show_progress_on=[tab.stability_md],
                                        **DEVICE)
    # The stability shown was for the N of its moment: a new N clears it rather than let it pass for this one's.
    tab.block_size.input(cuts.stability_pending, [tab.block_size], [tab.stability_md], api_name="stability_pending",
                         **LIGHT)
    tab.export.button.click(gpu(cuts.export, durations.export),
                            [session, tab.export.folder, tab.export.slot, tab.export.gguf],
                            [tab.export.status, tab.export.files], api_name="export",
                            show_progress_on=[tab.export.status], **DEVICE)
    tab.slot.change(cuts.export_follows, [tab.slot], [tab.export.slot], api_name="export_follows", **LIGHT)
    return by_name(slot, clear, release, click, best, named, stability)
