"""What the page shows of the edited slot's cut (the range, the banner, the heatmap and its companions, the
session), and the rank map of a decomposed model: both filled by many events, so drawn in one place."""

from __future__ import annotations

from dataclasses import dataclass, fields

import gradio as gr

from prune.drop.sublayers import ATTENTION, MLP

from ui import explain_plots, plots, slot_text, text
from ui.plot_view import PlotView
from ui.range_control import LayerRange, range_update
from ui.session import Session


@dataclass
class CutView:
    """The components every change of the edited slot's cut updates, in the endpoints' output order."""

    layer_range: LayerRange
    banner: gr.Markdown
    heatmap: PlotView
    bars: PlotView  # the per-layer scores
    greedy: PlotView  # a greedy analysis's perplexity curve
    named: gr.Radio  # the analysis's named cuts (persistence, greedy steps)
    slot: gr.Radio  # which slot is edited
    session: gr.State
    feedback: gr.Markdown  # the edited slot's numbers against the original: hidden until measured again

    def outputs(self) -> list:
        return [getattr(self, f.name) for f in fields(self)]

    def show(self, session: Session) -> dict:
        """Every component of the view as ``session``'s edited slot shows it."""
        info, result, recipe = session.info, session.result, session.cut()
        cut = recipe.depth_cut if recipe else None
        drop = recipe.sublayer_drop if recipe else None
        layers, params = (info.num_layers, list(info.layer_params)) if info else (0, [])
        value = (cut.span or (cut.layers[0], cut.layers[-1] + 1)) if cut else None  # no selection without a cut
        custom = list(cut.layers) if cut and cut.span is None else None
        note = "" if cut else slot_text.slot_empty(session.editing) if recipe is None else \
            slot_text.slot_holds(session.editing, recipe)
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
        names = list((result.cuts or {}) if result else {})
        return {
            self.layer_range: range_update(value, layers=layers, layer_params=params,
                                           total_params=info.num_params if info else 0, custom=custom, note=note),
            self.banner: slot_text.banner_markdown(session),
            self.heatmap: heat,
            self.bars: bars,
            self.greedy: gr.update(value=plots.greedy_curve_figure(result) if greedy else None, visible=greedy),
            self.named: gr.update(choices=names, value=None, visible=bool(names), **text.named_cuts_label(result)),
            self.slot: gr.update(value=session.editing),
            self.session: session,
            self.feedback: slot_text.feedback_pending(session),
        }


@dataclass
class RankMap:
    """The ranks of a decomposed model, by arithmetic; its box hidden when nothing decomposes (a plot's own
    visibility cannot be toggled: it would lose its height)."""

    box: gr.Column
    plot: PlotView

    def outputs(self) -> list:
        return [self.box, self.plot]

    def show(self, session: Session, recipes: dict) -> dict:
        """The map of the first of ``recipes`` (slot → recipe) that decomposes; the box hidden when none does."""
        for slot, recipe in recipes.items():
            if recipe.last("lowrank") is not None:
                title = f"Ranks of {slot} ({recipe.short()}), by arithmetic"
                ranks = explain_plots.rank_figure(recipe.size(session.info.size), title)
                return {self.box: gr.update(visible=True), self.plot: ranks}
        return {self.box: gr.update(visible=False)}
