"""Event handlers: turn UI inputs into Backend calls and Backend results into UI outputs.

No model code: everything heavy happens in ``evaluation.serving.backend.Backend``. Each handler takes
the visitor's :class:`~ui.session.Session` (what this browser tab compares) and returns a new
one; jobs run as the visitor's own (``request.session_hash``), so Stop cancels only them.
"""

from __future__ import annotations

import functools
import inspect
import logging
import time
from dataclasses import replace

import gradio as gr

import prune
from evaluation.serving import allocator
from evaluation.quality import lm_eval_adapter
from evaluation.measure.measurement import Measurement, to_dataframe
from evaluation.serving.models import ModelSpec
from evaluation.sweeps.sparsity import format_table
from prune.core.errors import InvalidInput, LayerCutError, ModelNotFound, quoted
from prune.depth.methods import options_for_cut
from prune.lowrank.step import Decompose
from prune.core.recipe import Recipe
from prune.width.step import WidthPrune
from prune.depth.selection import LAYERS, check_remove, check_selection, chosen_recipe
from prune.drop.sublayers import ATTENTION, MLP
from prune.width.shrink import matching_depth_layers

from ui import catalog, inputs, plots, text
from ui.downloads import Downloads
from ui.range_control import parse_range, range_update
from ui.session import SLOTS, Session

log = logging.getLogger(__name__)
MAX_MESSAGE_CHARS = 500  # the longest message a visitor sees


def user_errors(fn):
    """Show LayerCutError messages as Gradio errors; anything else as a short message, never a traceback."""

    def convert(err: Exception) -> gr.Error:
        if isinstance(err, gr.Error):
            return err
        if isinstance(err, LayerCutError):
            return gr.Error(bounded(str(err)), print_exception=False)
        log.exception("Unexpected error in %s", fn.__name__)
        first = str(err).splitlines()[0] if str(err) else ""
        return gr.Error(f"Something went wrong ({type(err).__name__}: {bounded(first, 200)}). "
                        "The details are in the server log.", print_exception=False)

    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def stream(*args, **kwargs):
            try:
                yield from fn(*args, **kwargs)
            except Exception as err:
                raise convert(err) from None
        return stream

    @functools.wraps(fn)
    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception as err:
            raise convert(err) from None
    return call


def bounded(message: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """A message cut to ``limit`` characters: a safety net for any that quotes too much of what was typed."""
    return message if len(message) <= limit else message[:limit - 1] + "…"


def reporter(progress):
    """Backend progress callback → gr.Progress."""
    return lambda fraction, message="": progress(float(fraction), desc=message or None)


def default_block_size(num_layers: int) -> int:
    """A tenth of the layers: on the default model angular's best such block, [13, 16), still answers
    the first example prompt; the best block of a sixth does not (see the README)."""
    return max(1, min(num_layers - 1, round(num_layers / 10)))


class Handlers:
    """One method per UI event; app.py wires them with api names. State comes in and goes out as a Session."""

    def __init__(self, backend, policy: inputs.Policy | None = None, default_model: ModelSpec | None = None,
                 downloads: Downloads | None = None):
        self.backend = backend
        self.policy = policy or inputs.Policy()
        self.downloads = downloads or Downloads.for_server(self.policy.shared)
        self.default_model = default_model or ModelSpec()
        self.default_calibration = backend.default_calibration

    # ------------------------------------------------------------------ pick
    @user_errors
    def startup(self, session: Session, method: str, request: gr.Request = None, progress=gr.Progress()):
        """Page opened: this server's default model analyzed by ``method``, its best block of a tenth as A.

        A demo then needs no clicks to reach the heatmap; analyses are cached on disk, so a
        second visit is instant.
        """
        spec = session.spec or self.default_model
        info = self.backend.load(spec, progress=reporter(progress), owner=_owner(request))
        session = session if session.spec == spec else Session().for_model(spec, info)
        size = default_block_size(info.num_layers)
        session, status = self._analyze(session, method, {}, self.default_calibration, size, "paper", request,
                                        progress)
        found = self.backend.stability(spec, method, size, calibration=self.default_calibration,
                                       progress=reporter(progress), owner=_owner(request))  # seconds for angular
        return (gr.update(value=spec.name), text.model_markdown(info), _size_update(info),
                *self._cut_outputs(session), text.index_convention(info.num_layers), status,
                text.stability_markdown(found))

    @user_errors
    def load_model(self, session: Session, name: str, token: str, trust_remote_code: bool, dtype: str,
                   request: gr.Request = None, progress=gr.Progress()):
        """Load a model (empty = the embedded default) for this visitor.

        Nothing of the previous model shows while it loads; a failure shows the previous model again.
        """
        spec = inputs.model_spec(name, token, trust_remote_code, dtype, self.policy)
        yield (gr.update(), gr.update(), *self._cut_outputs(session.while_loading(spec.name)), gr.update(),
               f"Loading {spec.name}…")
        try:
            info = self.backend.load(spec, progress=reporter(progress), owner=_owner(request))
        except Exception as err:
            status = text.analysis_status(session.result) if session.result else ""
            yield (gr.update(), gr.update(), *self._cut_outputs(session), gr.update(), status)
            if isinstance(err, ModelNotFound) and self.policy.shared:  # the same words whether or not a folder exists
                raise inputs.shared_not_found(spec.name) from None
            raise
        session = session.for_model(spec, info)
        yield (text.model_markdown(info), _size_update(info), *self._cut_outputs(session),
               text.index_convention(info.num_layers), "Analyzing…")

    @user_errors
    def method_info(self, method: str):
        """The method's description and default options; a width method shows its level, pattern and Build.

        Outputs: description, options, Analyze button, Build button, the width row, level slider,
        pattern radio, the width-against-depth button.
        """
        width = catalog.is_width(catalog.check_method(method))
        if width:
            about, options = catalog.width_markdown(method), ""
        else:
            spec = prune.METHODS[method]
            about, options = text.method_markdown(spec), text.options_text(spec.options)
        sparsity = width and catalog.WIDTH_METHODS[method].patterns
        return (about, gr.update(value=options, interactive=not width), gr.update(visible=not width),
                gr.update(visible=width), gr.update(visible=width),
                gr.update(**catalog.level_slider(method)) if width else gr.update(),
                gr.update(visible=sparsity), gr.update(visible=method == catalog.WIDTH))

    @user_errors
    def analyze(self, session: Session, method: str, options: str, source: str, detail: str, upload, samples,
                seq_len, block_size, selection: str = "paper", bos: str = "auto", remove: str = LAYERS,
                request: gr.Request = None, progress=gr.Progress()):
        """Score every block with ``method``, then put ``block_size`` layers it picks in the edited slot."""
        info = _need_model(session)
        if catalog.is_width(catalog.check_method(method)):  # after a load with a width method: nothing to score
            label = catalog.WIDTH_METHODS[method].label
            return *self._cut_outputs(session), f"{label}: set its level and press *Build*."
        spec = prune.METHODS[method]
        remove = check_remove(remove, method)
        calibration = inputs.calibration(source, detail, upload, samples, seq_len, self.policy,
                                         self.default_calibration, bos)
        size = inputs.whole_number(block_size, "The number of layers", minimum=1, maximum=info.num_layers - 1)
        options = options_for_cut(spec, size, text.parse_options(options, spec))
        session, status = self._analyze(session, method, options, calibration, size, check_selection(selection),
                                        request, progress, remove)
        return *self._cut_outputs(session), status

    def _analyze(self, session, method, options, calibration, size, selection, request, progress, remove=LAYERS):
        result = self.backend.analyze(session.spec, method, calibration=calibration, progress=reporter(progress),
                                      owner=_owner(request), **options)
        origin = f"{prune.METHODS[method].label} on {text.calibration_words(calibration)}"
        session = replace(session, result=result, origin=origin, calibration=calibration,
                          options=tuple(sorted(options.items())))
        session = session.with_cut(chosen_recipe(result, size, selection, origin, remove))
        return session, text.analysis_status(result)

    @user_errors
    def stability(self, session: Session, block_size, resamples, request: gr.Request = None, progress=gr.Progress()):
        """How often the analysis's best block of N wins over bootstrap resamples of the calibration windows."""
        info = _need_model(session)
        if session.result is None:
            raise InvalidInput("Analyze first: stability re-scores the analysis on resampled calibration windows.")
        size = inputs.whole_number(block_size, "The block size", minimum=1, maximum=info.num_layers - 1)
        found = self.backend.stability(session.spec, session.result.method, size, calibration=session.calibration,
                                       resamples=inputs.whole_number(resamples, "Resamples", minimum=2, maximum=200),
                                       progress=reporter(progress), owner=_owner(request), **dict(session.options))
        return text.stability_markdown(found)

    # ------------------------------------------------------------------ width and sparsity
    @user_errors
    def build(self, session: Session, method: str, level, pattern: str, stack: bool, source: str, detail: str,
              upload, samples, seq_len, bos: str = "auto", request: gr.Request = None, progress=gr.Progress()):
        """Build a width method's step into the edited slot, alone or after its cut (``stack``).

        The status says what the variant will own before building; the build reports each layer.
        """
        _need_model(session)
        calibration = inputs.calibration(source, detail, upload, samples, seq_len, self.policy,
                                         self.default_calibration, bos)
        item = catalog.step_for(method, inputs.real_number(level, "The level", minimum=0, maximum=100), pattern,
                                calibration)
        before = session.cut()
        if stack and before is not None:
            recipe = before.then(item)
        else:
            recipe = Recipe((item,), origin=f"{catalog.WIDTH_METHODS[method].label} on the original")
        session = session.with_cut(recipe)
        yield from self._building(session, {session.editing: recipe}, request, progress)

    @user_errors
    def width_vs_depth(self, session: Session, level, selection: str, source: str, detail: str, upload, samples,
                       seq_len, bos: str = "auto", request: gr.Request = None, progress=gr.Progress()):
        """A: the analysis's depth cut of about the size ``level`` % keeps; B: width pruning to ``level`` %."""
        info = _need_model(session)
        if session.result is None:
            raise InvalidInput("Analyze with a depth method first: cut A is the layers that analysis picks.")
        ratio = inputs.real_number(level, "The share of parameters kept", minimum=1, maximum=99) / 100
        calibration = inputs.calibration(source, detail, upload, samples, seq_len, self.policy,
                                         self.default_calibration, bos)
        depth = chosen_recipe(session.result, matching_depth_layers(info.size, ratio), check_selection(selection),
                              f"{session.origin}: as many parameters as width pruning removes")
        width = Recipe((WidthPrune.of(ratio, calibration),), origin="width against depth at the same size")
        session = replace(session.with_cut(depth, SLOTS[0]).with_cut(width, SLOTS[1]), editing=SLOTS[0])
        yield from self._building(session, dict(zip(SLOTS, (depth, width))), request, progress)

    def _building(self, session: Session, recipes: dict, request, progress):
        """Yield the cut outputs and a status saying what ``recipes`` will cost; build them; yield the cost."""
        costs = {slot: self.backend.estimated_bytes(session.spec, recipe) for slot, recipe in recipes.items()}
        status = text.building_status(recipes, costs, self.backend.variants.budget_bytes)
        yield *[gr.update()] * 8, status, gr.update(), gr.update()  # the page keeps its cuts until the build succeeds
        started = time.perf_counter()
        try:
            owned = {slot: self.backend.build(session.spec, recipe, progress=reporter(progress),
                                              owner=_owner(request)) for slot, recipe in recipes.items()}
        except Exception:
            yield *[gr.update()] * 8, text.analysis_status(session.result) if session.result else "", *[gr.update()] * 2
            raise
        yield (*self._cut_outputs(session), text.built_status(recipes, owned, time.perf_counter() - started),
               *_rank_map(session, recipes))

    # ------------------------------------------------------------------ cut
    @user_errors
    def edit_slot(self, session: Session, slot: str):
        """Choose which compressed model (A or B) the range, the heatmap and the presets edit."""
        if slot not in SLOTS:
            raise InvalidInput(f"Choose one of {', '.join(SLOTS)}.")
        return self._cut_outputs(replace(session, editing=slot))

    @user_errors
    def cut_size(self, session: Session):
        """The "N layers to cut" slider set to the edited slot's depth cut (width against depth just filled A)."""
        recipe = session.cut()
        cut = recipe.depth_cut if recipe else None
        return gr.update(value=len(cut.layers)) if cut else gr.update()

    @user_errors
    def clear_slot(self, session: Session):
        """Compare one compressed model fewer: the edited slot goes empty."""
        return self._cut_outputs(session.with_cut(None))

    @user_errors
    def set_cut(self, session: Session, value):
        """Cut the block ``value = [start, end]`` (end exclusive) in the edited slot."""
        info = _need_model(session)
        start, end = parse_range(value, info.num_layers)
        return self._cut_outputs(session.with_block(start, end, "chosen by hand"))

    @user_errors
    def select_cell(self, session: Session, evt: gr.EventData):
        """A heatmap click at (start, block size) selects that block."""
        info = _need_model(session)
        try:
            start, size = int(evt.x), int(evt.y)
        except (AttributeError, TypeError, ValueError):
            raise InvalidInput("Click a cell of the heatmap to select its block.") from None
        start, end = parse_range([start, start + size], info.num_layers)
        return self._cut_outputs(session.with_block(start, end, f"{session.origin}: heatmap cell"))

    @user_errors
    def best_block(self, session: Session, size, selection: str = "paper", remove: str = LAYERS):
        """The N layers the analysis picks (as its paper does, or the best contiguous block) in the edited slot;
        with ``remove`` = "attention" / "mlp", its N most removable such blocks."""
        _need_model(session)
        if session.result is None:
            raise InvalidInput("Analyze first: the choice comes from the importance scores.")
        remove = check_remove(remove, session.result.method)
        size = inputs.whole_number(size, "The number of layers", minimum=1, maximum=session.info.num_layers - 1)
        return self._cut_outputs(session.with_cut(chosen_recipe(session.result, size, check_selection(selection),
                                                                session.origin, remove=remove)))

    @user_errors
    def named_cut(self, session: Session, name: str):
        """A named cut of the analysis (e.g. persistence "10%"), contiguous or not."""
        _need_model(session)
        if session.result is None or name not in (session.result.cuts or {}):
            raise InvalidInput(f"No cut named {quoted(name)} in this analysis.")
        recipe = Recipe.cut(session.info.num_layers, session.result.cuts[name], origin=f"{session.origin}: {name} cut")
        if 2 * len(recipe.depth_cut.layers) > session.info.num_layers:
            gr.Warning(f"The {name} cut removes more than half of the layers "
                       f"({len(recipe.depth_cut.layers)} of {session.info.num_layers}).")
        return self._cut_outputs(session.with_cut(recipe))

    @user_errors
    def export(self, session: Session, folder: str, request: gr.Request = None, progress=gr.Progress()):
        """Save the edited slot's model as a Hugging Face checkpoint with a model card; offer its files.

        On a shared server the folder is the visitor's own (see ``ui.downloads``) and named by its name only.
        """
        from evaluation.exports import texts as export_texts, folder as exports

        _need_model(session)
        recipe = session.cut()
        if recipe is None:
            raise InvalidInput(f"Choose a cut for {session.editing} first: there is nothing to export yet.")
        name = exports.check_export_name((folder or "").strip()
                                         or export_texts.default_export_name(session.info.name, recipe))
        scores = [m for m in session.results if m.model in ("original", session.editing)]
        path = self.backend.export(session.spec, recipe, self.downloads.folder(_owner(request)) / name,
                                   scores=scores, progress=reporter(progress), owner=_owner(request))
        self.downloads.tidy(keep=path)
        files = sorted(p for p in path.rglob("*") if p.is_file())
        size = sum(p.stat().st_size for p in files)
        where = f"as `{path.name}`" if self.policy.shared else f"to `{path}`"
        tools = (", a mergekit config and the llama.cpp `--prune-layers` argument"
                 if (path / export_texts.MERGEKIT_FILE).exists() else "")
        message = (f"Saved {where} ({size / 2**30:.2f} GiB) with a model card{tools}: "
                   "`AutoModelForCausalLM.from_pretrained` loads it.")
        if self.downloads.offered(size):
            return message, [str(p) for p in files]
        if self.policy.shared:  # nobody could ever fetch it
            exports.remove_export(path)
            raise InvalidInput(f"This export takes {size / 2**30:.2f} GiB: more than this server offers for "
                               "download. Export a smaller model, or run LayerCut on your own machine.")
        return message + " It is too large to offer for download here.", None

    # ------------------------------------------------------------------ compare
    @user_errors
    def generate(self, session: Session, prompt: str, max_new_tokens, temperature, top_p, seed,
                 request: gr.Request = None, progress=gr.Progress()):
        """Stream every compared model's answer to the same prompt, side by side; last, the answers' token ids."""
        _need_model(session)
        prompt = inputs.prompt(prompt, self.policy)
        settings = dict(max_new_tokens=inputs.whole_number(max_new_tokens, "Max new tokens", minimum=1, maximum=2048),
                        temperature=inputs.real_number(temperature, "Temperature", minimum=0, maximum=5),
                        top_p=inputs.real_number(top_p, "Top-p", minimum=0, maximum=1),
                        seed=inputs.whole_number(seed, "The seed", minimum=0, maximum=inputs.LARGEST_SEED))
        variants = session.variants()
        for state in self.backend.generate(session.spec, variants, prompt, progress=reporter(progress),
                                           owner=_owner(request), **settings):
            outputs = []
            for label in ("original", *SLOTS):
                side = state.get(label)
                empty = f"(no {label} cut: choose one under Analyze & cut → Cut {label})"
                outputs += [gr.update(value=side["text"] if side else empty, label=text.column_label(label, variants)),
                            text.generation_stats(side)]
            yield *outputs, {label: side["token_ids"] for label, side in state.items()}  # the answers, for explaining

    @user_errors
    def speed(self, session: Session, batch_sizes: list, prompt_len, new_tokens, repeats, request: gr.Request = None,
              progress=gr.Progress()):
        _need_model(session)
        if not batch_sizes:
            raise InvalidInput("Choose at least one batch size.")
        batches = sorted({inputs.whole_number(b, "A batch size", minimum=1, maximum=256) for b in batch_sizes})
        found = self.backend.speed(
            session.spec, session.variants(), batch_sizes=tuple(batches),
            prompt_len=inputs.whole_number(prompt_len, "Prompt tokens", minimum=1, maximum=8192),
            new_tokens=(inputs.whole_number(new_tokens, "New tokens", minimum=2, maximum=1024),),
            repeats=inputs.whole_number(repeats, "Repeats", minimum=1, maximum=50), progress=reporter(progress),
            owner=_owner(request))
        return (to_dataframe(found), plots.speedup_figure(found),
                plots.comparison_figure(found, group="speed", unit="tokens/s", title="Throughput"),
                text.model_notes(found, "sparsity_note"))

    @user_errors
    def memory(self, session: Session, request: gr.Request = None, progress=gr.Progress()):
        _need_model(session)
        found = self.backend.memory(session.spec, session.variants(), progress=reporter(progress),
                                    owner=_owner(request))
        sizes = [m for m in found if m.unit]  # the parameter count has no unit and another scale
        return (to_dataframe(found), plots.comparison_figure(sizes, unit=_main_unit(sizes), title="Memory"),
                text.model_notes(found, "note"))

    @user_errors
    def benchmarks(self, session: Session, tasks: list, limit, num_fewshot, request: gr.Request = None,
                   progress=gr.Progress()):
        _need_model(session)
        if not tasks:
            raise InvalidInput("Choose at least one benchmark task.")
        task_request = lm_eval_adapter.check_request(
            list(tasks), limit=self.policy.limit(limit, "Questions per task"),
            num_fewshot=inputs.whole_number(num_fewshot or 0, "Few-shot examples", minimum=0, maximum=25),
            data_dir=self.backend.data_dir)
        found = self.backend.benchmarks(session.spec, session.variants(), task_request, progress=reporter(progress),
                                        owner=_owner(request))
        return self._results_outputs(session.with_results(found))

    @user_errors
    def perplexity(self, session: Session, seq_len, max_windows, request: gr.Request = None, progress=gr.Progress()):
        _need_model(session)
        found = self.backend.perplexity(session.spec, session.variants(),
                                        seq_lens=(inputs.whole_number(seq_len, "The window", minimum=2,
                                                                      maximum=8192),),
                                        max_windows=self.policy.limit(max_windows, "Windows"),
                                        progress=reporter(progress), owner=_owner(request))
        return self._results_outputs(session.with_results(found))

    @user_errors
    def sweep(self, session: Session, task: str, block_size, limit, request: gr.Request = None,
              progress=gr.Progress()):
        """Measure every cut of K layers on one task, and rank the methods by agreement with it."""
        info = _need_model(session)
        size = inputs.whole_number(block_size, "Block size K", minimum=1, maximum=info.num_layers - 1)
        task_request = lm_eval_adapter.check_request([task], limit=self.policy.limit(limit, "Questions"),
                                                     data_dir=self.backend.data_dir)
        report = self.backend.sweep(session.spec, task_request, size, calibration=self.default_calibration,
                                    progress=reporter(progress), owner=_owner(request))
        rows = [[method, None if rho != rho else round(rho, 3)]
                for method, rho in sorted(report.agreement.items(), key=lambda kv: -(kv[1] if kv[1] == kv[1] else -2))]
        rows += [[method, "failed"] for method in report.failed]
        return plots.sweep_figure(report), rows, text.sweep_summary(report)

    @user_errors
    def sparsity_sweep(self, session: Session, task: str, levels: str, methods: list, limit, windows,
                       request: gr.Request = None, progress=gr.Progress()):
        """One task's metric and WikiText-2 perplexity at each sparsity level, per method (each point cached)."""
        _need_model(session)
        task_request = lm_eval_adapter.check_request([task], limit=self.policy.limit(limit, "Questions"),
                                                     data_dir=self.backend.data_dir)
        result = self.backend.sparsity_sweep(
            session.spec, task_request, levels=inputs.percentages(levels, "Sparsity levels"), methods=methods or [],
            calibration=self.default_calibration,
            ppl_windows=inputs.whole_number(windows, "Perplexity windows", minimum=1, maximum=1000),
            progress=reporter(progress), owner=_owner(request))
        return plots.sparsity_sweep_figure(result), format_table(result)

    @user_errors
    def cancel(self, request: gr.Request = None):
        """Stop this visitor's jobs only."""
        self.backend.cancel(_owner(request) or "")
        gr.Info("Stopping your running job…")

    def server_memory(self):
        """The server's memory, for the line under the pickers (refreshed by a timer: other visitors change it)."""
        return text.server_memory_markdown(allocator.server_memory(self.backend.variants))

    def page_closed(self, request: gr.Request = None):
        """The visitor's page closed (Gradio's heartbeat ended): stop their jobs, streamed or not, so the device
        is free for others at once. Their exports stay for their hour (``ui.downloads``)."""
        owner = _owner(request)
        if owner:
            self.backend.cancel(owner)

    # ------------------------------------------------------------------ outputs
    def _cut_outputs(self, session: Session) -> tuple:
        """(range, cut banner, heatmap, layer bars, greedy curve, named-cut radio, edited slot, session) for the edited slot."""
        info, result, recipe = session.info, session.result, session.cut()
        cut = recipe.depth_cut if recipe else None
        drop = recipe.sublayer_drop if recipe else None
        layers, params = (info.num_layers, list(info.layer_params)) if info else (0, [])
        value = (cut.span or (cut.layers[0], cut.layers[-1] + 1)) if cut else (0, 1)
        custom = list(cut.layers) if cut and cut.span is None else [] if recipe and not cut else None
        slider = range_update(value, layers=layers, layer_params=params, total_params=info.num_params if info else 0,
                              custom=custom)
        if session.loading:
            heat = plots.empty_figure(f"Loading {session.loading}…")
            bars = plots.empty_figure("")
        elif result is None:
            heat = plots.empty_figure("Analyze to see which blocks matter least")
            bars = plots.empty_figure("Per-layer scores appear after the analysis")
        else:
            heat = plots.heatmap_figure(result, selected=cut.span if cut else None)
            bars = plots.layer_bar_figure(result, cut.layers if cut else (),
                                          {ATTENTION: drop.attention, MLP: drop.mlp} if drop else None)
        greedy = result is not None and "ppl_curve" in result.params
        curve = gr.update(value=plots.greedy_curve_figure(result) if greedy else None, visible=greedy)
        names = list((result.cuts or {}) if result else {})
        named = gr.update(choices=names, value=None, visible=bool(names), **text.named_cuts_label(result))
        return (slider, text.banner_markdown(session), heat, bars, curve, named, gr.update(value=session.editing),
                session)

    def _results_outputs(self, session: Session):
        found = list(session.results)
        return (to_dataframe(found), plots.comparison_figure(found, unit=_main_unit(found), title="Benchmarks"),
                session)


def _owner(request: gr.Request | None) -> str | None:
    """Whose job this is: the browser session's id (None outside Gradio)."""
    return getattr(request, "session_hash", None) if request is not None else None


def _need_model(session: Session):
    if session.loading:
        raise InvalidInput(f"{session.loading} is still loading: wait until its heatmap shows.")
    if session.info is None:
        raise InvalidInput("Load a model first.")
    return session.info


def _rank_map(session: Session, recipes: dict) -> tuple:
    """(its box, the rank heatmap) of the last decomposed variant built; the box hidden when none of ``recipes``
    decomposes (a plot's own visibility cannot be toggled: it would lose its height)."""
    for slot, recipe in recipes.items():
        if any(isinstance(item, Decompose) for item in recipe.steps):
            title = f"Ranks of {slot} ({recipe.short()}), by arithmetic"
            return gr.update(visible=True), plots.rank_figure(recipe.size(session.info.size), title)
    return gr.update(visible=False), gr.update()


def _size_update(info):
    return gr.update(maximum=max(1, info.num_layers - 1), value=default_block_size(info.num_layers))


def _main_unit(measurements: list[Measurement]) -> str | None:
    units = [m.unit for m in measurements]
    return max(set(units), key=units.count) if units else None
