"""Event handlers: turn UI inputs into Backend calls and Backend results into UI outputs.

No model code: everything heavy happens in ``evaluation.backend.Backend``. The per-session
``View`` records what this browser tab shows (analysis, selected block, measurements), so
charts can be redrawn when the cut changes; the models themselves live in the backend.
"""

from __future__ import annotations

import functools
import inspect
import logging
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import gradio as gr

import prune
from evaluation.measurement import Measurement, to_dataframe
from prune.errors import InvalidInput, LayerCutError
from prune.paths import safe_name

from . import plots, text
from .range_control import parse_range, range_update

log = logging.getLogger(__name__)
DOWNLOAD_LIMIT_BYTES = 2 * 2**30  # larger exports are saved but not offered for download


@dataclass
class View:
    """What one browser session shows; models and caches stay in the backend."""

    info: object | None = None  # ModelInfo
    result: prune.ImportanceResult | None = None
    block: tuple[int, int] | None = None  # contiguous cut [start, end)
    layers: list[int] | None = None  # non-contiguous cut (named cuts)
    cut: object | None = None  # CutInfo
    bench: list[Measurement] = field(default_factory=list)


def user_errors(fn):
    """Show LayerCutError messages as Gradio errors; anything else as a short message, never a traceback."""

    def convert(err: Exception) -> gr.Error:
        if isinstance(err, gr.Error):
            return err
        if isinstance(err, LayerCutError):
            return gr.Error(str(err), print_exception=False)
        log.exception("Unexpected error in %s", fn.__name__)
        return gr.Error(f"Something went wrong ({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}). "
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


def reporter(progress):
    """Backend progress callback → gr.Progress."""
    return lambda fraction, message="": progress(float(fraction), desc=message or None)


def default_block_size(num_layers: int) -> int:
    """A sixth of the layers: on the default model the best such block still answers sensibly."""
    return max(1, min(num_layers - 1, round(num_layers / 6)))


class Handlers:
    """One method per UI event; app.py wires them with api names."""

    def __init__(self, backend):
        self.backend = backend

    # ------------------------------------------------------------------ pick
    @user_errors
    def load_model(self, view: View, name: str, token: str, trust_remote_code: bool, dtype: str,
                   progress=gr.Progress()):
        """Load a model (None/empty = the embedded default); clears analysis and cut."""
        name = (name or "").strip() or None
        info = self.backend.load(name, token=(token or "").strip() or None, trust_remote_code=bool(trust_remote_code),
                                 dtype=None if dtype in (None, "", "auto") else dtype, progress=reporter(progress))
        view = View(info=info)
        size = default_block_size(info.num_layers)
        return (text.model_markdown(info), gr.update(maximum=max(1, info.num_layers - 1), value=size),
                *self._cut_outputs(view))

    @user_errors
    def startup(self, view: View, method: str, progress=gr.Progress()):
        """Page opened: show the loaded model (loading the embedded default if none) analyzed by ``method``.

        A demo then needs no clicks to reach the heatmap; analyses are cached on disk, so a
        second visit is instant.
        """
        info = self.backend.info or self.backend.load(None, progress=reporter(progress))
        view = View(info=info)
        size = default_block_size(info.num_layers)
        started = time.perf_counter()
        result = self.backend.analyze(method, progress=reporter(progress))
        cached = time.perf_counter() - started < 0.5 * result.elapsed_s
        view = replace(view, result=result)
        current = self.backend.cut_info
        if current is not None and current.removed == list(range(current.removed[0], current.removed[-1] + 1)):
            view = self._apply_block(view, (current.removed[0], current.removed[-1] + 1))
        elif current is not None:
            view = replace(view, layers=list(current.removed), cut=current)
        else:
            view = self._apply_block(view, result.best_block(size))
        return (text.model_markdown(info), gr.update(maximum=max(1, info.num_layers - 1), value=size),
                *self._cut_outputs(view), _analysis_status(result, cached))

    @user_errors
    def method_info(self, method: str):
        """The method's one-line description and its default options."""
        spec = prune.METHODS[method]
        return text.method_markdown(spec), text.options_text(spec.options)

    @user_errors
    def analyze(self, view: View, method: str, options: str, source: str, detail: str, samples: float,
                seq_len: float, block_size: float, progress=gr.Progress()):
        """Score every block with ``method``, then select the best block of ``block_size`` layers."""
        if view.info is None:
            raise InvalidInput("Load a model first.")
        spec = prune.METHODS[method]
        calibration = _calibration(source, detail, samples, seq_len)
        started = time.perf_counter()
        result = self.backend.analyze(method, calibration=calibration, progress=reporter(progress),
                                      **text.parse_options(options, spec.options))
        cached = time.perf_counter() - started < 0.5 * result.elapsed_s
        view = replace(view, result=result)
        block = result.best_block(min(int(block_size), view.info.num_layers - 1))
        view = self._apply_block(view, block)
        return (*self._cut_outputs(view), _analysis_status(result, cached))

    # ------------------------------------------------------------------ cut
    @user_errors
    def set_cut(self, view: View, value):
        """Cut the block ``value = [start, end]`` (end exclusive)."""
        info = self._need_model(view)
        return self._cut_outputs(self._apply_block(view, parse_range(value, info.num_layers)))

    @user_errors
    def select_cell(self, view: View, evt: gr.EventData):
        """A heatmap click at (start, block size) selects that block."""
        info = self._need_model(view)
        try:
            start, size = int(evt.x), int(evt.y)
        except (AttributeError, TypeError, ValueError):
            raise InvalidInput("Click a cell of the heatmap to select its block.") from None
        return self._cut_outputs(self._apply_block(view, parse_range([start, start + size], info.num_layers)))

    @user_errors
    def best_block(self, view: View, size: float):
        if view.result is None:
            raise InvalidInput("Analyze first: the best block comes from the importance scores.")
        return self._cut_outputs(self._apply_block(view, view.result.best_block(int(size))))

    @user_errors
    def named_cut(self, view: View, name: str):
        """A named non-contiguous cut of the analysis (e.g. persistence "10%")."""
        if view.result is None or name not in (view.result.cuts or {}):
            raise InvalidInput(f"No cut named '{name}' in this analysis.")
        layers = sorted(view.result.cuts[name])
        if layers == list(range(layers[0], layers[-1] + 1)):  # contiguous: a block the heatmap can mark
            return self._cut_outputs(self._apply_block(view, (layers[0], layers[-1] + 1)))
        cut = self.backend.set_cut_layers(layers)
        return self._cut_outputs(replace(view, block=None, layers=layers, cut=cut))

    @user_errors
    def export(self, view: View, folder: str, progress=gr.Progress()):
        """Save the pruned model as a Hugging Face checkpoint; offer its files for download."""
        if view.cut is None:
            raise InvalidInput("Choose a cut first: there is nothing to export yet.")
        default = f"{Path(view.info.name).name}-minus-{len(view.cut.removed)}-layers"
        folder = (folder or "").strip() or safe_name(default)
        path = Path(self.backend.export(folder)).resolve()
        files = sorted(p for p in path.rglob("*") if p.is_file())
        size = sum(p.stat().st_size for p in files)
        message = (f"Saved to `{path}` ({size / 2**30:.2f} GiB): a normal Hugging Face checkpoint, "
                   "`AutoModelForCausalLM.from_pretrained` loads it.")
        if size > DOWNLOAD_LIMIT_BYTES:
            return message + " It is too large to offer for download here.", None
        return message, [str(p) for p in files]

    # ------------------------------------------------------------------ compare
    @user_errors
    def generate(self, view: View, prompt: str, max_new_tokens: float, temperature: float, top_p: float,
                 seed: float, progress=gr.Progress()):
        """Stream both models' answers to the same prompt, side by side."""
        if not (prompt or "").strip():
            raise InvalidInput("The prompt is empty: type something or pick an example.")
        for state in self.backend.generate(prompt, max_new_tokens=int(max_new_tokens), temperature=float(temperature),
                                           top_p=float(top_p), seed=int(seed), progress=reporter(progress)):
            original, pruned = state.get("original") or {}, state.get("pruned") or {}
            yield (original.get("text", ""), text.generation_stats(original),
                   pruned.get("text", "") if pruned else "(no cut chosen: only the original runs)",
                   text.generation_stats(pruned))

    @user_errors
    def speed(self, view: View, batch_sizes: list, prompt_len: float, new_tokens: float, repeats: float,
              progress=gr.Progress()):
        if not batch_sizes:
            raise InvalidInput("Choose at least one batch size.")
        measurements = self.backend.speed(batch_sizes=tuple(sorted(int(b) for b in batch_sizes)),
                                          prompt_len=int(prompt_len), new_tokens=(int(new_tokens),),
                                          repeats=int(repeats), progress=reporter(progress))
        return (to_dataframe(measurements), plots.speedup_figure(measurements),
                plots.comparison_figure(measurements, group="speed", unit="tokens/s", title="Throughput"))

    @user_errors
    def memory(self, view: View, progress=gr.Progress()):
        measurements = self.backend.memory(progress=reporter(progress))
        sizes = [m for m in measurements if m.unit]  # the parameter count has no unit and another scale
        return to_dataframe(measurements), plots.comparison_figure(sizes, unit=_main_unit(sizes), title="Memory")

    @user_errors
    def benchmarks(self, view: View, tasks: list, limit: float, num_fewshot: float, progress=gr.Progress()):
        if not tasks:
            raise InvalidInput("Choose at least one benchmark task.")
        limit = int(limit) if limit and int(limit) > 0 else None
        measurements = self.backend.benchmarks(list(tasks), limit=limit, num_fewshot=int(num_fewshot or 0),
                                               progress=reporter(progress))
        return self._bench_outputs(view, measurements)

    @user_errors
    def perplexity(self, view: View, seq_len: float, max_windows: float, progress=gr.Progress()):
        windows = int(max_windows) if max_windows and int(max_windows) > 0 else None
        measurements = self.backend.perplexity(seq_lens=(int(seq_len),), max_windows=windows,
                                               progress=reporter(progress))
        return self._bench_outputs(view, measurements)

    @user_errors
    def sweep(self, view: View, task: str, block_size: float, limit: float, progress=gr.Progress()):
        """Measure every cut of K layers on one task, and rank the methods by agreement with it."""
        self._need_model(view)
        limit = int(limit) if limit and int(limit) > 0 else None
        report = self.backend.sweep(task, int(block_size or 0), limit=limit, progress=reporter(progress))
        rows = [[method, None if rho != rho else round(rho, 3)]
                for method, rho in sorted(report.agreement.items(), key=lambda kv: -(kv[1] if kv[1] == kv[1] else -2))]
        best, worst = report.sweep.best_start(), report.sweep.worst_start()
        k = report.sweep.block_size
        summary = (f"Best cut measured: **[{best}, {best + k})**; worst: **[{worst}, {worst + k})** "
                   f"({report.sweep.primary_metric}, {report.sweep.limit or 'all'} questions).")
        return plots.sweep_figure(report), rows, summary

    @user_errors
    def cancel(self):
        self.backend.cancel()
        gr.Info("Stopping the running job…")

    # ------------------------------------------------------------------ helpers
    def _need_model(self, view: View):
        if view.info is None:
            raise InvalidInput("Load a model first.")
        return view.info

    def _apply_block(self, view: View, block: tuple[int, int]) -> View:
        cut = self.backend.set_cut(*block)
        return replace(view, block=tuple(block), layers=None, cut=cut)

    def _cut_outputs(self, view: View) -> tuple:
        """(range, cut banner, heatmap, layer bars, named-cut radio, view) for the current cut."""
        info, result = view.info, view.result
        layers, params = (info.num_layers, list(info.layer_params)) if info else (0, [])
        total = info.num_params if info else 0
        value = view.block or ([min(view.layers), max(view.layers) + 1] if view.layers else [0, 1])
        slider = range_update(value, layers=layers, layer_params=params, total_params=total, custom=view.layers)
        removed = view.layers or (list(range(*view.block)) if view.block else [])
        if result is None:
            heat = plots.empty_figure("Analyze to see which blocks matter least")
            bars = plots.empty_figure("Per-layer scores appear after the analysis")
        else:
            heat = plots.heatmap_figure(result, selected=view.block)
            bars = plots.layer_bar_figure(result, removed)
        names = list((result.cuts or {}) if result else {})
        named = gr.update(choices=names, value=None, visible=bool(names))
        return slider, text.cut_markdown(view.cut), heat, bars, named, view

    def _bench_outputs(self, view: View, measurements: list[Measurement]):
        fresh = {(m.group, m.name, m.model) for m in measurements}
        merged = [m for m in view.bench if (m.group, m.name, m.model) not in fresh] + list(measurements)
        view = replace(view, bench=merged)
        return (to_dataframe(merged), plots.comparison_figure(merged, unit=_main_unit(merged), title="Benchmarks"),
                view)


def _calibration(source: str, detail: str, samples: float, seq_len: float) -> prune.Calibration:
    detail = (detail or "").strip() or None
    where = {"text": "text", "file": "path", "wikitext2": "path", "hub": "dataset"}.get(source)
    return prune.Calibration(source=source, n_samples=int(samples), seq_len=int(seq_len),
                             **({where: detail} if where and detail else {}))


def _analysis_status(result, cached: bool) -> str:
    spec = prune.METHODS.get(result.method)
    label = f"**{spec.label}**" if spec else result.method
    if cached:
        return f"{label}: from the cache ({result.elapsed_s:.1f} s to compute)"
    return f"{label}: scored in {result.elapsed_s:.1f} s"


def _main_unit(measurements: list[Measurement]) -> str | None:
    units = [m.unit for m in measurements]
    return max(set(units), key=units.count) if units else None
