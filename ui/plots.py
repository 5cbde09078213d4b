"""Plotly figures for the UI: importance heatmap, per-layer bars, comparison bar charts, sweeps (the figures
inside one compressed model are in ``ui.explain_plots``).

Pure functions of results; no Gradio and no model code here, so they are tested directly.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from evaluation.serving import comparison_rows, decimals
from prune.core.structure import SHORT
from ui.palette import (COLORSCALE, IDEAL, IN_CUT, IN_CUT_PATTERN, KEPT, MEASURED, MODEL_COLORS, PROTECTED, SERIES,
                        ink, model_colors, series_looks)

FONT = dict(size=16)  # every text on a chart ≥ 14 px: readable on a projector at 1280 × 720
TITLE_FONT = dict(size=19)
# Below the plot, across the bottom of the figure: a legend never covers the title or the data.
LEGEND_BELOW = dict(orientation="h", yref="container", y=0, yanchor="bottom", xref="container", x=0.01, xanchor="left")
# The importance map's empty upper-right triangle (no block of n layers starts past layer L − n): room to spare.
LEGEND_IN_CORNER = dict(orientation="v", xref="paper", x=1, xanchor="right", yref="paper", y=1, yanchor="top",
                        bgcolor="rgba(255,255,255,0.85)")


def styled(fig: go.Figure, **extra) -> go.Figure:
    """The page's look for a figure: white, large type, a transparent background, the title left in its own margin,
    the legend below the plot; ``extra`` layout settings merge into these (a title's text keeps the title's font)."""
    fig.update_layout(template="plotly_white", font=FONT, paper_bgcolor="rgba(0,0,0,0)", legend=LEGEND_BELOW,
                      title=dict(font=TITLE_FONT, x=0.01, xanchor="left", xref="container", y=1, yanchor="top",
                                 yref="container", automargin=True, pad=dict(t=12, b=12)),
                      margin=dict(l=70, r=20, t=60, b=20))
    fig.update_xaxes(automargin=True)
    fig.update_yaxes(automargin=True)
    return fig.update_layout(**extra)


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
        colorbar=dict(title=dict(text="score within its size", side="right"), tickvals=[0, 1],
                      ticktext=["most<br>removable", "least<br>removable"], len=0.9, thickness=16),
        hovertemplate=("remove layers %{x}…%{customdata[0]} = [%{x}, %{customdata[1]})<br>"
                       "%{y} layers · " + result.score_label + ": %{customdata[2]}<extra></extra>"),
    ))
    protected = np.where(np.isposinf(scores), 1.0, np.nan)
    if np.isfinite(protected).any():
        fig.add_trace(go.Heatmap(
            z=_nullable(protected), x=starts, y=sizes, customdata=custom, showscale=False, hoverongaps=False,
            colorscale=[[0, PROTECTED], [1, PROTECTED]], xgap=1, ygap=1, name="protected",
            hovertemplate="[%{x}, %{customdata[1]}) " + ("is never cut: it spans two stacks, empties one or touches a "
                                                         "protected layer" if "stacks" in result.params else
                                                         "touches a protected layer") + "<extra></extra>",
        ))
    for name, start, _end in result.params.get("stacks", [])[1:]:  # an encoder-decoder: where the next stack starts
        fig.add_vline(x=start - 0.5, line=dict(color="#222", width=2, dash="dash"))
        fig.add_annotation(x=start - 0.5, y=1, yref="paper", text=f"{name} →", showarrow=False, xanchor="left",
                           yanchor="bottom")
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
    kinds = result.params.get("layer_kinds")
    # Ticks spaced by Plotly for the map's size on the page (every 2nd or 5th layer): labels never touch. A mixture
    # of experts or a hybrid: each layer's kind under its number (every 2nd or 4th layer past 32), the key in the title.
    shown = starts[::layer_dtick(layers)]
    ticks = {} if not kinds else dict(tickvals=shown, tickfont=dict(size=10),
                                      ticktext=[f"{i}<br>{_kind_mark(kinds[i])}" for i in shown])
    fig.update_xaxes(title="start layer (first removed)" + (f" · {_kind_key(kinds)}" if kinds else ""),
                     range=[-0.5, layers - 0.5], showgrid=False, zeroline=False, **ticks)
    fig.update_yaxes(title="layers removed, n", range=[0.5, layers - 0.5], showgrid=False, zeroline=False)
    return styled(fig, title=dict(text=title or f"Importance: {result.score_label} (lower = more removable)"),
                  legend=LEGEND_IN_CORNER, clickmode="event", hovermode="closest", dragmode=False,
                  hoverdistance=4)  # a click beside a ○ marker selects the cell clicked, not the marker's block


def _kind_mark(kind: str) -> str:
    """'linear attention · experts' → 'L·E': the letters the heatmap writes under a layer."""
    mixer, _, mlp = kind.partition(" · ")
    return SHORT.get(mixer, "?") + ("·E" if mlp == "experts" else "")


def _kind_key(kinds: list[str]) -> str:
    """The key to the letters that occur: 'A attention, L linear attention, E experts'."""
    mixers = dict.fromkeys(k.partition(" · ")[0] for k in kinds)
    key = [f"{SHORT.get(m, '?')} {m}" for m in mixers]
    return ", ".join(key + (["E experts"] if any(k.endswith("experts") for k in kinds) else []))


def layer_dtick(layers: int) -> int:
    """A tick on every layer up to 32 (a full-width chart's labels fit), else on every 2nd or 4th; a narrower chart
    tilts them."""
    return 1 if layers <= 32 else 2 if layers <= 64 else 4


def _nullable(array: np.ndarray) -> list:
    """Plotly JSON wants None, not NaN, for empty cells."""
    return [[None if not np.isfinite(v) else float(v) for v in row] for row in array]


def layer_bar_figure(result, removed: Iterable[int] = (), dropped: dict[str, Iterable[int]] | None = None
                     ) -> go.Figure:
    """One bar per layer; the layers in the current cut orange and hatched, protected layers grey.

    With sub-layer scores: two rows, attention and MLP, one bar per block; marked where the cut removes
    the whole layer or ``dropped`` (``{"attention": [...], "mlp": [...]}``) drops that block.
    """
    if result.sublayer_scores:
        return _block_bar_figure(result, set(removed), dropped or {})
    scores = np.asarray(result.layer_scores if result.layer_scores is not None else result.block_scores[0], float)
    removed = set(removed)
    protected = np.isposinf(np.asarray(result.block_scores, float)[0])
    states = ["protected" if protected[i] else "in the cut" if i in removed else "kept" for i in range(len(scores))]
    fig = go.Figure(_bars(scores, states, "layer %{x}: %{y:.4g} (%{customdata})<extra></extra>"))
    fig.update_xaxes(title="layer", dtick=layer_dtick(len(scores)))
    fig.update_yaxes(title=result.score_label)
    return styled(fig, title=dict(text="Per-layer score (orange, hatched = in the cut; grey = protected)"),
                  showlegend=False)


_STATE_LOOK = {"kept": (KEPT, ""), "in the cut": (IN_CUT, IN_CUT_PATTERN), "removed": (IN_CUT, IN_CUT_PATTERN),
               "protected": (PROTECTED, "")}


def _bars(scores: np.ndarray, states: list[str], hover: str, **kwargs) -> go.Bar:
    """One bar per layer coloured (and, in a cut, hatched) by its state."""
    return go.Bar(x=list(range(len(scores))), y=[float(v) if np.isfinite(v) else None for v in scores],
                  marker=dict(color=[_STATE_LOOK[s][0] for s in states],
                              pattern=dict(shape=[_STATE_LOOK[s][1] for s in states], fgcolor="#333", solidity=0.3)),
                  customdata=states, hovertemplate=hover, **kwargs)


def _block_bar_figure(result, removed: set[int], dropped: dict) -> go.Figure:
    kinds = [kind for kind in ("attention", "mlp") if kind in result.sublayer_scores]
    titles = {"attention": "attention blocks", "mlp": "MLP blocks"}
    fig = make_subplots(rows=len(kinds), cols=1, shared_xaxes=True, vertical_spacing=0.16,
                        subplot_titles=[titles[kind] for kind in kinds])
    for row, kind in enumerate(kinds, start=1):
        scores = np.asarray(result.sublayer_scores[kind], float)
        gone = removed | set(dropped.get(kind, ()))
        states = ["removed" if i in gone else "kept" for i in range(len(scores))]
        fig.add_trace(_bars(scores, states, f"layer %{{x}} {kind}: %{{y:.4g}} (%{{customdata}})<extra></extra>",
                            name=titles[kind]), row=row, col=1)
    count = len(result.sublayer_scores[kinds[0]])
    fig.update_xaxes(dtick=layer_dtick(count))
    fig.update_xaxes(title="layer", row=len(kinds), col=1)
    fig.update_yaxes(title="1 − cos")
    return styled(fig, title=dict(text="Per-block score: 1 − cos(x, x + block(x)) (orange, hatched = removed)"),
                  showlegend=False, margin=dict(t=70))


def greedy_curve_figure(result) -> go.Figure:
    """Calibration perplexity after each greedy removal (SLEB), each point labelled with the layer it removed."""
    curve, order = result.params["ppl_curve"], result.params["removal_order"]
    labels = [""] + [f"−{layer}" for layer in order]  # the app's notation for a removed layer
    hover = ["all layers"] + [f"removed layer {layer}; cut so far: {sorted(order[:k])}"
                              for k, layer in enumerate(order, start=1)]
    fig = go.Figure(go.Scatter(
        x=list(range(len(curve))), y=curve, mode="lines+markers+text", text=labels, textposition="top center",
        customdata=hover, line=dict(color=SERIES[0], width=3), marker=dict(size=9),
        hovertemplate="%{x} removed: perplexity %{y:.4g}<br>%{customdata}<extra></extra>",
    ))
    fig.update_xaxes(title="layers removed (greedy steps)", dtick=1, range=[-0.5, len(curve) - 0.5])
    fig.update_yaxes(title="calibration perplexity", range=[0, max(curve) * 1.15])  # room for the top label
    return styled(fig, title=dict(text="Greedy removal: perplexity after each step"), showlegend=False)


MAX_COLUMNS = 3  # groups of bars side by side (their names fit below even on half the page); more lie down


def grouped_bars(groups: list[str], series: dict[str, list[float | None]], *, title: str, y_title: str,
                 errors: dict[str, list[float | None]] | None = None, names: dict[str, str] | None = None,
                 y_range: list[float] | None = None, unit: str = "") -> go.Figure:
    """Bars grouped by ``groups`` with one bar per compared model (``series`` keyed by its label: "original", "A",
    "B", each in its own colour), labelled in ``unit``; ``names`` gives a label's name in the legend. Past
    ``MAX_COLUMNS`` groups the bars lie down (``y_title`` then titles the horizontal value axis)."""
    colors = model_colors(series)
    places = decimals(v for values in series.values() for v in values)  # one number format on the whole chart
    lying = len(groups) > MAX_COLUMNS
    fig = go.Figure()
    ticks = [wrapped(g, 28 if lying else 18) for g in groups]
    for label, values in series.items():
        spread = (errors or {}).get(label)
        err = (dict(type="data", array=[e or 0 for e in spread], visible=True, color="#333") if any(spread or ())
               else None)
        name = (names or {}).get(label, label)
        where = dict(x=values, y=ticks, orientation="h", error_x=err) if lying else dict(x=ticks, y=values, error_y=err)
        fig.add_trace(go.Bar(
            name=name, marker_color=colors[label], offsetgroup=label, **where,
            text=[bar_label(v, "%" if unit == "%" else "", places) for v in values],  # other units: on the axis
            textposition="inside", insidetextanchor="start",
            textangle=0, textfont=dict(color=ink(colors[label])),
            hovertemplate=f"{name}<br>%{{{'y' if lying else 'x'}}}: %{{{'x' if lying else 'y'}:,.4~r}}<extra></extra>",
        ))
    values_axis, groups_axis = (fig.update_xaxes, fig.update_yaxes) if lying else (fig.update_yaxes, fig.update_xaxes)
    values_axis(title=y_title, range=y_range)
    groups_axis(autorange="reversed" if lying else None,  # lying: the first group on top
                tickfont=dict(size=14) if lying else None)  # two lines a group, at the least readable size
    # A bar too narrow for its number at 14 px shows none (the hover still has it), never a smaller one.
    return styled(fig, title=dict(text=title), barmode="group", uniformtext=dict(minsize=14, mode="hide"))


def wrapped(name: str, width: int = 18) -> str:
    """A category's name on lines of about ``width`` characters, its parenthesis on a line of its own."""
    head, _, tail = name.partition(" (")
    lines = textwrap.wrap(head, width) + (textwrap.wrap("(" + tail, width) if tail else [])
    return "<br>".join(lines)


def bar_label(value, unit: str = "", places: int | None = None) -> str:
    """A number a person reads at a glance: "1,530 MiB", "60.5%", "0.0123" (never "1.53e+03"); three significant
    digits, or ``places`` decimals (a chart's bars all with the same)."""
    if value is None or not np.isfinite(value):
        return ""
    if places is None:
        rounded = float(f"{value:.3g}")
        number = f"{rounded:,.0f}" if abs(rounded) >= 100 else f"{rounded:.3g}"
    else:
        number = f"{value:,.{places}f}"
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
                      y_title: str | None = None, names: dict[str, str] | None = None) -> go.Figure:
    """The original and each compressed model, one group of bars per metric, ± spread as error bars; ``names``:
    each model's name in the legend (``text.model_names``: the recipe beside "A")."""
    rows = _rows(measurements, group, unit)
    if not rows:
        return empty_figure("Nothing measured yet")
    metrics, labels, found = _by_model(rows)
    series = {label: [_value(found.get((label, n))) for n in metrics] for label in labels}
    errors = {label: [_spread(found.get((label, n))) for n in metrics] for label in labels}
    units = {r.unit for r in rows}
    return grouped_bars(metrics, series, errors=errors, title=title, y_title=y_title or rows[0].unit, names=names,
                        unit=units.pop() if len(units) == 1 else "")


IDEAL_NAME = "ideal (decode: by bytes read; prefill, throughput: by FLOPs)"


def speedup_figure(measurements, names: dict[str, str] | None = None) -> go.Figure:
    """Measured speedup of each compressed model (its colour's bars), per speed metric, and one "ideal" series: a
    black tick over each bar at the speedup its bound would give (a decode step: bytes read; prefill: FLOPs)."""
    rows = [r for r in _rows(measurements, "speed") if r.speedup is not None]
    if not rows:
        return empty_figure("Measure speed to see the speedup")
    metrics, labels, _ = _by_model(rows)
    per = {label: {r.name: r for r in rows if r.variant == label} for label in labels[1:]}
    series = {label: [mine[n].speedup if n in mine else None for n in metrics] for label, mine in per.items()}
    fig = grouped_bars(metrics, series, title="Speedup of the compressed models (× original)", y_title="speedup ×",
                       names=names)
    lying = len(metrics) > MAX_COLUMNS
    ticks = fig.data[0].y if lying else fig.data[0].x  # the groups as grouped_bars wrote them
    for i, (label, mine) in enumerate(per.items()):
        ideal = [mine[n].ideal_speedup if n in mine else None for n in metrics]
        fig.add_trace(go.Scatter(
            **(dict(x=ideal, y=ticks, orientation="h") if lying else dict(x=ticks, y=ideal)), mode="markers",
            name=IDEAL_NAME, legendgroup="ideal", showlegend=i == 0, offsetgroup=label,
            marker=dict(symbol="line-ns" if lying else "line-ew", size=24, line=dict(width=4, color=IDEAL)),
            hovertemplate=f"{(names or {}).get(label, label)}: ideal %{{{'x' if lying else 'y'}:.3g}}×"
                          "<extra></extra>"))
    (fig.add_vline if lying else fig.add_hline)(1, line_dash="dot", line_color="#666")  # the original
    return fig.update_layout(scattermode="group", legend_traceorder="normal")  # one row of legend, not one a group


def sweep_figure(report) -> go.Figure:
    """Measured quality of every cut of K layers (left axis) beside each method's block score,
    scaled 0…1 per method (right axis): where the curves agree, the proxy can be trusted."""
    sweep = report.sweep
    metric = sweep.primary_metric
    starts = list(sweep.starts)
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=starts, y=sweep.metrics[metric], name=f"measured {metric}", mode="lines+markers",
                             line=dict(color=MEASURED, width=4), marker=dict(size=9)))
    fig.add_hline(y=sweep.baseline[metric], line=dict(color=MODEL_COLORS["original"], dash="dash"),
                  annotation_text=f"no cut: {sweep.baseline[metric]:.3g}", annotation_position="top left")
    looks = series_looks(len(report.scores), dashes=("dot", "dash", "dashdot"))  # proxies dotted, the measure solid
    for (method, scores), (color, dash) in zip(report.scores.items(), looks):
        values = np.asarray(scores, dtype=float)
        finite = np.isfinite(values)
        scaled = np.full_like(values, np.nan)
        if finite.any():
            low, high = values[finite].min(), values[finite].max()
            scaled[finite] = (values[finite] - low) / (high - low) if high > low else 0.0
        rho = report.agreement.get(method)
        label = f"{method} (ρ = {rho:+.2f})" if rho is not None and np.isfinite(rho) else method
        fig.add_trace(go.Scatter(x=starts, y=_nullable([scaled])[0], name=label, yaxis="y2", mode="lines",
                                 line=dict(color=color, width=3, dash=dash)))
    fig.update_xaxes(title=f"start layer of the removed block of {sweep.block_size}")
    return styled(fig, title=dict(text=f"{sweep.task}: every cut of {sweep.block_size} layers, measured"),
                  yaxis=dict(title=metric),
                  yaxis2=dict(title="method score (0 = most removable)", overlaying="y", side="right",
                              range=[-0.05, 1.05], tickvals=[0, 0.25, 0.5, 0.75, 1], showgrid=False, automargin=True))


def sparsity_sweep_figure(result) -> go.Figure:
    """A sparsity sweep: the task metric (left) and WikiText-2 perplexity on a log scale (right) against
    sparsity, one line per method, the dense model dashed across both panels."""
    percent = [100 * level for level in result.levels]
    unit = " (%)" if result.scale == 100 else ""
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.12,
                        subplot_titles=[f"{result.task} {result.metric}{unit}", "WikiText-2 perplexity (log scale)"])
    for method, (color, dash) in zip(result.methods, series_looks(len(result.methods))):
        for col, values in ((1, [result.scale * v for v in result.accuracy[method]]), (2, result.perplexity[method])):
            fig.add_trace(go.Scatter(x=percent, y=_nullable([values])[0], name=method, legendgroup=method,
                                     showlegend=col == 1, mode="lines+markers",
                                     line=dict(color=color, width=3, dash=dash),
                                     hovertemplate=f"{method}, %{{x:g}} % sparsity: %{{y:.4g}}<extra></extra>"),
                          row=1, col=col)
    for col, dense in ((1, result.scale * result.dense_accuracy), (2, result.dense_perplexity)):
        fig.add_trace(go.Scatter(x=[percent[0], percent[-1]], y=[dense, dense], name="dense", legendgroup="dense",
                                 showlegend=col == 1, mode="lines",
                                 line=dict(color=MODEL_COLORS["original"], dash="dash", width=3),
                                 hovertemplate=f"dense: {dense:.4g}<extra></extra>"), row=1, col=col)
    fig.update_xaxes(title="sparsity (% of every matrix zero)")
    fig.update_yaxes(type="log", dtick=1, row=1, col=2)  # a label at each power of ten only
    fig.update_annotations(font=FONT)  # the panels' titles
    return styled(fig, title=dict(text=f"{result.task} and perplexity against sparsity, per method"),
                  margin=dict(t=100))  # the panels' titles below the figure's
