"""The expert heatmap: a mixture of experts' layers × experts, coloured by each expert's saliency within its layer, the
experts a keep choice removes crossed out. A pure function of an :class:`~prune.experts.map.ExpertMap`."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from prune.experts.map import ExpertMap
from ui.palette import COLORSCALE, IN_CUT
from ui.plots import LEGEND_BELOW, layer_dtick, row_normalized, styled

ROWS_LABELLED = 15  # the map is about 300 px tall on the page


def expert_figure(found: ExpertMap, removed: int = 0, ranked: bool = False) -> go.Figure:
    """Rows: the layers with experts; columns: the experts (``ranked``: each layer's experts from the least salient,
    so the removed ones line up on the left). Colour: the saliency from the layer's lowest to its highest; ✕: removed
    when ``removed`` experts go from each layer."""
    scores = np.asarray(found.scores, dtype=float)  # [rows, E]
    color = row_normalized(scores)  # 0: the layer's least salient, 1: its most
    order = np.argsort(scores, axis=1, kind="stable") if ranked else np.tile(np.arange(found.experts),
                                                                              (len(scores), 1))
    kept = found.kept(removed / found.experts)
    rows = np.arange(len(found.layers))
    expert = np.take_along_axis(np.tile(np.arange(found.experts), (len(scores), 1)), order, axis=1)
    gone = np.array([[e not in kept[layer] for e in expert[r]] for r, layer in enumerate(found.layers)])
    custom = np.stack([expert, np.take_along_axis(scores, order, 1), np.tile(np.array(found.layers)[:, None],
                                                                             (1, found.experts))], axis=-1)
    columns = np.arange(found.experts)
    fig = go.Figure(go.Heatmap(
        z=np.nan_to_num(np.take_along_axis(color, order, 1)), x=columns, y=rows, customdata=custom,
        colorscale=COLORSCALE, zmin=0, zmax=1, xgap=1, ygap=1, name=found.label,
        colorbar=dict(title=dict(text="within its layer", side="right"), tickvals=[0, 1],
                      ticktext=["least<br>salient", "most<br>salient"], len=0.9, thickness=16),
        hovertemplate=("layer %{customdata[2]} · expert %{customdata[0]}<br>" + found.label
                       + ": %{customdata[1]:.4g}<br>click: remove it and every expert below it<extra></extra>"),
    ))
    if removed:
        at = np.nonzero(gone)
        fig.add_trace(go.Scatter(x=columns[at[1]], y=rows[at[0]], mode="markers", name=f"removed ({removed} a layer)",
                                 marker=dict(symbol="x-thin", size=9, line=dict(width=2, color=IN_CUT)),
                                 hoverinfo="skip"))
    ticks = rows[::-(-len(rows) // ROWS_LABELLED)]  # at most ROWS_LABELLED labels: they never touch
    fig.update_yaxes(title="layer", tickvals=ticks, ticktext=[str(found.layers[r]) for r in ticks],
                     autorange="reversed", showgrid=False, zeroline=False)
    fig.update_xaxes(title="experts, least salient first" if ranked else "expert", showgrid=False, zeroline=False,
                     range=[-0.5, found.experts - 0.5], dtick=layer_dtick(found.experts))  # whole experts
    title = f"Experts: {found.label} saliency ({found.experts} a layer, {found.top_k} a token)"
    return styled(fig, title=dict(text=title), legend=LEGEND_BELOW, clickmode="event", hovermode="closest",
                  dragmode=False)
