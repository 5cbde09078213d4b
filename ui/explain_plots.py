"""Plotly figures that look inside one compressed model: its ranks, the rank search and the healing that made it
(drawn as they run), where its answers leave the original's, and the logit lens.

Pure functions of results, like ``ui.plots`` (whose look and colours they share).
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from ui.palette import BLACK, MODEL_COLORS, SERIES, model_colors
from ui.plots import FONT, styled

SEARCH, TEST = SERIES[:2]  # a rank search's two splits
TRAIN, HELD_OUT = SERIES[2], SERIES[0]  # healing's two losses


def rank_figure(size, title: str) -> go.Figure:
    """Layer × projection ranks of a decomposed variant (``size`` from ``Recipe.size``), as a share of full rank."""
    names = list(dict.fromkeys(m.path.rpartition(".")[2] for layer in size.matrices for m in layer))
    share = np.full((len(size.matrices), len(names)), np.nan)
    label = [[""] * len(names) for _ in size.matrices]
    for i, layer in enumerate(size.matrices):
        for m in layer:
            j = names.index(m.path.rpartition(".")[2])
            full = min(m.outputs, m.inputs)
            share[i, j] = 1.0 if m.rank is None else m.rank / full
            label[i][j] = "dense" if m.rank is None else str(m.rank)
    fig = go.Figure(go.Heatmap(z=share, x=names, y=list(range(len(size.matrices))), text=label,
                               texttemplate="%{text}", colorscale="Viridis", zmin=0, zmax=1,
                               colorbar=dict(title="of full rank"), textfont=FONT,
                               hovertemplate="layer %{y}, %{x}: rank %{text} (%{z:.0%} of full)<extra></extra>"))
    fig.update_xaxes(title="projection")
    fig.update_yaxes(title="layer", autorange="reversed")
    return styled(fig, title=dict(text=title))


def rank_search_figure(points, metric: str, bound: float | None = None) -> go.Figure:
    """A rank search so far: its search-split score after each projection and its test-split score after each
    layer, against the parameters kept (% of the original, falling left to right); the original's scores dashed,
    the tolerance's bound on the search score dotted. ``points[0]`` is the original."""
    original, steps = points[0], points[1:]
    kept = [100 * p.params / original.params for p in points]
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=kept, y=[p.search for p in points], name="search split", mode="lines+markers",
                             line=dict(color=SEARCH, width=3),
                             text=["original"] + [f"layer {p.layer} {p.path.rpartition('.')[2]}: "
                                                  f"{'dense' if p.rank is None else f'rank {p.rank}'}" for p in steps],
                             hovertemplate="%{text}<br>%{x:.2f} % of the parameters: %{y:.4g}<extra></extra>"))
    tested = [(k, p) for k, p in zip(kept, points) if p.test is not None]
    fig.add_trace(go.Scatter(x=[k for k, _ in tested], y=[p.test for _, p in tested], name="test split (after each "
                             "layer)", mode="lines+markers", line=dict(color=TEST, width=3),
                             hovertemplate="%{x:.2f} % of the parameters: %{y:.4g}<extra></extra>"))
    span = [min(kept), 100.0]
    for value, name, dash in ((original.search, "original, search split", "dash"),
                              (original.test, "original, test split", "dot")):
        fig.add_trace(go.Scatter(x=span, y=[value, value], name=name, mode="lines", hoverinfo="skip",
                                 line=dict(color=MODEL_COLORS["original"], dash=dash, width=2)))
    if bound is not None:
        fig.add_trace(go.Scatter(x=span, y=[bound, bound], name="tolerance (search split)", mode="lines",
                                 hoverinfo="skip", line=dict(color=BLACK, dash="dashdot", width=2)))
    fig.update_xaxes(title="parameters kept (% of the original)", autorange="reversed")
    fig.update_yaxes(title=metric)
    return styled(fig, title=dict(text=f"Surgical rank search: {metric} against parameters"))


def divergence_figure(report, names: dict[str, str] | None = None) -> go.Figure:
    """Per token of the original's greedy answer (teacher-forced), each compressed model's KL to the original (in its
    own colour; ``names`` gives a model's name in the legend): a thin strip, a hollow marker where its most likely
    next token differs from the original's."""
    x = list(range(len(report.answer_ids)))
    labels = [f"{i}: {token!r}" for i, token in enumerate(report.answer_tokens)]
    colors = model_colors(report.columns)
    fig = go.Figure()
    for label, column in report.columns.items():
        fig.add_trace(go.Scatter(x=x, y=list(column.kl), name=f"{(names or {}).get(label, label)}: {column.caption()}",
                                 mode="lines+markers", line=dict(color=colors[label], width=2), text=labels,
                                 marker=dict(symbol=["circle" if a else "circle-open" for a in column.agree], size=9),
                                 hovertemplate="%{text}: KL %{y:.3f} nats<extra>" + label + "</extra>"))
    shown = x[::-(-len(x) // MAX_TOKEN_TICKS) or 1]  # every n-th token labelled: labels at 14 px never touch
    fig.update_xaxes(title="token of the original's answer (hover for every token)", tickmode="array", tickvals=shown,
                     ticktext=[short_token(report.answer_tokens[i]) for i in shown], tickangle=-45)
    fig.update_yaxes(title="KL (nats)", rangemode="tozero")
    return styled(fig, title=dict(text="Per token, how far each model's next-token guess is from the original's"))


MAX_TOKEN_TICKS = 24  # token labels along a full-width strip
TOKEN_CHARS = 6  # a token's label in a tick or a lens cell, at 14 px


def short_token(token: str) -> str:
    """A token as a label: escapes visible (a newline reads \\n), spaces around it dropped, cut to a few characters."""
    shown = repr(token)[1:-1]
    return (shown.strip() or shown)[:TOKEN_CHARS]


def logit_lens_figure(lens, title: str) -> go.Figure:
    """Layers (the embeddings' output at the bottom) × the prompt's last positions: each cell the top next token read
    from that layer's residual stream, coloured by its probability. Rows sit at the original's layer index, so a
    compressed model's removed layers are gaps; the original's rows a compared cut removes are marked ✂."""
    read = {-1 if layer is None else layer: i for i, layer in enumerate(lens.layers)}
    y = list(range(-1, max(read) + 1))  # every depth: a removed layer is an empty row
    x = [f"{i}:{token!r}"[:14] for i, token in enumerate(lens.positions, start=lens.start)]
    blank = [None] * len(x)
    z = [list(lens.probs[read[d]]) if d in read else blank for d in y]
    cells = [[short_token(t) for t in lens.tokens[read[d]]] if d in read else [""] * len(x) for d in y]
    labels = ["embeddings" if d < 0 else f"layer {d}" for d in y]
    fig = go.Figure(go.Heatmap(z=z, x=x, y=y, text=cells, texttemplate="%{text}", textfont=dict(size=14),
                               colorscale="Blues", zmin=0, zmax=1, colorbar=dict(title="p"),
                               customdata=[[label] * len(x) for label in labels], hoverongaps=False,
                               hovertemplate="%{customdata}, after %{x}: %{text} (p = %{z:.2f})<extra></extra>"))
    ticks = [f"({label} removed)" if d not in read else f"✂ {label}" if d in lens.marked else label
             for d, label in zip(y, labels)]
    fig.update_yaxes(title="read after", tickmode="array", tickvals=y, ticktext=ticks, tickfont=dict(size=14))
    fig.update_xaxes(title="prompt position (input token)", tickangle=-50, tickfont=dict(size=14))
    return styled(fig, title=dict(text=title))


def heal_figure(points, title: str, objective: str = "next-token loss") -> go.Figure:
    """Healing so far: each step's training loss (``objective``: what it is), and the held-out next-token loss where it
    was measured (step 0: before)."""
    fig = go.Figure()
    train = "training batch" if objective == "next-token loss" else f"training batch ({objective})"
    fig.add_trace(go.Scatter(x=[p.step for p in points], y=[p.train for p in points], name=train,
                             mode="lines", line=dict(color=TRAIN, width=2),
                             hovertemplate="step %{x}: %{y:.3f}<extra>training</extra>"))
    held = [p for p in points if p.heldout is not None]
    fig.add_trace(go.Scatter(x=[p.step for p in held], y=[p.heldout for p in held],
                             name="held-out next-token loss (never trained on)",
                             mode="lines+markers", line=dict(color=HELD_OUT, width=3),
                             hovertemplate="step %{x}: %{y:.3f}<extra>held out</extra>"))
    steps = points[-1].steps if points else 1
    fig.update_xaxes(title="optimizer step", range=[-0.5, steps + 0.5])
    fig.update_yaxes(title="loss (nats per token)")
    return styled(fig, title=dict(text=f"Healing ({title}): loss per step"))
