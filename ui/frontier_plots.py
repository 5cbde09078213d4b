"""The frontier's figures: perplexity against size with the Pareto front, and against measured decode latency with
the memory-bandwidth floor beside each point that has one (see :mod:`evaluation.frontier`)."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from evaluation.serving import (AXES, COMPOUND_STRUCTURES, EXPERT_FAMILY, FrontierPoint, FrontierResult, gains, MIB,
                                Screened, Screening, SINGLES)
from ui.palette import BLACK, GREY, MODEL_COLORS, OKABE_ITO
from ui.plots import FONT, styled

# a colour and a marker per single family: depth cuts share a hue, a repair is its hollow twin
_LOOKS = dict(zip(SINGLES, [(OKABE_ITO[6], "circle"), (OKABE_ITO[6], "circle-open"), (OKABE_ITO[1], "square"),
                             (OKABE_ITO[1], "square-open"), (OKABE_ITO[7], "triangle-up"),
                             (OKABE_ITO[7], "triangle-down"), (OKABE_ITO[3], "diamond"), (OKABE_ITO[2], "cross"),
                             (OKABE_ITO[4], "pentagon"), (OKABE_ITO[5], "x"),
                             (OKABE_ITO[5], "star-triangle-up"), (BLACK, "hexagon"), (GREY, "hexagon-open")],
                  strict=True))  # a family added without its look fails here, not in a visitor's frontier


COMPOUND_SYMBOLS = {"int8": "triangle-left", "int4": "triangle-right"}  # a structure quantized: its hue, this marker


def look(family: str) -> tuple[str, str]:
    """(colour, marker) of a family: a single one's own; a compound's its structure's colour with a marker per
    quantization, hollow where a training repair came before it (``depth, block + kd + int4``)."""
    if family in _LOOKS:
        return _LOOKS[family]
    structure = max((s for s in (*COMPOUND_STRUCTURES, EXPERT_FAMILY) if family.startswith(s + " + ")), key=len)
    parts = family[len(structure) + 3:].split(" + ")
    symbol = COMPOUND_SYMBOLS.get(parts[-1], "diamond-tall")
    return _LOOKS[structure][0], symbol + ("-open" if parts[0] not in COMPOUND_SYMBOLS else "")


def _x(axis: str, original: FrontierPoint | Screened, point: FrontierPoint | Screened) -> float:
    """The point on the figure's x axis: % of the original's parameters, MiB or ms per token."""
    value = point.value(axis)
    return {"params": 100 * value / original.params, "bytes": value / MIB}.get(axis, value)


def _axis_title(axis: str) -> str:
    return "% of the parameters (not zero; zeros stored densely save nothing)" if axis == "params" else AXES[axis]


def frontier_figure(result: FrontierResult) -> go.Figure:
    """Two panels: perplexity (log) against size on the frontier's axis, the front a line; and against measured
    decode ms/token, each point's memory-bandwidth floor (hollow, grey) joined to it where measured."""
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.1,
                        subplot_titles=[f"against {AXES[result.axis]}", "against measured decode latency "
                                        "(hollow: the memory-bandwidth floor)"])
    front = result.front()
    fig.add_trace(go.Scatter(x=[_x(result.axis, result.dense, p) for p in front], y=[p.perplexity for p in front],
                             mode="lines",
                             line=dict(color=GREY, width=2, shape="hv"), name="Pareto front",
                             hoverinfo="skip"), row=1, col=1)
    for family in result.families():
        points = [p for p in result.points if family in p.families]
        if not points:
            continue
        color, symbol = look(family)
        hover = [f"{family}: {p.recipe.short()}<br>perplexity {p.perplexity:.4g}, {result.task} "
                 f"{100 * p.task:.1f}<br>{p.weight_bytes / MIB:.1f} MiB as stored, {p.ms:.1f} ms/token, "
                 f"{100 * p.params / result.dense.params:.1f} % params"
                 + ("" if gains(p, result.dense) else "<br>† neither smaller in bytes nor faster than the original")
                 for p in points]
        marker = dict(color=color, symbol=symbol, size=11, line=dict(width=2, color=color))
        for col, xs in ((1, [_x(result.axis, result.dense, p) for p in points]), (2, [p.ms for p in points])):
            fig.add_trace(go.Scatter(x=xs, y=[p.perplexity for p in points], mode="markers", marker=marker,
                                     name=family, legendgroup=family, showlegend=col == 1, text=hover,
                                     hovertemplate="%{text}<extra></extra>"), row=1, col=col)
        for p in points:
            _floor_line(fig, p, family)
    dense = result.dense
    _floor_line(fig, dense, "original")
    for col, x in ((1, _x(result.axis, dense, dense)), (2, dense.ms)):
        fig.add_trace(go.Scatter(x=[x], y=[dense.perplexity], mode="markers", name="original", legendgroup="original",
                                 showlegend=col == 1, marker=dict(symbol="star", size=16,
                                                                  color=MODEL_COLORS["original"]),
                                 hovertemplate=f"original: perplexity {dense.perplexity:.4g}<extra></extra>"),
                      row=1, col=col)
    fig.update_xaxes(title=_axis_title(result.axis), row=1, col=1)
    fig.update_xaxes(title="decode ms/token (batch 1)", row=1, col=2)
    fig.update_yaxes(type="log", title="WikiText-2 perplexity (log)", row=1, col=1)
    fig.update_yaxes(type="log", row=1, col=2)
    fig.update_annotations(font=FONT)
    title = "Quality against size, every family" + ("" if result.complete else f" ({result.pending} to go)")
    return styled(fig, title=dict(text=title), margin=dict(t=100))


def screen_figure(screening: Screening) -> go.Figure:
    """The screen so far: each candidate's screen perplexity (log) against its counted size, the original a star."""
    fig = go.Figure()
    original = screening.original
    for family in dict.fromkeys(f for p in screening.points for f in p.families):
        points = [p for p in screening.points if family in p.families]
        color, symbol = look(family)
        fig.add_trace(go.Scatter(x=[_x(screening.axis, original, p) for p in points],
                                 y=[p.perplexity for p in points], mode="markers",
                                 marker=dict(color=color, symbol=symbol, size=11, line=dict(width=2, color=color)),
                                 name=family, text=[f"{family}: {p.recipe.short()}<br>screen perplexity "
                                                    f"{p.perplexity:.4g}" for p in points],
                                 hovertemplate="%{text}<extra></extra>"))
    fig.add_trace(go.Scatter(x=[_x(screening.axis, original, original)], y=[original.perplexity], mode="markers",
                             name="original",
                             marker=dict(symbol="star", size=16, color=MODEL_COLORS["original"])))
    fig.update_xaxes(title=_axis_title(screening.axis))
    fig.update_yaxes(type="log", title=f"WikiText-2 perplexity on the screen's {screening.windows} windows (log)")
    count = len(screening.points)
    title = (f"Screening: {count} candidate{'s' if count != 1 else ''} so far, {screening.pending} to go; then the "
             "survivors are measured in full")
    return styled(fig, title=dict(text=title), margin=dict(t=100))


def _floor_line(fig: go.Figure, point: FrontierPoint, group: str) -> None:
    """``point``'s memory-bandwidth floor (hollow, grey) joined to its measured decode, where it has one."""
    if point.floor_ms is not None:
        fig.add_trace(go.Scatter(x=[point.floor_ms, point.ms], y=[point.perplexity] * 2, mode="lines+markers",
                                 marker=dict(symbol=["circle-open", "circle"], size=[9, 0], color=GREY),
                                 line=dict(color=GREY, width=1, dash="dot"), showlegend=False, legendgroup=group,
                                 hoverinfo="skip"), row=1, col=2)
