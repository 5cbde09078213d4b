"""Plotly figures for the UI: importance heatmap, per-layer bars, comparison bar charts, sweeps (the figures
inside one compressed model are in ``ui.explain_plots``).

Pure functions of results; no Gradio and no model code here, so they are tested directly.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

ORIGINAL, PRUNED, SECOND, IDEAL = "#4c78a8", "#e45756", "#f58518", "#bab0ac"
MODEL_COLORS = (ORIGINAL, PRUNED, SECOND)  # the original, A, B
KEPT, REMOVED, PROTECTED = "#9ecae9", "#e45756", "#bdbdbd"
FONT = dict(size=15)  # readable on a projector
# Lower score = more removable: green = cheap to cut, red = expensive.
COLORSCALE = "RdYlGn_r"


def styled(fig: go.Figure, **extra) -> go.Figure:
    """The page's look for a figure: white, large type, a transparent background, the legend on top."""
    base = dict(template="plotly_white", font=FONT, margin=dict(l=60, r=20, t=80, b=55),
                paper_bgcolor="rgba(0,0,0,0)", legend=dict(orientation="h", y=1.0, yanchor="bottom", x=0))
    fig.update_layout(**{**base, **extra})
    return fig


def row_normalized(block_scores: np.ndarray) -> np.ndarray:
    """Scale each block size's finite scores to 0…1 (0 = most removable); NaN elsewhere.

    Block sums grow with the block size, so one global colour scale would only show the size;
    per-row scaling shows where, for each size, the cheapest block lies.
    """
    scores = np.asarray(block_scores, dtype=float)
    out = np.full(scores.shape, np.nan)
    for row in range(scores.shape[0]):
        finite = np.isfinite(scores[row])
        if not finite.any():
            continue
        values = scores[row, finite]
        span = values.max() - values.min()
        out[row, finite] = (values - values.min()) / span if span > 0 else 0.0
    return out


def _fmt(value: float) -> str:
    if np.isnan(value):
        return ""
    if np.isinf(value):
        return "protected"
    return f"{value:.4g}"


def heatmap_figure(result, selected: tuple[int, int] | None = None, title: str | None = None) -> go.Figure:
    """Importance over (block size × start layer), the best block per size and the selection marked.

    Rows are block sizes 1 … L-1 (removing all L layers is not a cut); a cell at (start, n)
    is the block [start, start + n).
    """
    scores = np.asarray(result.block_scores, dtype=float)
    layers = scores.shape[1]
    sizes = list(range(1, layers))
    scores = scores[: layers - 1]
    starts = list(range(layers))
    ends = np.array(starts)[None, :] + np.array(sizes)[:, None]  # exclusive end of each cell
    custom = np.stack([ends - 1, ends, np.vectorize(_fmt, otypes=[object])(scores)], axis=-1)
    color = row_normalized(scores)
    fig = go.Figure()
    fig.add_trace(go.Heatmap(
        z=_nullable(color), x=starts, y=sizes, customdata=custom, colorscale=COLORSCALE, zmin=0, zmax=1,
        hoverongaps=False, name="score", xgap=1, ygap=1,
        colorbar=dict(title=dict(text="within size", side="right"), tickvals=[0, 1],
                      ticktext=["most<br>removable", "least"], len=0.8, thickness=14),
        hovertemplate=("remove layers %{x}…%{customdata[0]} = [%{x}, %{customdata[1]})<br>"
                       "%{y} layers · " + result.score_label + ": %{customdata[2]}<extra></extra>"),
    ))
    protected = np.where(np.isposinf(scores), 1.0, np.nan)
    if np.isfinite(protected).any():
        fig.add_trace(go.Heatmap(
            z=_nullable(protected), x=starts, y=sizes, customdata=custom, showscale=False, hoverongaps=False,
            colorscale=[[0, PROTECTED], [1, PROTECTED]], xgap=1, ygap=1, name="protected",
            hovertemplate="[%{x}, %{customdata[1]}) touches a protected layer<extra></extra>",
        ))
    best = {n: block for n, block in result.best_blocks().items() if n < layers}
    if best:
        fig.add_trace(go.Scatter(
            x=[start for start, _ in best.values()], y=list(best), mode="markers", name="best block per size",
            marker=dict(symbol="circle", size=9, color="white", line=dict(color="#222", width=2)),
            hovertemplate="best of size %{y}: [%{x}, %{customdata})<extra></extra>",
            customdata=[end for _, end in best.values()],
        ))
    if selected is not None:
        start, end = selected
        fig.add_trace(go.Scatter(
            x=[start], y=[end - start], mode="markers", name=f"selected [{start}, {end})",
            marker=dict(symbol="square-open", size=20, color="#111", line=dict(width=3)),
            hovertemplate=f"selected: [{start}, {end})<extra></extra>",
        ))
    dtick = 1 if layers <= 32 else 2 if layers <= 64 else 4
    fig.update_xaxes(title="start layer (first layer removed)", dtick=dtick, range=[-0.5, layers - 0.5],
                     showgrid=False, zeroline=False)
    fig.update_yaxes(title="block size n (layers removed)", dtick=dtick, range=[0.5, layers - 0.5],
                     showgrid=False, zeroline=False)
    return styled(fig, title=dict(text=title or f"Importance: {result.score_label} (lower = more removable)"),
                   clickmode="event", hovermode="closest", dragmode=False,
                   hoverdistance=4)  # a click beside a ○ marker selects the cell clicked, not the marker's block


def _nullable(array: np.ndarray) -> list:
    """Plotly JSON wants None, not NaN, for empty cells."""
    return [[None if not np.isfinite(v) else float(v) for v in row] for row in array]


def layer_bar_figure(result, removed: Iterable[int] = (), dropped: dict[str, Iterable[int]] | None = None
                     ) -> go.Figure:
    """One bar per layer; the layers in the current cut in red, protected layers in grey.

    With sub-layer scores: two rows, attention and MLP, one bar per block; red where the cut removes
    the whole layer or ``dropped`` (``{"attention": [...], "mlp": [...]}``) drops that block.
    """
    if result.sublayer_scores:
        return _block_bar_figure(result, set(removed), dropped or {})
    scores = np.asarray(result.layer_scores if result.layer_scores is not None else result.block_scores[0], float)
    removed = set(removed)
    protected = np.isposinf(np.asarray(result.block_scores, float)[0])
    colors = [PROTECTED if protected[i] else REMOVED if i in removed else KEPT for i in range(len(scores))]
    labels = ["protected" if protected[i] else "in the cut" if i in removed else "kept" for i in range(len(scores))]
    fig = go.Figure(go.Bar(
        x=list(range(len(scores))), y=[float(v) if np.isfinite(v) else None for v in scores],
        marker_color=colors, customdata=labels,
        hovertemplate="layer %{x}: %{y:.4g} (%{customdata})<extra></extra>",
    ))
    fig.update_xaxes(title="layer", dtick=1 if len(scores) <= 16 else 2 if len(scores) <= 40 else None, tickangle=0)
    fig.update_yaxes(title=result.score_label)
    return styled(fig, title=dict(text="Per-layer score (red = in the cut)"), showlegend=False,
                   margin=dict(l=60, r=20, t=45, b=50))


def _block_bar_figure(result, removed: set[int], dropped: dict) -> go.Figure:
    kinds = [kind for kind in ("attention", "mlp") if kind in result.sublayer_scores]
    titles = {"attention": "attention blocks", "mlp": "MLP blocks"}
    fig = make_subplots(rows=len(kinds), cols=1, shared_xaxes=True, vertical_spacing=0.14,
                        subplot_titles=[titles[kind] for kind in kinds])
    for row, kind in enumerate(kinds, start=1):
        scores = np.asarray(result.sublayer_scores[kind], float)
        gone = removed | set(dropped.get(kind, ()))
        labels = ["removed" if i in gone else "kept" for i in range(len(scores))]
        fig.add_trace(go.Bar(
            x=list(range(len(scores))), y=[float(v) if np.isfinite(v) else None for v in scores],
            marker_color=[REMOVED if i in gone else KEPT for i in range(len(scores))], customdata=labels,
            name=titles[kind], hovertemplate=f"layer %{{x}} {kind}: %{{y:.4g}} (%{{customdata}})<extra></extra>",
        ), row=row, col=1)
    count = len(result.sublayer_scores[kinds[0]])
    fig.update_xaxes(dtick=1 if count <= 16 else 2 if count <= 40 else None, tickangle=0)
    fig.update_xaxes(title="layer", row=len(kinds), col=1)
    fig.update_yaxes(title="1 − cos", title_font=dict(size=12))
    fig.update_annotations(font=dict(size=13))
    return styled(fig, title=dict(text="Per-block score: 1 − cos(x, x + block(x)) (red = removed)"),
                   showlegend=False, margin=dict(l=60, r=20, t=60, b=50))


def greedy_curve_figure(result) -> go.Figure:
    """Calibration perplexity after each greedy removal (SLEB), each point labelled with the layer it removed."""
    curve, order = result.params["ppl_curve"], result.params["removal_order"]
    labels = [""] + [f"−{layer}" for layer in order]  # the app's notation for a removed layer
    hover = ["all layers"] + [f"removed layer {layer}; cut so far: {sorted(order[:k])}"
                              for k, layer in enumerate(order, start=1)]
    fig = go.Figure(go.Scatter(
        x=list(range(len(curve))), y=curve, mode="lines+markers+text", text=labels, textposition="top center",
        customdata=hover, line=dict(color=PRUNED, width=3), marker=dict(size=9),
        hovertemplate="%{x} removed: perplexity %{y:.4g}<br>%{customdata}<extra></extra>",
    ))
    fig.update_xaxes(title="layers removed (greedy steps)", dtick=1, range=[-0.5, len(curve) - 0.5])
    fig.update_yaxes(title="calibration perplexity", range=[0, max(curve) * 1.15])  # room for the top label
    return styled(fig, title=dict(text="Greedy removal: perplexity after each step"), showlegend=False,
                   margin=dict(l=60, r=20, t=45, b=50))


def grouped_bars(groups: list[str], series: dict[str, list[float | None]], *, title: str, y_title: str,
                 errors: dict[str, list[float | None]] | None = None, colors: dict[str, str] | None = None,
                 y_range: list[float] | None = None, unit: str = "") -> go.Figure:
    """Bars grouped by ``groups`` with one bar per series (e.g. original vs pruned), labelled in ``unit``."""
    palette = colors or {}
    defaults = iter([ORIGINAL, PRUNED, IDEAL, "#72b7b2", "#f58518"])
    fig = go.Figure()
    labels = [g.replace(" (", "<br>(") for g in groups]  # long metric names wrap instead of tilting
    for name, values in series.items():
        err = (errors or {}).get(name)
        fig.add_trace(go.Bar(
            name=name, x=labels, y=values, marker_color=palette.get(name) or next(defaults),
            error_y=dict(type="data", array=[e or 0 for e in err], visible=True, color="#333") if err else None,
            text=[bar_label(v, unit) for v in values], textposition="inside", insidetextanchor="start",
            textfont=dict(color="white"), hovertemplate=f"{name}<br>%{{x}}: %{{y:,.4~r}}<extra></extra>",
        ))
    fig.update_xaxes(tickangle=0)
    fig.update_yaxes(title=y_title, range=y_range)
    return styled(fig, title=dict(text=title), barmode="group")


def bar_label(value, unit: str = "") -> str:
    """Three significant digits a person reads at a glance: "1,530 MiB", "60.5%", "0.0123" (never "1.53e+03")."""
    if value is None or not np.isfinite(value):
        return ""
    rounded = float(f"{value:.3g}")
    number = f"{rounded:,.0f}" if abs(rounded) >= 100 else f"{rounded:.3g}"
    return number + (unit if unit == "%" else f" {unit}" if unit else "")


def empty_figure(message: str) -> go.Figure:
    """A blank chart with a centred hint, for before anything was measured."""
    fig = go.Figure()
    fig.add_annotation(text=message, showarrow=False, font=dict(size=18, color="#888"), x=0.5, y=0.5,
                       xref="paper", yref="paper")
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return styled(fig)


def _rows(measurements, group: str | None = None, unit: str | None = None):
    from evaluation.measure.measurement import comparison_rows

    return [r for r in comparison_rows(list(measurements))
            if (group is None or r.group == group) and (unit is None or r.unit == unit)]


def _value(m) -> float | None:
    return None if m is None or not np.isfinite(m.value) else float(m.value)


def _spread(m) -> float | None:
    return None if m is None or m.spread is None or not np.isfinite(m.spread) else float(m.spread)


def _by_model(rows) -> tuple[list[str], list[str], dict]:
    """Metric names, compared-model labels (original first) and {(label, name): Measurement}."""
    names = list(dict.fromkeys(r.name for r in rows))
    labels = ["original", *dict.fromkeys(r.variant for r in rows if r.variant)]
    found = {}
    for r in rows:
        found[("original", r.name)] = r.original
        if r.variant:
            found[(r.variant, r.name)] = r.pruned
    return names, labels, found


def comparison_figure(measurements, *, group: str | None = None, unit: str | None = None, title: str,
                      y_title: str | None = None) -> go.Figure:
    """The original and each compressed model, one group of bars per metric, ± spread as error bars."""
    rows = _rows(measurements, group, unit)
    if not rows:
        return empty_figure("Nothing measured yet")
    names, labels, found = _by_model(rows)
    series = {label: [_value(found.get((label, n))) for n in names] for label in labels}
    errors = {label: [_spread(found.get((label, n))) for n in names] for label in labels}
    units = {r.unit for r in rows}
    return grouped_bars(names, series, errors=errors, title=title, y_title=y_title or rows[0].unit,
                        colors=dict(zip(labels, MODEL_COLORS)), unit=units.pop() if len(units) == 1 else "")


def speedup_figure(measurements) -> go.Figure:
    """Measured speedup of each compressed model next to its ideal (FLOPs) speedup, per speed metric."""
    rows = [r for r in _rows(measurements, "speed") if r.speedup is not None]
    if not rows:
        return empty_figure("Measure speed to see the speedup")
    names, labels, _ = _by_model(rows)
    series, colors = {}, {}
    for label, color in zip(labels[1:], MODEL_COLORS[1:]):
        mine = {r.name: r for r in rows if r.variant == label}
        prefix = "" if len(labels) == 2 else f"{label}: "
        series[f"{prefix}measured"] = [mine[n].speedup if n in mine else None for n in names]
        series[f"{prefix}ideal (FLOPs)"] = [mine[n].ideal_speedup if n in mine else None for n in names]
        colors[f"{prefix}measured"], colors[f"{prefix}ideal (FLOPs)"] = color, IDEAL
    fig = grouped_bars(names, series, title="Speedup of the compressed models (× original)", y_title="speedup ×",
                       colors=colors)
    fig.add_hline(y=1, line_dash="dot", line_color="#666")
    return fig


def sweep_figure(report) -> go.Figure:
    """Measured quality of every cut of K layers (left axis) beside each method's block score,
    scaled 0…1 per method (right axis): where the curves agree, the proxy can be trusted."""
    sweep = report.sweep
    metric = sweep.primary_metric
    starts = list(sweep.starts)
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=starts, y=sweep.metrics[metric], name=f"measured {metric}", mode="lines+markers",
                             line=dict(color=PRUNED, width=4), marker=dict(size=9)))
    fig.add_hline(y=sweep.baseline[metric], line=dict(color=ORIGINAL, dash="dash"),
                  annotation_text=f"no cut: {sweep.baseline[metric]:.3g}", annotation_position="top left")
    palette = iter(["#4c78a8", "#72b7b2", "#f58518", "#54a24b", "#b279a2", "#9d755d", "#bab0ac"])
    for method, scores in report.scores.items():
        values = np.asarray(scores, dtype=float)
        finite = np.isfinite(values)
        scaled = np.full_like(values, np.nan)
        if finite.any():
            low, high = values[finite].min(), values[finite].max()
            scaled[finite] = (values[finite] - low) / (high - low) if high > low else 0.0
        rho = report.agreement.get(method)
        label = f"{method} (ρ = {rho:+.2f})" if rho is not None and np.isfinite(rho) else method
        fig.add_trace(go.Scatter(x=starts, y=_nullable([scaled])[0], name=label, yaxis="y2", mode="lines",
                                 line=dict(color=next(palette, "#888"), width=2, dash="dot")))
    fig.update_xaxes(title=f"start layer of the removed block of {sweep.block_size}", dtick=1 if len(starts) <= 32 else None)
    return styled(fig, title=dict(text=f"{sweep.task}: every cut of {sweep.block_size} layers, measured"),
                   yaxis=dict(title=metric), legend=dict(orientation="h", y=-0.25, yanchor="top", x=0),
                   yaxis2=dict(title="method score (0 = most removable)", overlaying="y", side="right",
                               range=[-0.05, 1.05], tickvals=[0, 0.25, 0.5, 0.75, 1], showgrid=False),
                   margin=dict(l=60, r=70, t=60, b=120))


def sparsity_sweep_figure(result) -> go.Figure:
    """A sparsity sweep: the task metric (left) and WikiText-2 perplexity on a log scale (right) against
    sparsity, one line per method, the dense model dashed across both panels."""
    percent = [100 * level for level in result.levels]
    unit = " (%)" if result.scale == 100 else ""
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.12,
                        subplot_titles=[f"{result.task} {result.metric}{unit}", "WikiText-2 perplexity (log scale)"])
    palette = iter([PRUNED, SECOND, "#54a24b", "#b279a2", "#72b7b2", "#9d755d"])
    for method in result.methods:
        color = next(palette, "#888")
        for col, values in ((1, [result.scale * v for v in result.accuracy[method]]), (2, result.perplexity[method])):
            fig.add_trace(go.Scatter(x=percent, y=_nullable([values])[0], name=method, legendgroup=method,
                                     showlegend=col == 1, mode="lines+markers", line=dict(color=color, width=3),
                                     hovertemplate=f"{method}, %{{x:g}} % sparsity: %{{y:.4g}}<extra></extra>"),
                          row=1, col=col)
    for col, dense in ((1, result.scale * result.dense_accuracy), (2, result.dense_perplexity)):
        fig.add_trace(go.Scatter(x=[percent[0], percent[-1]], y=[dense, dense], name="dense", legendgroup="dense",
                                 showlegend=col == 1, mode="lines", line=dict(color=ORIGINAL, dash="dash"),
                                 hovertemplate=f"dense: {dense:.4g}<extra></extra>"), row=1, col=col)
    fig.update_xaxes(title="sparsity (% of every matrix zero)")
    fig.update_yaxes(type="log", row=1, col=2)
    fig = styled(fig, title=dict(text=f"{result.task} and perplexity against sparsity, per method"),
                  margin=dict(l=60, r=20, t=80, b=110))
    return fig.update_layout(legend=dict(orientation="h", yanchor="top", y=-0.28, x=0))
