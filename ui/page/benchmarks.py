"""The "Benchmarks" tab: every compared model on lm-eval tasks and WikiText-2 or C4 perplexity (one results table),
judged answers (MT-Bench, ``ui.page.mt_bench``), the cut sweep (every block of K layers measured as it goes, beside
the analysis's method; the others ranked on request), the sparsity sweep and the frontier (``ui.page.frontier``).
The defaults are small, so that they finish quickly on a CPU (``benchmarks/default_jobs.py`` times them); each
button shows an estimate beside it (``ui.page.estimates``)."""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

import prune
from evaluation.serving import (c4_missing, c4_shard, C4_TASK, check_request, ENGINE_NOTE, LLAMA_CPP, PERPLEXITY,
                                sparsity_table, to_measurements)
from prune.core.errors import InvalidInput
from prune.sparsity.masks import METHODS as SPARSITY_METHODS
from prune.core.surgery import largest_cut

from ui import help_text, inputs, job_text, plots, slot_text, text
from ui.handlers import Context, main_unit, need_model, owner, reporter, user_errors
from ui.number_input import NumberInput
from ui.page.events import DEVICE, LIGHT, by_name, gpu
from ui.page.frontier import FrontierBox
from ui.page.mt_bench import MtBenchBox
from ui.page.speed import llama_box
from ui.page.theme import EMPTY_TABLE
from ui.plot_view import PlotView
from ui.tables import agreement_rows, comparison_table
from ui.session import Session

WIKITEXT2 = "wikitext2"
PPL_TEXTS = [("WikiText-2", WIKITEXT2), ("C4", C4_TASK)]


@dataclass
class Results:
    """The session's benchmark and perplexity results: one table, one plot (healing adds its perplexity here)."""

    table: gr.Dataframe
    plot: PlotView

    def outputs(self) -> list:
        return [self.table, self.plot]

    def show(self, session: Session) -> dict:
        found, variants = list(session.results), session.variants()
        return {self.table: comparison_table(found, variants),
                self.plot: plots.comparison_figure(found, unit=main_unit(found), title="Benchmarks",
                                                   names=text.model_names(variants))}


@dataclass
class Sweep:
    task: gr.Dropdown
    block_size: NumberInput  # K
    limit: NumberInput
    others: gr.Checkbox  # also analyse and rank every other method
    button: gr.Button
    estimate: gr.Markdown
    summary: gr.Markdown
    plot: PlotView
    table: gr.Dataframe  # the methods' rank agreement


@dataclass
class SparsitySweep:
    task: gr.Dropdown
    levels: gr.Textbox
    methods: gr.CheckboxGroup
    limit: NumberInput
    windows: NumberInput
    button: gr.Button
    estimate: gr.Markdown
    plot: PlotView
    table: gr.Markdown


@dataclass
class BenchmarksTab:
    tasks: gr.CheckboxGroup
    limit: NumberInput
    fewshot: NumberInput
    bench_btn: gr.Button
    bench_stop: gr.Button
    ppl_text: gr.Radio  # WikiText-2 or C4
    ppl_len: gr.Dropdown  # WikiText-2's window (C4's is the papers')
    ppl_windows: NumberInput
    ppl_llama_cpp: gr.Checkbox  # WikiText-2 also from llama.cpp's logits, with top-1 agreement
    ppl_btn: gr.Button
    results: Results
    mt_bench: MtBenchBox
    sweep: Sweep
    sparsity: SparsitySweep
    frontier: FrontierBox
    bench_estimate: gr.Markdown
    ppl_estimate: gr.Markdown
    ppl_note: gr.Markdown  # why a column did not run in llama.cpp

    @classmethod
    def layout(cls, context: Context) -> BenchmarksTab:
        limit_words = context.policy.limit_words()
        with gr.Tab("Benchmarks", id="benchmarks"):
            gr.Markdown(help_text.BENCH_HELP)
            with gr.Row(equal_height=True):
                tasks = gr.CheckboxGroup(help_text.task_choices(), value=["arc_easy"], label="Tasks", scale=3,
                                         elem_id="tasks")
                with gr.Column(scale=1, min_width=180):
                    limit = NumberInput(20, label=f"Questions per task ({limit_words})", minimum=0, elem_id="limit")
                    fewshot = NumberInput(0, label="Few-shot examples", minimum=0)
            with gr.Row():
                bench_btn = gr.Button("Run benchmarks", variant="primary", elem_id="bench-btn")
                bench_stop = gr.Button("Stop", variant="stop", size="sm", scale=0, min_width=100)
            bench_estimate = gr.Markdown(elem_id="bench-estimate")
            with gr.Accordion("Perplexity (WikiText-2 or C4)", open=False):
                with gr.Row(equal_height=True):
                    ppl_text = gr.Radio(PPL_TEXTS, value=WIKITEXT2, label="Text", elem_id="ppl-text")
                    ppl_len = gr.Dropdown(["128", "512", "2048"], value=str(PERPLEXITY.seq_len),
                                          label="Window (tokens)")
                    ppl_windows = NumberInput(2, label=f"Windows ({limit_words})", minimum=0, elem_id="ppl-windows")
                    ppl_llama_cpp = gr.Checkbox(False, label=f"Also in {LLAMA_CPP}", info=help_text.LLAMA_CPP_PPL_INFO,
                                                elem_id="ppl-llama-cpp")
                    ppl_btn = gr.Button("Measure perplexity", elem_id="ppl-btn")
                ppl_estimate = gr.Markdown(elem_id="ppl-estimate")
                ppl_note = gr.Markdown(elem_id="ppl-note")
                gr.Markdown(help_text.C4_HELP)
            results = Results(gr.Dataframe(EMPTY_TABLE, label="Results", interactive=False, wrap=True,
                                           elem_id="bench-table"),
                              PlotView(plots.empty_figure("Run a benchmark to compare"), height=420,
                                       elem_id="bench-plot"))
            judged = MtBenchBox.layout(context)
            sweep = _sweep(limit_words)
            sparsity = _sparsity_sweep(limit_words)
            frontier = FrontierBox.layout(limit_words)
        return cls(tasks, limit, fewshot, bench_btn, bench_stop, ppl_text, ppl_len, ppl_windows, ppl_llama_cpp, ppl_btn,
                   results, judged, sweep, sparsity, frontier, bench_estimate, ppl_estimate, ppl_note)


def _sweep(limit_words: str) -> Sweep:
    with gr.Accordion("Cut sweep: measure every block of K layers", open=False):
        gr.Markdown(help_text.SWEEP_HELP)
        with gr.Row(equal_height=True):
            settings = dict(task=gr.Dropdown(help_text.task_choices(), value="arc_easy", label="Task"),
                            block_size=NumberInput(6, label="Block size K", minimum=1, elem_id="sweep-k"),
                            limit=NumberInput(10, label=f"Questions ({limit_words})", minimum=0, elem_id="sweep-limit"),
                            others=gr.Checkbox(False, label="Also rank the other methods (slower)",
                                               elem_id="sweep-others"),
                            button=gr.Button("Run sweep", variant="primary", elem_id="sweep-btn"))
        estimate = gr.Markdown(elem_id="sweep-estimate")
        summary = gr.Markdown(elem_id="sweep-summary")
        with gr.Row():
            with gr.Column(scale=3):
                plot = PlotView(plots.empty_figure("Run a sweep to see every cut measured"), height=460,
                                elem_id="sweep-plot")
            table = gr.Dataframe(headers=["method", "Spearman ρ"], label="Rank agreement", interactive=False,
                                 elem_id="sweep-table", scale=1, min_width=280)
    return Sweep(**settings, estimate=estimate, summary=summary, plot=plot, table=table)


def _sparsity_sweep(limit_words: str) -> SparsitySweep:
    with gr.Accordion("Sparsity sweep: every sparsity method at each level", open=False):
        gr.Markdown(help_text.SPARSITY_SWEEP_HELP)
        with gr.Row(equal_height=True):
            settings = dict(
                task=gr.Dropdown(help_text.task_choices(), value="arc_easy", label="Task"),
                levels=gr.Textbox("0, 50, 90", label="Sparsity levels (%)", elem_id="sparse-levels"),
                methods=gr.CheckboxGroup(list(SPARSITY_METHODS), value=["magnitude", "wanda"], label="Methods",
                                         elem_id="sparse-methods"),
                limit=NumberInput(10, label=f"Questions ({limit_words})", minimum=0, elem_id="sparse-limit"),
                windows=NumberInput(2, label=f"Perplexity windows ({PERPLEXITY.seq_len} tokens)", minimum=1,
                                    elem_id="sparse-windows"),
                button=gr.Button("Run sparsity sweep", variant="primary", elem_id="sparse-btn"))
        estimate = gr.Markdown(elem_id="sparse-estimate")
        plot = PlotView(plots.empty_figure("Run a sparsity sweep to see each method's curve"), height=420,
                        elem_id="sparse-plot")
        table = gr.Markdown(elem_id="sparse-table")
    return SparsitySweep(**settings, estimate=estimate, plot=plot, table=table)


def _sweep_figure(report):
    """The sweep's figure, its axis fixed to every start from the first report on, so that cuts fill it in place."""
    result = report.sweep
    return plots.sweep_figure(report).update_xaxes(range=[-0.5, result.num_layers - result.block_size + 0.5])


def _sweep_summary(report) -> str:
    if not report.sweep.complete:
        return job_text.sweep_progress(report.sweep)
    return f"{text.sweep_summary(report)} {job_text.versus_original(report.sweep)}"


class BenchmarkHandlers:
    def __init__(self, context: Context, page):
        self.context, self.tab, self.session = context, page.benchmarks, page.session

    @user_errors
    def benchmarks(self, session: Session, tasks: list, limit, num_fewshot, request: gr.Request = None,
                   progress=gr.Progress()):
        need_model(session)
        if not tasks:
            raise InvalidInput("Choose at least one benchmark task.")
        backend = self.context.backend
        task_request = check_request(
            list(tasks), limit=self.context.policy.limit(limit, "Questions per task"),
            num_fewshot=inputs.whole_number(num_fewshot or 0, "Few-shot examples", minimum=0, maximum=25),
            data_dir=backend.models.data_dir)
        found = backend.measure.benchmarks(session.spec, session.variants(), task_request, progress=reporter(progress),
                                           owner=owner(request))
        return self._results_shown(session.with_results(found))

    @user_errors
    def perplexity(self, session: Session, seq_len, max_windows, source=WIKITEXT2, llama_cpp: bool = False,
                   request: gr.Request = None, progress=gr.Progress()):
        """WikiText-2 perplexity at the chosen window (and from llama.cpp's logits, with each column's top-1 agreement
        there), or C4's by the pruning papers' rule (``evaluation.quality.c4``)."""
        need_model(session)
        backend, windows = self.context.backend, self.context.policy.limit(max_windows, "Windows")
        if source not in dict(PPL_TEXTS).values():
            raise InvalidInput(f"Measure perplexity on {' or '.join(name for name, _ in PPL_TEXTS)}.")
        if source == C4_TASK:
            c4_at_hand(backend.models.data_dir)
            entries = backend.measure.c4_results(session.spec, session.variants(), limit=windows,
                                                 progress=reporter(progress), owner=owner(request))
            found = [m for label, entry in entries.items()
                     for m in to_measurements({C4_TASK: entry}, model=label)]
        else:
            found = backend.measure.perplexity(
                session.spec, session.variants(),
                seq_lens=(inputs.whole_number(seq_len, "The window", minimum=2, maximum=8192),),
                max_windows=windows, engine=LLAMA_CPP if llama_cpp else None, progress=reporter(progress),
                owner=owner(request))
        shown = self._results_shown(session.with_results(found))
        return {**shown, self.tab.ppl_note: slot_text.model_notes(found, ENGINE_NOTE)}

    def _results_shown(self, session: Session) -> dict:
        return {**self.tab.results.show(session), self.session: session}

    @user_errors
    def sweep(self, session: Session, task: str, block_size, limit, others: bool = False, request: gr.Request = None,
              progress=gr.Progress()):
        """Measure every cut of K layers on one task, plotting each as it arrives beside the analysis's method;
        with ``others``, every other method is analysed afterwards and all are ranked by agreement."""
        info = need_model(session)
        backend = self.context.backend
        size = inputs.whole_number(block_size, "Block size K", minimum=1, maximum=largest_cut(info.num_layers))
        task_request = check_request([task], limit=self.context.policy.limit(limit, "Questions"),
                                     data_dir=backend.models.data_dir)
        known = {session.result.method: session.result} if session.result is not None else {}
        methods = [m for m in prune.METHODS if m not in known] if others else []
        sweep = self.tab.sweep
        for report in backend.sweeps.cuts(session.spec, task_request, size, known=known, methods=methods,
                                          calibration=session.calibration or self.context.default_calibration,
                                          progress=reporter(progress), owner=owner(request)):
            yield {sweep.plot: _sweep_figure(report), sweep.table: agreement_rows(report),
                   sweep.summary: _sweep_summary(report)}

    @user_errors
    def sparsity_sweep(self, session: Session, task: str, levels: str, methods: list, limit, windows,
                       request: gr.Request = None, progress=gr.Progress()):
        """One task's metric and WikiText-2 perplexity at each sparsity level, per method, plotted as each point
        arrives (each point cached)."""
        need_model(session)
        backend = self.context.backend
        task_request = check_request([task], limit=self.context.policy.limit(limit, "Questions"),
                                     data_dir=backend.models.data_dir)
        sparsity = self.tab.sparsity
        for result in backend.sweeps.sparsity(
                session.spec, task_request, levels=inputs.percentages(levels, "Sparsity levels"), methods=methods or [],
                calibration=self.context.default_calibration,
                ppl_windows=inputs.whole_number(windows, "Perplexity windows", minimum=1, maximum=1000),
                progress=reporter(progress), owner=owner(request)):
            yield {sparsity.plot: plots.sparsity_sweep_figure(result), sparsity.table: sparsity_table(result)}


def c4_at_hand(data_dir) -> None:
    """C4's shard is at hand (the data folder's, else the Hub's), or one line on what to put where, naming no folder
    of the server."""
    try:
        c4_shard(data_dir)
    except InvalidInput:
        raise InvalidInput(c4_missing(None)) from None


def window_for(source: str):
    """The window is WikiText-2's to choose; C4's is the papers' (2048, or the model's positions if fewer)."""
    return gr.update(interactive=source != C4_TASK)


def wire(page, handlers) -> dict:
    tab = page.benchmarks
    runs, session, results = handlers.benchmarks, page.session, [*tab.results.outputs(), page.session]
    durations = handlers.durations
    bench = tab.bench_btn.click(gpu(runs.benchmarks, durations.benchmarks),
                                [session, tab.tasks, tab.limit, tab.fewshot], results, api_name="benchmarks", **DEVICE)
    ppl = tab.ppl_btn.click(gpu(runs.perplexity, durations.perplexity),
                            [session, tab.ppl_len, tab.ppl_windows, tab.ppl_text, tab.ppl_llama_cpp],
                            [*results, tab.ppl_note], api_name="perplexity", **DEVICE)
    tab.ppl_text.change(window_for, [tab.ppl_text], [tab.ppl_len], api_name="perplexity_text", **LIGHT)
    sweep = tab.sweep.button.click(gpu(runs.sweep, durations.sweep),
                                   [session, tab.sweep.task, tab.sweep.block_size, tab.sweep.limit, tab.sweep.others],
                                   [tab.sweep.plot, tab.sweep.table, tab.sweep.summary], api_name="sweep",
                                   show_progress_on=[tab.sweep.summary], **DEVICE)
    sparse = tab.sparsity
    sparse_sweep = sparse.button.click(gpu(runs.sparsity_sweep, durations.sparsity_sweep),
                                       [session, sparse.task, sparse.levels, sparse.methods, sparse.limit,
                                        sparse.windows],
                                       [sparse.plot, sparse.table], api_name="sparsity_sweep",
                                       show_progress_on=[sparse.table], **DEVICE)
    tab.ppl_llama_cpp.input(llama_box, [tab.ppl_llama_cpp], [tab.ppl_llama_cpp], api_name="ppl_llama_check")
    return by_name(bench, ppl, sweep, sparse_sweep)
