"""LayerCut's web UI: pick a model and method, see the importance map, drag a cut, compare.

``build_demo()`` lays out the page and wires every event (each with an ``api_name``) to
``ui.handlers``, which call ``evaluation.serving.backend.Backend``; no model code lives here. Each
visitor's comparison (model, analysis, cuts A and B, results) lives in its own ``gr.State``.
Run ``python app.py [--model NAME] [--shared]`` (host/port from GRADIO_SERVER_NAME / _PORT).
"""

from __future__ import annotations

import argparse
import os

import gradio as gr
import pandas as pd

import prune
from evaluation.serving.models import ModelSpec
from evaluation.quality.offline_tasks import SUPPORTED_TASKS, default_data_dir
from evaluation.sweeps.search_splits import WIKITEXT
from prune.core.calibration import BOS_CHOICES
from prune.core.loading import ensure_embedded_model
from prune.lowrank.decomposition import SPACES
from prune.core.paths import cache_root
from prune.depth.selection import SELECTIONS
from prune.sparsity.masks import METHODS as SPARSITY_METHODS, PATTERNS
from ui import catalog, plots, text
from ui.explain_handlers import ExplainHandlers
from ui.handlers import Handlers
from ui.heal_handlers import HealHandlers
from ui.search_handlers import SearchHandlers
from ui.inputs import CALIBRATION_SOURCES, MAX_TEXT_BYTES, Policy
from ui.number_input import NumberInput, SliderInput
from ui.session import SLOTS, Session
from ui.plot_view import PlotView
from ui.range_control import LayerRange

try:  # On a ZeroGPU Space, heavy callbacks borrow a GPU for their duration.
    import spaces

    gpu = spaces.GPU(duration=180)
except ImportError:
    def gpu(fn):
        return fn

# System fonts only: a talk's projector machine is often offline.
THEME = gr.themes.Soft(primary_hue="red", text_size="lg",
                       font=["system-ui", "Segoe UI", "Helvetica", "Arial", "sans-serif"],
                       font_mono=["ui-monospace", "Consolas", "monospace"])
CSS = """
#cut-banner { font-size: 1.25rem; padding: 6px 12px; border-left: 6px solid #e45756;
              background: var(--block-background-fill); }
#title h1 { margin-bottom: 0; }
#index-convention { font-size: 0.95rem; color: var(--body-text-color-subdued); }
.gen-out textarea { font-size: 1.05rem !important; }
"""
EMPTY_TABLE = pd.DataFrame({"Metric": [], "Original": [], "A": [], "B": []})
MEMORY_REFRESH_S = 15  # the server-memory line: what every visitor's jobs do to it
DEVICE = dict(concurrency_id="device", concurrency_limit=1)  # one heavy job at a time; others queue
LIGHT = dict(concurrency_limit=None, show_progress="hidden")
FEEDBACK = dict(concurrency_limit=None, show_progress="minimal")  # beside the device's jobs (one at a time inside)


def launch_options(policy: Policy | None = None) -> dict:
    """What Gradio 6 takes at launch (tests use it too): appearance, the upload limit, and on a personal
    machine the exports folder for downloads (a shared server serves each visitor's from Gradio's cache)."""
    policy = policy or Policy.from_env()
    paths = [] if policy.shared else [str(cache_root() / "exports")]
    return {"theme": THEME, "css": CSS, "allowed_paths": paths, "max_file_size": MAX_TEXT_BYTES}


def build_demo(backend=None, *, policy: Policy | None = None, default_model: ModelSpec | None = None) -> gr.Blocks:
    """The page; ``policy`` says whether this server is shared (default: from the environment)."""
    if backend is None:
        from evaluation.serving.backend import Backend

        data_dir = default_data_dir()
        backend = Backend(data_dir=str(data_dir) if data_dir else None)
    policy = policy or Policy.from_env()
    h = Handlers(backend, policy, default_model)
    searches = SearchHandlers(h)
    explains = ExplainHandlers(h)
    heals = HealHandlers(h)
    methods = list(prune.METHODS.values())
    first = methods[0]
    sources = [s for s in CALIBRATION_SOURCES if not (policy.shared and s == "file")]

    # Downloads copied into Gradio's cache are removed after an hour (checked every 10 minutes).
    with gr.Blocks(title="LayerCut", analytics_enabled=False, delete_cache=(600, 3600)) as demo:
        view = gr.State(Session())
        gr.Markdown(f"# {text.TITLE}\n{text.INTRO}", elem_id="title")

        # ------------------------------------------------------------ 1. pick
        with gr.Row(equal_height=True):
            model = gr.Dropdown(text.KNOWN_MODELS, value=(default_model or ModelSpec()).name, allow_custom_value=True,
                                scale=4, label="Model (or type a hub id / local folder)", elem_id="model")
            method = gr.Dropdown(catalog.method_choices(), value=first.name, scale=4, elem_id="method",
                                 label="Method (depth: score the layers, then cut; width: a step on every layer)")
            load_btn = gr.Button("Load model", scale=1, min_width=120)
            analyze_btn = gr.Button("Analyze", variant="primary", scale=1, min_width=120, elem_id="analyze")
            build_btn = gr.Button("Build", variant="primary", scale=1, min_width=120, elem_id="build",
                                  visible=False)
            stop_btn = gr.Button("Stop", variant="stop", scale=0, min_width=80)
        with gr.Row(equal_height=True, visible=False, elem_id="width-row") as width_row:
            level = SliderInput(**catalog.level_slider("wanda"), step=1, scale=3, elem_id="level")
            pattern = gr.Radio(list(PATTERNS), value=PATTERNS[0], label="Pattern", scale=2, elem_id="pattern")
            stack = gr.Checkbox(label="After the edited slot's cut (else on the original)", value=False, scale=1,
                                elem_id="stack")
            versus_btn = gr.Button("Width against depth at this size (A: depth, B: width)", scale=2,
                                   elem_id="versus-btn", visible=False)
        with gr.Accordion("Advanced: access token, precision, calibration data, method options", open=False):
            with gr.Row():
                token = gr.Textbox(label="Hugging Face token (gated models)", type="password", scale=2)
                dtype = gr.Dropdown(["auto", "float32", "bfloat16", "float16"], value="auto", label="Precision")
                trust = gr.Checkbox(label="Trust remote code", value=False, visible=not policy.shared)
            with gr.Row():
                cal_source = gr.Dropdown(sources, value="default", label="Calibration source (default: "
                                         f"{text.calibration_words(h.default_calibration)})")
                cal_detail = gr.Textbox(label="Text / hub dataset (name[:config]:split:column)"
                                        + ("" if policy.shared else " / file path"), scale=2)
                cal_upload = gr.File(label="Upload a text file (source: upload)", file_types=["text"], type="filepath",
                                     scale=1)
                cal_samples = NumberInput(h.default_calibration.n_samples, label="Samples", minimum=1)
                cal_len = NumberInput(h.default_calibration.seq_len, label="Tokens per sample", minimum=2)
                cal_bos = gr.Dropdown(list(BOS_CHOICES), value="auto", label="Prepend BOS (auto: as the tokenizer)",
                                      min_width=120)
            with gr.Row(equal_height=True):
                options = gr.Textbox(text.options_text(first.options), label="Method options (name=value, …)")
                method_about = gr.Markdown(text.method_markdown(first))
        with gr.Row():
            model_md = gr.Markdown("Loading the embedded model…", elem_id="model-info")
            analysis_md = gr.Markdown("", elem_id="analysis-info")
            memory_md = gr.Markdown(h.server_memory(), elem_id="server-memory")
        banner = gr.Markdown(text.banner_markdown(Session()), elem_id="cut-banner")

        with gr.Tabs():
            # -------------------------------------------------- 2-4. see, drag, cut
            with gr.Tab("Analyze & cut", id="cut"):
                with gr.Row(equal_height=True):
                    slot = gr.Radio([(f"Cut {s}", s) for s in SLOTS], value=SLOTS[0], scale=3, elem_id="slot",
                                    label="Which compressed model the range, the heatmap and the presets edit")
                    clear_btn = gr.Button("Clear this cut", scale=1, min_width=140, elem_id="clear-cut")
                layer_range = LayerRange(elem_id="layer-range")
                feedback_md = gr.Markdown(elem_id="cut-feedback")
                convention = gr.Markdown(text.index_convention(), elem_id="index-convention")
                with gr.Row():
                    with gr.Column(scale=2):
                        heatmap = PlotView(height=520, elem_id="heatmap")
                        gr.Markdown(text.HEATMAP_HELP)
                    with gr.Column(scale=1):
                        with gr.Group():
                            block_size = SliderInput(1, 29, value=5, step=1, label="N layers to cut",
                                                     elem_id="block-size")
                            selection = gr.Radio([(words, name) for name, words in SELECTIONS.items()],
                                                 value="paper", label="Which N layers", elem_id="selection")
                            remove = gr.Radio(text.REMOVE_CHOICES, value="layers", label="Remove", elem_id="remove")
                            best_btn = gr.Button("Select the N layers", elem_id="best-btn")
                        with gr.Group():
                            with gr.Row(equal_height=True):
                                resamples = NumberInput(20, label="Bootstrap resamples", minimum=2, scale=1)
                                stability_btn = gr.Button("How stable is the best block of N?", scale=2,
                                                          elem_id="stability-btn")
                            stability_md = gr.Markdown(text.STABILITY_HELP, elem_id="stability")
                        named = gr.Radio([], label="Persistence cuts (zigzag)", visible=False)
                        bars = PlotView(height=300, elem_id="layer-bars")
                        greedy = PlotView(height=300, elem_id="greedy-curve", visible=False)
                        with gr.Column(visible=False) as rank_box:
                            rank_map = PlotView(height=520, elem_id="rank-map")
                        with gr.Accordion("Export the cut model", open=False):
                            folder = gr.Textbox(label="Folder name (empty: <model>-minus-<n>-layers)")
                            export_btn = gr.Button("Save as a Hugging Face checkpoint")
                            export_md = gr.Markdown()
                            export_files = gr.File(label="Download", file_count="multiple")
                with gr.Accordion("Surgical rank search (low-rank): lower each projection's rank while a score "
                                  "holds", open=False, elem_id="search-box"):
                    gr.Markdown(text.RANK_SEARCH_HELP)
                    with gr.Row(equal_height=True):
                        search_space = gr.Radio(list(SPACES), value=SPACES[0], label="Space", elem_id="search-space")
                        search_on = gr.Dropdown([WIKITEXT, *SUPPORTED_TASKS], value=WIKITEXT, label="Score",
                                                elem_id="search-on")
                        search_tol = NumberInput(0.5, label="Tolerance (points, or % per projection)", minimum=0,
                                                 elem_id="search-tolerance")
                        search_limit = NumberInput(40, minimum=0, elem_id="search-limit",
                                                   label=f"Windows (256 tokens) or questions ({policy.limit_words()})")
                        search_layers = NumberInput(2, label="Last N layers", minimum=1, elem_id="search-layers")
                        search_names = gr.Textbox("", label="Projections (empty: all)", elem_id="search-names")
                        search_btn = gr.Button("Search ranks", variant="primary", elem_id="search-btn", scale=0,
                                               min_width=160)
                    search_md = gr.Markdown(elem_id="search-summary")
                    search_plot = PlotView(plots.empty_figure("Search to see parameters against the scores"),
                                           height=420, elem_id="search-plot")
                with gr.Accordion("Heal the edited slot's model into the other slot (LoRA, or its last layers)",
                                  open=False, elem_id="heal-box"):
                    gr.Markdown(text.heal_help())
                    with gr.Row(equal_height=True):
                        heal_method = gr.Radio([("LoRA (Shortened LLaMA)", "lora"),
                                                ("Last layers and head (Lu et al.)", "last_layers")], value="lora",
                                               label="Method", elem_id="heal-method", scale=2)
                        heal_steps = NumberInput(0, label="Steps (0: the method's default)", minimum=0,
                                                 elem_id="heal-steps")
                        heal_budget = NumberInput(0, label="Time budget, s (0: none)", minimum=0,
                                                  elem_id="heal-budget")
                        heal_btn = gr.Button("Heal", variant="primary", elem_id="heal-btn", scale=0, min_width=160)
                    heal_md = gr.Markdown(elem_id="heal-status")
                    heal_plot = PlotView(plots.empty_figure("Heal to see the loss per step"), height=380,
                                         elem_id="heal-plot")

            # -------------------------------------------------- 5. compare: generation
            with gr.Tab("Generate", id="generate"):
                with gr.Row(equal_height=True):
                    prompt = gr.Textbox(text.EXAMPLE_PROMPTS[0], label="Prompt", lines=2, scale=4, elem_id="prompt")
                    with gr.Column(scale=1, min_width=160):
                        gen_btn = gr.Button("Generate", variant="primary", elem_id="generate-btn")
                        gen_stop = gr.Button("Stop", variant="stop", size="sm")
                gr.Examples([[p] for p in text.EXAMPLE_PROMPTS], inputs=[prompt], label="Example prompts")
                with gr.Accordion("Sampling", open=False):
                    with gr.Row():
                        max_new = SliderInput(8, 512, value=64, step=8, label="Max new tokens")
                        temperature = SliderInput(0, 2, value=0, step=0.05, label="Temperature (0 = greedy)")
                        top_p = SliderInput(0.05, 1, value=1, step=0.05, label="Top-p")
                        seed = NumberInput(0, label="Seed")
                gen_outputs = []
                with gr.Row(equal_height=True):
                    for label, title in (("original", "Original model"), *((s, f"{s}: cut") for s in SLOTS)):
                        with gr.Column(min_width=220):
                            gen_outputs.append(gr.Textbox(label=title, lines=9, max_lines=20, interactive=False,
                                                          elem_id=f"out-{label}", elem_classes="gen-out"))
                            gen_outputs.append(gr.Markdown(elem_id=f"stats-{label}"))
                answers = gr.State({})  # the last generation's token ids per column
                divergence_md = gr.Markdown(elem_id="divergence")
                divergence_plot = PlotView(plots.empty_figure("Generate with a cut to see where the answers part"),
                                           height=300, elem_id="divergence-strip")
                with gr.Accordion("Logit lens: the top next token each layer already predicts, for this prompt",
                                  open=False, elem_id="lens-box"):
                    gr.Markdown(text.LOGIT_LENS_HELP)
                    lens_btn = gr.Button("Show the logit lens", elem_id="lens-btn")
                    with gr.Row():
                        lens_original = PlotView(plots.empty_figure("The original's lens"), height=760,
                                                 elem_id="lens-original")
                        lens_cut = PlotView(plots.empty_figure("The edited slot's lens"), height=760,
                                            elem_id="lens-cut")

            # -------------------------------------------------- 5. compare: speed and memory
            with gr.Tab("Speed & memory", id="speed"):
                gr.Markdown(text.SPEED_HELP)
                with gr.Row(equal_height=True):
                    batches = gr.CheckboxGroup(["1", "4", "8", "16", "32"], value=["1", "8"], label="Batch sizes")
                    prompt_len = NumberInput(128, label="Prompt tokens", minimum=1)
                    new_tokens = NumberInput(32, label="New tokens", minimum=2, elem_id="new-tokens")
                    repeats = NumberInput(3, label="Repeats", minimum=1, elem_id="repeats")
                with gr.Row():
                    speed_btn = gr.Button("Measure speed", variant="primary", elem_id="speed-btn")
                    memory_btn = gr.Button("Measure memory", variant="primary", elem_id="memory-btn")
                    speed_stop = gr.Button("Stop", variant="stop", size="sm", scale=0, min_width=100)
                speed_table = gr.Dataframe(EMPTY_TABLE, label="Speed", interactive=False, wrap=True,
                                           elem_id="speed-table")
                speed_note = gr.Markdown(elem_id="speed-note")
                with gr.Row():
                    speedup_plot = PlotView(plots.empty_figure("Measure speed to compare"), height=380,
                                            elem_id="speedup-plot")
                    throughput_plot = PlotView(plots.empty_figure("Measure speed to compare"), height=380,
                                               elem_id="throughput-plot")
                memory_table = gr.Dataframe(EMPTY_TABLE, label="Memory", interactive=False, wrap=True,
                                            elem_id="memory-table")
                memory_note = gr.Markdown(elem_id="memory-note")
                memory_plot = PlotView(plots.empty_figure("Measure memory to compare"), height=360,
                                       elem_id="memory-plot")

            # -------------------------------------------------- 5. compare: benchmarks
            with gr.Tab("Benchmarks", id="benchmarks"):
                gr.Markdown(text.BENCH_HELP)
                with gr.Row(equal_height=True):
                    tasks = gr.CheckboxGroup(list(SUPPORTED_TASKS), value=["arc_easy"], label="Tasks", scale=3,
                                             elem_id="tasks")
                    with gr.Column(scale=1, min_width=180):
                        limit = NumberInput(100, label=f"Questions per task ({policy.limit_words()})", minimum=0,
                                          elem_id="limit")
                        fewshot = NumberInput(0, label="Few-shot examples", minimum=0)
                with gr.Row():
                    bench_btn = gr.Button("Run benchmarks", variant="primary", elem_id="bench-btn")
                    bench_stop = gr.Button("Stop", variant="stop", size="sm", scale=0, min_width=100)
                with gr.Accordion("Perplexity (WikiText-2)", open=False):
                    with gr.Row(equal_height=True):
                        ppl_len = gr.Dropdown(["128", "512", "2048"], value="512", label="Window (tokens)")
                        ppl_windows = NumberInput(20, label=f"Windows ({policy.limit_words()})", minimum=0)
                        ppl_btn = gr.Button("Measure perplexity")
                bench_table = gr.Dataframe(EMPTY_TABLE, label="Results", interactive=False, wrap=True,
                                           elem_id="bench-table")
                bench_plot = PlotView(plots.empty_figure("Run a benchmark to compare"), height=420,
                                      elem_id="bench-plot")
                with gr.Accordion("Cut sweep: measure every block of K layers", open=False):
                    gr.Markdown(text.SWEEP_HELP)
                    with gr.Row(equal_height=True):
                        sweep_task = gr.Dropdown(list(SUPPORTED_TASKS), value="arc_easy", label="Task")
                        sweep_k = NumberInput(6, label="Block size K", minimum=1, elem_id="sweep-k")
                        sweep_limit = NumberInput(50, label=f"Questions ({policy.limit_words()})", minimum=0,
                                                elem_id="sweep-limit")
                        sweep_btn = gr.Button("Run sweep", variant="primary", elem_id="sweep-btn")
                    sweep_md = gr.Markdown(elem_id="sweep-summary")
                    with gr.Row():
                        with gr.Column(scale=3):
                            sweep_plot = PlotView(plots.empty_figure("Run a sweep to see every cut measured"),
                                                  height=460, elem_id="sweep-plot")
                        sweep_table = gr.Dataframe(headers=["method", "Spearman ρ"], label="Rank agreement",
                                                   interactive=False, elem_id="sweep-table", scale=1, min_width=280)

                with gr.Accordion("Sparsity sweep: every sparsity method at each level", open=False):
                    gr.Markdown(text.SPARSITY_SWEEP_HELP)
                    with gr.Row(equal_height=True):
                        sparse_task = gr.Dropdown(list(SUPPORTED_TASKS), value="arc_easy", label="Task")
                        sparse_levels = gr.Textbox("0, 10, 50, 90, 99", label="Sparsity levels (%)",
                                                   elem_id="sparse-levels")
                        sparse_methods = gr.CheckboxGroup(list(SPARSITY_METHODS), value=["magnitude", "wanda"],
                                                          label="Methods", elem_id="sparse-methods")
                        sparse_limit = NumberInput(50, label=f"Questions ({policy.limit_words()})", minimum=0,
                                                   elem_id="sparse-limit")
                        sparse_windows = NumberInput(16, label="Perplexity windows (512 tokens)", minimum=1,
                                                     elem_id="sparse-windows")
                        sparse_btn = gr.Button("Run sparsity sweep", variant="primary", elem_id="sparse-btn")
                    sparse_plot = PlotView(plots.empty_figure("Run a sparsity sweep to see each method's curve"),
                                           height=420, elem_id="sparse-plot")
                    sparse_table = gr.Markdown(elem_id="sparse-table")

        # ------------------------------------------------------------ wiring
        cut_outputs = [layer_range, banner, heatmap, bars, greedy, named, slot, view]
        load_inputs = [view, model, token, trust, dtype]
        load_outputs = [model_md, block_size, *cut_outputs, convention]
        analyze_inputs = [view, method, options, cal_source, cal_detail, cal_upload, cal_samples, cal_len, block_size,
                          selection, cal_bos, remove]
        analyze_outputs = [*cut_outputs, analysis_md]

        method.change(h.method_info, method, [method_about, options, analyze_btn, build_btn, width_row, level, pattern,
                                              versus_btn], api_name="method_info", queue=False)
        load_event = load_btn.click(gpu(h.load_model), load_inputs, [*load_outputs, analysis_md],
                                    api_name="load_model", show_progress_on=[model_md], **DEVICE)
        load_then_analyze = load_event.success(gpu(h.analyze), analyze_inputs, analyze_outputs,
                                               api_name="analyze_loaded", show_progress_on=[heatmap], **DEVICE)
        calibration_inputs = [cal_source, cal_detail, cal_upload, cal_samples, cal_len, cal_bos]
        build_outputs = [*analyze_outputs, rank_box, rank_map]
        build_event = build_btn.click(gpu(h.build), [view, method, level, pattern, stack, *calibration_inputs],
                                      build_outputs, api_name="build", show_progress_on=[banner], **DEVICE)
        versus_event = versus_btn.click(gpu(h.width_vs_depth), [view, level, selection, *calibration_inputs],
                                        build_outputs, api_name="width_vs_depth", show_progress_on=[banner], **DEVICE)
        analyze_event = analyze_btn.click(gpu(h.analyze), analyze_inputs, analyze_outputs, api_name="analyze",
                                          show_progress_on=[heatmap], **DEVICE)
        start_event = demo.load(gpu(h.startup), [view, method], [model, *load_outputs, analysis_md, stability_md],
                                api_name="startup", show_progress_on=[model_md, heatmap], **DEVICE)

        versus_event.success(h.cut_size, [view], [block_size], api_name="cut_size", **LIGHT)  # A's N layers
        slot_event = slot.input(h.edit_slot, [view, slot], cut_outputs, api_name="edit_slot", **LIGHT)
        clear_event = clear_btn.click(h.clear_slot, [view], cut_outputs, api_name="clear_cut", **LIGHT)
        release_event = layer_range.release(h.set_cut, [view, layer_range], cut_outputs, api_name="set_cut", **LIGHT)
        click_event = heatmap.point_click(h.select_cell, [view], cut_outputs, api_name="select_cell", **LIGHT)
        best_event = best_btn.click(h.best_block, [view, block_size, selection, remove], cut_outputs,
                                    api_name="best_block", **LIGHT)
        named_event = named.input(h.named_cut, [view, named], cut_outputs, api_name="named_cut", **LIGHT)
        stability_event = stability_btn.click(gpu(h.stability), [view, block_size, resamples], [stability_md],
                                              api_name="stability", show_progress_on=[stability_md], **DEVICE)
        export_btn.click(gpu(h.export), [view, folder], [export_md, export_files], api_name="export",
                         show_progress_on=[export_md], **DEVICE)

        # The streaming text is the progress; "minimal" still shows a waiting visitor its place in the queue.
        gen_event = gr.on([gen_btn.click, prompt.submit], gpu(h.generate),
                          [view, prompt, max_new, temperature, top_p, seed], [*gen_outputs, answers],
                          api_name="generate", show_progress="minimal", **DEVICE)
        divergence_event = gen_event.success(
            gpu(explains.divergence), [view, prompt, max_new, answers],
            [gen_outputs[2], gen_outputs[4], divergence_plot, divergence_md], api_name="divergence",
            show_progress_on=[divergence_md], **DEVICE)
        lens_event = lens_btn.click(gpu(explains.logit_lens), [view, prompt], [lens_original, lens_cut],
                                    api_name="logit_lens", **DEVICE)
        speed_event = speed_btn.click(gpu(h.speed), [view, batches, prompt_len, new_tokens, repeats],
                                      [speed_table, speedup_plot, throughput_plot, speed_note], api_name="speed",
                                      **DEVICE)
        memory_event = memory_btn.click(gpu(h.memory), [view], [memory_table, memory_plot, memory_note],
                                        api_name="memory", **DEVICE)
        bench_event = bench_btn.click(gpu(h.benchmarks), [view, tasks, limit, fewshot],
                                      [bench_table, bench_plot, view], api_name="benchmarks", **DEVICE)
        ppl_event = ppl_btn.click(gpu(h.perplexity), [view, ppl_len, ppl_windows], [bench_table, bench_plot, view],
                                  api_name="perplexity", **DEVICE)
        sweep_event = sweep_btn.click(gpu(h.sweep), [view, sweep_task, sweep_k, sweep_limit],
                                      [sweep_plot, sweep_table, sweep_md], api_name="sweep", **DEVICE)

        search_event = search_btn.click(
            gpu(searches.rank_search), [view, search_space, search_on, search_tol, search_limit, search_layers,
                                        search_names, *calibration_inputs],
            [search_plot, search_md, *cut_outputs, rank_box, rank_map], api_name="rank_search",
            show_progress_on=[search_md], **DEVICE)
        heal_event = heal_btn.click(gpu(heals.heal), [view, heal_method, heal_steps, heal_budget],
                                    [heal_plot, heal_md, *cut_outputs, bench_table, bench_plot], api_name="heal",
                                    show_progress_on=[heal_md], **DEVICE)
        sparse_event = sparse_btn.click(gpu(h.sparsity_sweep), [view, sparse_task, sparse_levels, sparse_methods,
                                                                 sparse_limit, sparse_windows],
                                        [sparse_plot, sparse_table], api_name="sparsity_sweep", **DEVICE)

        # Every change of the edited slot's model is followed by its numbers against the original (a newer one
        # supersedes); the first after a startup, a load or an analysis also computes the original's states once.
        for event, name in ((release_event, "release"), (click_event, "click"), (best_event, "best"),
                            (start_event, "startup"), (analyze_event, "analyze"), (load_then_analyze, "load"),
                            (slot_event, "slot"), (clear_event, "clear"), (named_event, "named"),
                            (build_event, "build"), (versus_event, "versus"), (search_event, "search"),
                            (heal_event, "heal")):
            event.success(explains.feedback, [view], [feedback_md], api_name=f"feedback_after_{name}", **FEEDBACK)

        running = [load_event, load_then_analyze, analyze_event, build_event, versus_event, start_event, gen_event,
                   divergence_event, speed_event, memory_event, bench_event, ppl_event, sweep_event, sparse_event,
                   stability_event, search_event, lens_event, heal_event]
        for button, name in ((stop_btn, "cancel"), (gen_stop, "cancel_generation"), (speed_stop, "cancel_speed"),
                             (bench_stop, "cancel_benchmarks")):
            # Gradio cancels this visitor's queued events; the handler stops this visitor's running job.
            button.click(h.cancel, None, None, api_name=name, cancels=running, queue=False)
        gr.Timer(MEMORY_REFRESH_S).tick(h.server_memory, None, memory_md, api_name="server_memory", queue=False,
                                        show_progress="hidden")
        demo.unload(h.page_closed)  # a closed page's jobs stop, whatever kind they are
    demo.queue(default_concurrency_limit=1)
    return demo


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="LayerCut: depth-prune an LLM and compare it side by side.")
    parser.add_argument("--model", default=None, help="the model every new page opens with (default: embedded)")
    parser.add_argument("--shared", action="store_true",
                        help="a server for many visitors: uploads only, no server paths (also LAYERCUT_SHARED=1)")
    args = parser.parse_args(argv)
    ensure_embedded_model()
    policy = Policy.from_env(shared=True if args.shared else None)
    build_demo(policy=policy, default_model=ModelSpec(args.model) if args.model else None).launch(
        server_name=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
        server_port=int(os.environ.get("GRADIO_SERVER_PORT", "7860")), **launch_options(policy))


if __name__ == "__main__":
    main()
