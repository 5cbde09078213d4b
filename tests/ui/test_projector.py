"""Figures and tables that read on a projector at 1280 × 720: colour-blind-safe colours, one colour per model on
every chart, legends clear of titles, text of 14 px and more, one number format per table, headers that fit, charts
that link to no outside service, the divergence marked with colour and a sign, a calm theme."""

from __future__ import annotations

import json

import gradio as gr
import numpy as np
import plotly.colors
import pytest

from evaluation.explain.cut import Divergence, DivergenceReport
from evaluation.explain.logit_lens import LogitLens
from evaluation.measure.measurement import Measurement
from evaluation.serving.training import LossPoint
from prune.core.recipe import Recipe
from prune.depth.result import ImportanceResult, blocks_from_layers
from prune.lowrank.rank_search import Point
from ui import explain_plots, help_text, palette, plots, tables, text
from ui.page.theme import THEME
from ui.plot_view import _JS, CONFIG, PlotView

VARIANTS = {"A": Recipe.block(30, 13, 16), "B": Recipe.block(30, 20, 26)}
NAMES = text.model_names(VARIANTS)


def _speed(labels=("original", "A", "B"), batches=(1,)) -> list[Measurement]:
    """Throughput and latency per batch: the original 100 tokens/s and 10 ms, A 1.2× and B 1.5× faster (ideal 1.25×
    and 1.6×)."""
    gain = {"original": 1.0, "A": 1.2, "B": 1.5}
    ideal = {"original": None, "A": 1.25, "B": 1.6}
    found = []
    for batch in batches:
        for label in labels:
            found.append(Measurement(f"throughput (batch {batch}, 32 new)", 100.0 * gain[label], "tokens/s", True,
                                     model=label, group="speed", ideal=ideal[label] and 100.0 * ideal[label]))
            found.append(Measurement(f"decode latency per token (batch {batch}, 32 new)", 10.0 / gain[label], "ms",
                                     False, model=label, group="speed", ideal=ideal[label] and 10.0 / ideal[label]))
    return found


def _importance(layers=30) -> ImportanceResult:
    scores = np.random.default_rng(0).random(layers)
    return ImportanceResult("angular", blocks_from_layers(scores, {0}), "angular distance", layer_scores=scores)


def _report(labels=("A", "B"), tokens=40) -> DivergenceReport:
    words = tuple(f" w{i}" for i in range(tokens))
    columns = {label: Divergence(3, tuple(0.1 * i for i in range(tokens)), (True,) * tokens, None, ("a", " b"))
               for label in labels}
    return DivergenceReport((1,), tuple(range(tokens)), words, columns)


def _every_figure() -> dict:
    """One of each chart the page draws, on made-up results."""
    lens = LogitLens((None, 0, 1), ("x", " y"), 0, ((1, 2),) * 3, (("a", "b"),) * 3, ((0.1, 0.9),) * 3)
    points = [Point(-1, "", None, 100, 10.0, 12.0), Point(1, "mlp.up_proj", 4, 90, 10.2, 12.5)]
    return {
        "heatmap": plots.heatmap_figure(_importance(), selected=(13, 16)),
        "bars": plots.layer_bar_figure(_importance(), removed=[13, 14, 15]),
        "greedy": plots.greedy_curve_figure(ImportanceResult(
            "sleb", np.ones((4, 4)), "ppl", params={"ppl_curve": [10.0, 11.0, 13.0], "removal_order": [2, 1]})),
        "speedup": plots.speedup_figure(_speed(), NAMES),
        "throughput": plots.comparison_figure(_speed(), unit="tokens/s", title="Throughput", names=NAMES),
        "divergence": explain_plots.divergence_figure(_report(), NAMES),
        "lens": explain_plots.logit_lens_figure(lens, "lens"),
        "rank search": explain_plots.rank_search_figure(points, "ppl", 10.1),
        "heal": explain_plots.heal_figure([LossPoint(0, 2, 3.0, 3.1), LossPoint(1, 2, 2.9, None)], "LoRA"),
    }


# ---------------------------------------------------------------- colours


def test_the_model_colours_are_okabe_ito_and_the_same_model_keeps_its_colour_on_every_chart():
    assert palette.MODEL_COLORS == {"original": "#0072B2", "A": "#D55E00", "B": "#009E73"}
    assert set(palette.MODEL_COLORS.values()) <= set(palette.OKABE_ITO)
    assert not set(palette.SERIES) & set(palette.MODEL_COLORS.values())  # a method never looks like a model
    only_b = [m for m in _speed() if m.model != "A"]  # B alone: still B's colour, not the first compressed one's
    bars = plots.comparison_figure(only_b, unit="tokens/s", title="Throughput", names=NAMES)
    assert {t.name: t.marker.color for t in bars.data} == {NAMES["original"]: "#0072B2", NAMES["B"]: "#009E73"}
    speed = plots.speedup_figure(only_b, NAMES)
    assert [(t.name, t.marker.color) for t in speed.data if t.type == "bar"] == [(NAMES["B"], "#009E73")]
    strip = explain_plots.divergence_figure(_report(labels=("B",)), NAMES)
    assert [t.line.color for t in strip.data] == ["#009E73"]


def test_a_bars_label_is_dark_or_white_whichever_reads_better_on_it():
    assert palette.ink(palette.BLUE) == "white" and palette.ink(palette.BLUISH_GREEN) == palette.TEXT_HEX
    assert palette.ink("#ffffff") == palette.TEXT_HEX and palette.ink("#000000") == "white"
    bars = plots.comparison_figure(_speed(), unit="tokens/s", title="Throughput")
    assert [t.textfont.color for t in bars.data] == ["white", palette.TEXT_HEX, palette.TEXT_HEX]


def test_the_importance_map_is_viridis_with_the_most_removable_end_labelled():
    heat = plots.heatmap_figure(_importance()).data[0]
    viridis = plotly.colors.sequential.Viridis
    assert [color for _, color in heat.colorscale] == viridis[::-1]  # reversed: the most removable is lightest
    assert list(heat.colorbar.tickvals) == [0, 1]
    assert list(heat.colorbar.ticktext) == ["most<br>removable", "least<br>removable"]
    assert "yellow = most removable" in help_text.HEATMAP_HELP and "green" not in help_text.HEATMAP_HELP


def test_more_methods_than_colours_repeat_a_colour_with_another_dash():
    looks = palette.series_looks(6)
    assert looks[:4] == [(c, "solid") for c in palette.SERIES] and looks[4] == (palette.SERIES[0], "dash")
    assert len(set(looks)) == 6


# ---------------------------------------------------------------- layout and type


@pytest.mark.parametrize("name", list(_every_figure()))
def test_legends_sit_below_the_plot_and_titles_in_their_own_top_margin(name):
    layout = _every_figure()[name].layout
    if name == "heatmap":  # in the map's empty upper-right triangle, where no block starts
        assert (layout.legend.xref, layout.legend.x, layout.legend.xanchor, layout.legend.yref, layout.legend.y,
                layout.legend.yanchor) == ("paper", 1, "right", "paper", 1, "top")
    else:  # the bottom edge of the figure: never over the title or the data
        assert (layout.legend.orientation, layout.legend.yref, layout.legend.y, layout.legend.yanchor) == (
            "h", "container", 0, "bottom")
    assert (layout.title.yref, layout.title.y, layout.title.yanchor, layout.title.automargin) == (
        "container", 1, "top", True)  # the top margin grows to hold it


def _font_sizes(node, key=""):
    """Every font size set in a figure's JSON (the template left out: it sets none smaller than the page's)."""
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "template":
                continue
            if k == "size" and "font" in key:
                yield v
            else:
                yield from _font_sizes(v, k)
    elif isinstance(node, list):
        for v in node:
            yield from _font_sizes(v, key)


@pytest.mark.parametrize("name", list(_every_figure()))
def test_no_text_on_a_chart_is_smaller_than_14_px(name):
    figure = _every_figure()[name]
    sizes = list(_font_sizes(figure.to_plotly_json()))
    assert sizes and min(sizes) >= 14 and figure.layout.font.size == plots.FONT["size"]
    if any(t.type == "bar" and t.text for t in figure.data):  # a number that does not fit: hidden, never shrunk
        assert (figure.layout.uniformtext.minsize, figure.layout.uniformtext.mode) == (14, "hide")


def test_the_speed_chart_has_one_ideal_series_a_tick_over_each_models_bar():
    figure = plots.speedup_figure(_speed(), NAMES)
    bars = [t for t in figure.data if t.type == "bar"]
    ideal = [t for t in figure.data if t.type == "scatter"]
    assert [t.name for t in bars] == [NAMES["A"], NAMES["B"]]
    assert [t.name for t in ideal] == [plots.IDEAL_NAME] * 2 and [t.showlegend for t in ideal] == [True, False]
    assert {t.legendgroup for t in ideal} == {"ideal"} and {t.marker.line.color for t in ideal} == {palette.IDEAL}
    assert [t.offsetgroup for t in ideal] == [t.offsetgroup for t in bars] == ["A", "B"]  # over its model's bar
    assert [list(t.y) for t in bars] == [[1.2, 1.2], [1.5, 1.5]]  # throughput, then latency (10 / 8.33 ms)
    assert [[round(v, 3) for v in t.y] for t in ideal] == [[1.25, 1.25], [1.6, 1.6]]
    assert figure.layout.scattermode == "group" and figure.layout.legend.traceorder == "normal"


def test_more_than_three_groups_of_bars_lie_down_with_their_names_on_two_lines():
    standing = plots.speedup_figure(_speed(batches=(1,)), NAMES)  # 2 groups
    lying = plots.speedup_figure(_speed(batches=(1, 8)), NAMES)  # 4 groups
    assert standing.data[0].orientation in (None, "v") and lying.data[0].orientation == "h"
    assert list(standing.data[0].x) == ["throughput<br>(batch 1, 32 new)",
                                        "decode latency per<br>token<br>(batch 1, 32 new)"]  # lines of ~18 characters
    assert list(lying.data[0].y)[:2] == ["throughput<br>(batch 1, 32 new)",
                                         "decode latency per token<br>(batch 1, 32 new)"]  # of ~28
    assert lying.layout.yaxis.autorange == "reversed" and lying.data[-1].orientation == "h"  # the first on top
    assert lying.layout.yaxis.tickfont.size == 14


def test_the_importance_maps_ticks_are_spaced_for_its_size_and_the_layer_bars_tick_every_layer_to_32():
    heat = plots.heatmap_figure(_importance()).layout
    assert heat.xaxis.dtick is None and heat.yaxis.dtick is None  # Plotly spaces them for the map's pixels
    assert [plots.layer_dtick(n) for n in (30, 32, 33, 64, 80)] == [1, 1, 2, 2, 4]
    assert plots.layer_bar_figure(_importance(80)).layout.xaxis.dtick == 4


def test_a_chart_writes_all_its_bars_numbers_with_the_same_decimals():
    figure = plots.comparison_figure(_speed(), unit="ms", title="Latency")
    assert [t.text[0] for t in figure.data] == ["10.0", "8.3", "6.7"]  # 10 sets one decimal for all
    percent = [Measurement("acc", v, "%", model=m, group="benchmarks") for m, v in (("original", 61.25), ("A", 40.0))]
    assert [t.text[0] for t in plots.comparison_figure(percent, title="x").data] == ["61.2%", "40.0%"]


def test_the_divergence_strip_labels_at_most_24_tokens_and_hovers_every_one():
    figure = explain_plots.divergence_figure(_report(tokens=64), NAMES)
    assert list(figure.layout.xaxis.tickvals) == list(range(0, 64, 3))  # ⌈64 / 24⌉ = 3
    assert list(figure.layout.xaxis.ticktext)[:2] == ["w0", "w3"]  # the leading space dropped
    assert len(figure.data[0].text) == 64
    assert explain_plots.short_token("\n") == "\\n" and explain_plots.short_token(" Tokenizer") == "Tokeni"


# ---------------------------------------------------------------- nothing outside


def test_the_charts_mode_bar_offers_a_png_and_no_link_to_plotlys_cloud():
    assert CONFIG["displaylogo"] is False and CONFIG["showLink"] is False
    assert CONFIG["showSendToCloud"] is False and CONFIG["showEditInChartStudio"] is False
    assert CONFIG["modeBarButtons"] == [["toImage"]]  # nothing else in the bar
    assert f"const config = {json.dumps(CONFIG)};" in _JS and PlotView().js_on_load == _JS
    for figure in _every_figure().values():
        sent = json.dumps(PlotView().postprocess(figure))
        assert "plot.ly" not in sent and "plotly.com" not in sent and "chart-studio" not in sent


# ---------------------------------------------------------------- tables


def test_a_table_titles_each_model_with_its_recipe_and_gives_every_column_room_for_its_header():
    found = _speed(batches=(1, 8))
    shown = tables.comparison_table(found, VARIANTS)
    table, widths = shown["value"], shown["column_widths"]
    a, b = text.column_label("A", VARIANTS), text.column_label("B", VARIANTS)
    assert list(table.columns) == ["Metric", "Unit", "Original", a, "Speedup × (A)", "Ideal speedup × (A)", b,
                                   "Speedup × (B)", "Ideal speedup × (B)"]
    shares = [float(w.rstrip("%")) for w in widths]
    assert tables.SHARE_OF_WIDTH - 0.1 * len(shares) <= sum(shares) <= tables.SHARE_OF_WIDTH  # never wider
    chars = [tables._chars(str(h), table[h]) + tables.PADDING_CHARS for h in table.columns]
    assert chars[:3] == [22 + 2, 8 + 2, 8 + 2]  # a metric's name wraps past 22 characters; "tokens/s"; "Original"
    assert chars[3:6] == [len(a) + 2, len("Speedup × (A)") + 2, len("speedup") + 2]  # a short header whole, a long
    # one by its words (the cells, "1.20", are narrower)
    assert [s / tables.SHARE_OF_WIDTH * sum(chars) for s in shares] == pytest.approx(chars, abs=0.15)  # in step
    assert table[a].tolist() == ["120", "8.3", "120", "8.3"]  # one format a unit: tokens/s (to 150), ms (to 10)


def test_the_sweeps_agreement_table_writes_every_rho_alike_best_first():
    from evaluation.sweeps.cuts import SweepReport, SweepResult

    sweep = SweepResult(task="arc_easy", block_size=2, num_layers=4, limit=5, starts=[0, 1, 2],
                        metrics={"acc": [0.3, 0.5, 0.4]}, baseline={"acc": 0.6}, higher_is_better={"acc": True})
    report = SweepReport(sweep, {"taylor": float("nan"), "bi": -0.5, "angular": 1.0}, {}, failed={"ppl": "no data"})
    assert tables.agreement_rows(report) == [["angular", "+1.00"], ["bi", "-0.50"], ["taylor", "—"],
                                             ["ppl", "failed"]]


def test_a_table_of_several_groups_shows_no_group_column_and_an_empty_one_no_columns():
    found = [Measurement("arc_easy acc", 60.0, "%", model="original", group="benchmarks"),
             Measurement("WikiText-2 perplexity", 20.0, "", False, model="original", group="perplexity")]
    assert list(tables.comparison_table(found, {})["value"].columns) == ["Metric", "Unit", "Original"]
    assert tables.comparison_table([], {})["column_widths"] == []


# ---------------------------------------------------------------- the divergence mark


def test_the_divergence_is_marked_by_colour_a_sign_and_a_legend_and_the_answer_escaped():
    marked = text.divergence_html("A", VARIANTS, ("Paris is <b>", "Lyon & more\nlines"), 5)
    assert marked.startswith(f'<span class="lc-title">{text.column_label("A", VARIANTS)}</span>')
    assert 'Paris is &lt;b&gt;<mark class="lc-left"' in marked  # the answer's own text is never markup
    assert f"{text.DIVERGED_MARK}\u2009Lyon &amp; more\nlines</mark>" in marked  # a sign, not colour alone
    assert marked.endswith(f'<mark class="lc-left">{text.DIVERGED_MARK} highlighted</mark> = A\'s answer from '
                           "token 5 on, where it leaves the original's</p>")


def test_the_marked_answer_is_styled_colour_blind_safe(page):
    marked = page.generate.columns["A"].marked
    css = marked.css_template
    assert f"background: {palette.HIGHLIGHT}" in css and f"border-bottom: 3px solid {palette.ORANGE}" in css
    assert marked.visible is False and page.generate.columns["original"].marked is None


# ---------------------------------------------------------------- theme


def test_the_theme_is_calm_labels_are_grey_and_stop_alone_is_red():
    assert THEME.primary_500 == gr.themes.colors.indigo.c500
    assert THEME.button_primary_background_fill == "*primary_600"  # white on indigo 600: contrast 6.3
    assert (THEME.block_label_background_fill, THEME.block_label_text_color) == ("*neutral_100", "*neutral_700")
    assert (THEME.block_title_background_fill, THEME.block_title_text_color) == ("*neutral_100", "*neutral_700")
    assert THEME.button_cancel_background_fill == gr.themes.colors.red.c600
    assert THEME.button_cancel_text_color == "white"
