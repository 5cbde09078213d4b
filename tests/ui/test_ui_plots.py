"""Pure UI helpers: figures from results, the range control's parsing, option parsing, error display."""

from __future__ import annotations

import json
import math
from pathlib import Path

import gradio as gr
import numpy as np
import pytest

from evaluation.measure.measurement import Measurement
from prune.core.errors import InvalidCut, InvalidInput
from prune.depth.methods import Method
from prune.depth.result import ImportanceResult, blocks_from_layers
from ui import help_text, inputs, palette, plots, text
from ui.handlers import MAX_MESSAGE_CHARS, default_block_size, user_errors
from ui.plot_view import PLOTLY_JS, PlotView
from ui.range_control import LayerRange, parse_range, range_update


def _result(layers=8, protected=(), seed=0, cuts=None):
    scores = np.random.default_rng(seed).random(layers)
    return ImportanceResult("angular", blocks_from_layers(scores, set(protected)), "angular distance",
                            layer_scores=scores, cuts=cuts or {})


def _trace(fig, name):
    return next(t for t in fig.data if t.name == name)


def _strict_json(fig) -> dict:
    """What PlotView sends to the browser; JSON has no NaN/Infinity."""
    value = PlotView().postprocess(fig)
    json.dumps(value, allow_nan=False)
    return value


def test_heatmap_marks_the_best_block_of_every_size():
    result = _result(layers=10)
    fig = plots.heatmap_figure(result)
    best = _trace(fig, "best block per size")
    expected = result.best_blocks()
    assert list(best.y) == list(expected)
    assert list(best.x) == [start for start, _ in expected.values()]
    assert list(best.customdata) == [end for _, end in expected.values()]


def test_heatmap_rows_are_block_sizes_and_columns_starts():
    result = _result(layers=6)
    heat = plots.heatmap_figure(result).data[0]
    assert list(heat.y) == [1, 2, 3, 4, 5]  # removing all 6 layers is not a cut
    assert list(heat.x) == [0, 1, 2, 3, 4, 5]
    # The cell (start 1, size 3) is the block [1, 4): its hover data says so.
    assert list(heat.customdata[2][1][:2]) == [3, 4]


def test_heatmap_handles_nan_and_inf():
    result = _result(layers=8, protected=(0,))
    fig = plots.heatmap_figure(result, selected=(2, 5))
    value = _strict_json(fig)
    z = value["data"][0]["z"]
    assert z[6][1] is not None and z[6][2] is None  # size 7 fits from start 1, runs past the end from 2
    assert all(row[0] is None for row in z)  # every block touching protected layer 0 has no colour…
    protected = _trace(fig, "protected")
    assert all(row[0] == 1 for row in protected.z)  # …and is drawn grey instead
    assert min(_trace(fig, "best block per size").x) > 0
    selected = _trace(fig, "selected [2, 5)")
    assert (list(selected.x), list(selected.y)) == ([2], [3])


def test_heatmap_with_every_block_protected_still_draws():
    result = _result(layers=3, protected=(0, 1, 2))
    fig = plots.heatmap_figure(result)
    _strict_json(fig)
    assert not [t for t in fig.data if t.name == "best block per size"]


def test_row_normalized_scales_each_size_to_0_1():
    scores = np.array([[1.0, 3.0, 2.0], [10.0, np.inf, np.nan], [5.0, np.nan, np.nan]])
    norm = plots.row_normalized(scores)
    assert norm[0].tolist() == [0.0, 1.0, 0.5]
    assert norm[1][0] == 0.0 and math.isnan(norm[1][1]) and math.isnan(norm[1][2])
    assert norm[2][0] == 0.0  # a single block: no spread, most removable


def test_layer_bars_colour_and_hatch_the_cut_and_grey_the_protected_layers():
    result = _result(layers=6, protected=(5,))
    bars = plots.layer_bar_figure(result, removed=[2, 3]).data[0]
    assert list(bars.marker.color) == [palette.KEPT, palette.KEPT, palette.IN_CUT, palette.IN_CUT, palette.KEPT,
                                       palette.PROTECTED]
    assert list(bars.marker.pattern.shape) == ["", "", "/", "/", "", ""]  # seen without colour too
    assert list(bars.customdata) == ["kept", "kept", "in the cut", "in the cut", "kept", "protected"]
    _strict_json(plots.layer_bar_figure(result, removed=[2, 3]))


def _m(name, value, model, **kw):
    return Measurement(name, value, kw.pop("unit", "%"), kw.pop("higher", True), model=model, **kw)


def test_comparison_and_speedup_figures():
    ms = [_m("arc_easy acc", 60.0, "original", spread=2.0, group="benchmarks"),
          _m("arc_easy acc", 50.0, "pruned", spread=2.5, group="benchmarks"),
          _m("throughput (batch 1, 32 new)", 100.0, "original", unit="tokens/s", group="speed"),
          _m("throughput (batch 1, 32 new)", 120.0, "pruned", unit="tokens/s", group="speed", ideal=125.0)]
    bench = plots.comparison_figure(ms, group="benchmarks", title="Benchmarks")
    assert [t.name for t in bench.data] == ["original", "pruned"]
    assert list(bench.data[1].y) == [50.0] and list(bench.data[1].error_y.array) == [2.5]
    speed = plots.speedup_figure(ms)
    assert [round(v, 3) for t in speed.data for v in t.y] == [1.2, 1.25]
    assert plots.comparison_figure([], title="x").layout.annotations  # a hint, not an error
    only_original = plots.comparison_figure(ms[:1], title="x")
    assert [t.name for t in only_original.data] == ["original"]


@pytest.mark.parametrize("value, unit, label", [
    (1530.4, "MiB", "1,530 MiB"), (134515008.0, "", "135,000,000"), (60.46, "%", "60.5%"), (99.96, "%", "100%"),
    (0.01234, "", "0.0123"), (2.5, "tokens/s", "2.5 tokens/s"), (None, "MiB", ""), (float("nan"), "", ""),
])
def test_bar_labels_are_readable_numbers(value, unit, label):
    assert plots.bar_label(value, unit) == label


def test_memory_bars_read_in_mib_not_in_exponents():
    ms = [_m("weight memory", 1530.4, "original", unit="MiB", higher=False, group="memory"),
          _m("weight memory", 1148.0, "pruned", unit="MiB", higher=False, group="memory")]
    fig = plots.comparison_figure(ms, unit="MiB", title="Memory")
    assert [t.text[0] for t in fig.data] == ["1,530", "1,148"]  # one format on the chart; the unit on its axis
    assert fig.layout.yaxis.title.text == "MiB"
    assert "e+" not in json.dumps([t.text for t in fig.data])


@pytest.mark.parametrize("layers, words", [
    (30, "**[20, 26)** removes layers 20–25, six layers."),
    (12, "**[9, 11)** removes layers 9–10, two layers."),
    (4, "**[2, 3)** removes layer 2 only."),
    (80, "**[53, 69)** removes layers 53–68, 16 layers."),
])
def test_the_index_example_is_a_block_the_loaded_model_has(layers, words):
    convention = help_text.index_convention(layers)
    assert convention.endswith(words)
    start, end = help_text.example_block(layers)
    assert 0 <= start < end < layers  # a real block, and a layer is left after it
    assert parse_range([start, end], layers) == (start, end)


def test_the_index_convention_before_a_model_and_in_the_range_error():
    assert "[" not in help_text.index_convention(None).split("removes", 1)[1]  # no example without a model
    assert help_text.example_block(1) is None
    with pytest.raises(InvalidCut, match=r"e\.g\. \[9, 11\]"):
        parse_range("layers", 12)


@pytest.mark.parametrize("value, expected", [
    ([20, 26], (20, 26)), ((0, 1), (0, 1)), ([3.0, 5.0], (3, 5)), ({"start": 2, "end": 4}, (2, 4)),
    ("20, 26", (20, 26)), ("[20, 26)", (20, 26)), ("20-26", (20, 26)), ("20..26", (20, 26)),
])
def test_parse_range_accepts_common_spellings(value, expected):
    assert parse_range(value, 30) == expected


@pytest.mark.parametrize("value, message", [
    ([26, 20], "empty or inverted"), ([5, 5], "empty or inverted"), ([-1, 4], "outside"),
    ([20, 31], "outside"), ([0, 30], "remove all"), ([2.5, 4], "whole numbers"), (["a", 4], "whole numbers"),
    ([1, 2, 3], "two numbers"), ("layers", "two numbers"), (None, "two numbers"), ([float("nan"), 3], "whole"),
])
def test_parse_range_rejects_impossible_blocks_with_a_message(value, message):
    with pytest.raises(InvalidCut, match=message):
        parse_range(value, 30)


def test_range_control_props_and_api_schema():
    control = LayerRange([2, 5], layers=8, layer_params=[10] * 8, total_params=100)
    assert control.value == [2, 5]
    assert control.props["layers"] == 8 and control.props["custom"] is False  # a block, not a scattered cut
    assert control.api_info()["items"] == {"type": "integer"}
    update = range_update((1, 3), layers=8, layer_params=[10] * 8, total_params=100, custom=[1, 4])
    assert update["value"] == [1, 3] and update["custom"] == [1, 4] and update["layers"] == 8
    # back to a block: an explicit False, since Gradio would keep the scattered cut for a None prop
    assert range_update((1, 3), layers=8, layer_params=[10] * 8, total_params=100)["custom"] is False


def test_plot_view_serves_the_bundled_plotly_js_by_a_path_that_names_no_server_folder():
    head = PlotView().head
    served = head.split("gradio_api/file=")[1].split('"')[0]
    assert not Path(served).is_absolute() and str(PLOTLY_JS.parent) not in head
    assert Path(served).read_bytes() == PLOTLY_JS.read_bytes()


def _options(ctx, *, k: int = 5, token: str = "last", plus: bool = True, rate: float = 0.5):
    """A method with one option of each type."""


OPTIONS = Method("m", "My method", _options, "", allowed={"k": range(1, 11), "token": ("last", "mean")})


def test_parse_options_types_follow_the_defaults():
    assert inputs.parse_options("k=7, token=mean, plus=false, rate=0.25", OPTIONS) == {
        "k": 7, "token": "mean", "plus": False, "rate": 0.25}
    assert inputs.parse_options("", OPTIONS) == {}
    for bad, message in (("k=seven", "k' must be a whole number, not 'seven'"), ("q=1", "Unknown option"),
                         ("k", "name=value"), ("plus=maybe", "must be a true or false"),
                         ("k=0", "My method: k must be a whole number 1…10, not 0"),
                         ("k=11", "k must be a whole number 1…10, not 11"),
                         ("token=first", "token must be one of last, mean, not 'first'")):
        with pytest.raises(InvalidInput, match=message):
            inputs.parse_options(bad, OPTIONS)


def test_a_long_option_is_quoted_short():
    with pytest.raises(InvalidInput) as refused:
        inputs.parse_options("k=" + "9" * 100_000, OPTIONS)
    assert len(str(refused.value)) < 200 and "99999…'" in str(refused.value)
    with pytest.raises(InvalidInput) as refused:
        inputs.parse_options("x" * 100_000 + "=1", OPTIONS)
    assert len(str(refused.value)) < 200 and str(refused.value).startswith("Unknown option 'xxx")


def test_user_errors_show_messages_not_tracebacks():
    @user_errors
    def fails():
        raise InvalidCut("Block [5, 5) is empty.")

    @user_errors
    def streams():
        yield 1
        raise InvalidInput("The prompt is empty.")

    @user_errors
    def breaks():
        raise KeyError("boom")

    with pytest.raises(gr.Error, match=r"Block \[5, 5\) is empty."):
        fails()
    gen = streams()
    assert next(gen) == 1
    with pytest.raises(gr.Error, match="prompt is empty"):
        next(gen)
    with pytest.raises(gr.Error, match="Something went wrong"):
        breaks()


def test_user_errors_cap_a_message_that_quotes_too_much():
    @user_errors
    def echoes():
        raise InvalidInput("Bad value " + "x" * 100_000)

    with pytest.raises(gr.Error) as shown:
        echoes()
    assert len(shown.value.message) == MAX_MESSAGE_CHARS and shown.value.message.startswith("Bad value xxx")
    assert shown.value.message.endswith("…")


def test_default_block_size_and_formatting():
    assert default_block_size(30) == 3 and default_block_size(80) == 8 and default_block_size(2) == 1
    assert text.human_count(134_515_008) == "134.5 M"
    assert "tokens/s" in text.generation_stats({"ttft_s": 0.2, "tokens_per_s": 12.0, "done": True})
    assert text.generation_stats({"ttft_s": None, "tokens_per_s": None, "done": False}) == "generating…"


def test_sweep_figure_shows_the_measurement_and_each_method_scaled_with_its_rank_agreement():
    from evaluation.sweeps.cuts import SweepReport
    from evaluation.sweeps.cuts import SweepResult

    sweep = SweepResult(task="arc_easy", block_size=2, num_layers=4, limit=5, starts=[0, 1, 2],
                        metrics={"acc": [0.3, 0.5, 0.4], "acc_norm": [0.2, 0.6, 0.4]},
                        baseline={"acc": 0.6, "acc_norm": 0.7}, higher_is_better={"acc": True, "acc_norm": True})
    report = SweepReport(sweep, {"angular": 1.0, "taylor": float("nan")},
                         {"angular": [3.0, 1.0, 2.0], "taylor": [float("inf"), 5.0, 7.0]})
    fig = plots.sweep_figure(report)
    measured, angular, taylor = fig.data
    assert list(measured.y) == [0.2, 0.6, 0.4] and measured.name == "measured acc_norm"
    assert list(angular.y) == [1.0, 0.0, 0.5] and angular.name == "angular (ρ = +1.00)"
    assert list(taylor.y) == [None, 0.0, 1.0] and taylor.name == "taylor"  # protected block left out
    assert "every cut of 2 layers" in fig.layout.title.text


def test_the_analysis_line_says_when_it_came_from_the_cache():
    result = _result()
    result.elapsed_s = 14.84
    assert text.analysis_status(result) == "**Angular distance (Gromov et al. 2024)**: scored in 14.8 s."
    result.from_cache = True
    assert text.analysis_status(result) == ("**Angular distance (Gromov et al. 2024)**: read from the cache "
                                            "(scored in 14.8 s earlier).")


def test_an_encoder_decoders_heatmap_marks_where_the_decoder_starts():
    import torch
    import transformers

    import prune
    from conftest import build_tiny_tokenizer
    from prune.core.calibration import Calibration

    tok = build_tiny_tokenizer()
    torch.manual_seed(0)
    model = transformers.AutoModelForSeq2SeqLM.from_config(transformers.T5Config(
        vocab_size=len(tok), d_model=16, d_kv=4, d_ff=32, num_layers=3, num_decoder_layers=2, num_heads=4,
        decoder_start_token_id=0, pad_token_id=0)).eval()
    result = prune.score(model, tok, "block_influence", calibration=Calibration(n_samples=2, seq_len=16),
                         use_cache=False)
    fig = plots.heatmap_figure(result)
    assert [shape.x0 for shape in fig.layout.shapes] == [2.5]  # between layer 2 (the encoder's last) and 3
    assert [a.text for a in fig.layout.annotations] == ["decoder →"]
    protected = _trace(fig, "protected")
    assert "spans two stacks" in protected.hovertemplate
    assert protected.z[1][2] == 1.0 and protected.z[2][0] == 1.0  # [2, 4) spans both; [0, 3) is all of the encoder
    assert not plots.heatmap_figure(_result()).layout.shapes  # a decoder's has no line
