"""The surgical rank search in the app: the live plot grows with each projection, the searched model lands in the
edited slot (its rank map drawn), and bad input is one line before any work."""

from __future__ import annotations

import gradio as gr
import pytest

from evaluation.serving.backend import Backend
from prune.core.calibration import BUILTIN_TEXTS
from prune.lowrank.step import Decompose
from ui import explain_plots
from ui.session import Session

from conftest import handlers_on, tiny_model, update_of

LAYERS = 4
CAL_INPUTS = ("text", BUILTIN_TEXTS[0].read_text()[:4000], None, 4, 32)


@pytest.fixture
def visitor(tiny_tokenizer, data_dir, page):
    backend = Backend(data_dir=str(data_dir), device="cpu")
    spec = backend.models.adopt(tiny_model("llama", LAYERS), tiny_tokenizer, name="tiny-llama")
    return handlers_on(page, backend).search, Session().for_model(spec, backend.models.load(spec))


def test_the_plot_grows_with_each_projection_and_the_result_fills_the_edited_slot(visitor, page):
    searches, session = visitor
    search_box, view = page.cut.search, page.view
    # the search event's outputs beside its own two (the view: 9)
    others = [*view.outputs(), *page.cut.rank_map.outputs()]
    outputs = list(searches.rank_search(session, "feature", "wikitext2", 1.0, 10, 1, "", *CAL_INPUTS))
    *live, final = outputs
    assert len(live) == 1 + 7  # the original, then each projection of the last layer
    for count, shown in enumerate(live, start=1):
        search, test, *_ = shown[search_box.plot].data
        rest = [update_of(shown, c) for c in others]
        assert len(search.x) == count and len(rest) == 11 and all(r == gr.update() for r in rest)
        assert len(test.x) == (2 if count == 8 else 1)  # the test split: the original, then after the layer
    assert live[0][search_box.summary].startswith("Original: WikiText-2 perplexity")
    assert "Layer 3 " in live[-1][search_box.summary]
    figure, summary, box = final[search_box.plot], final[search_box.summary], final[page.cut.rank_map.box]
    new_session = final[view.session]
    recipe = new_session.cuts[0]
    step = recipe.steps[0]
    assert isinstance(step, Decompose) and not step.sequential and {layer for layer, _, _ in step.ranks} == {3}
    assert new_session.cuts[1] is None and session.cuts[0] is None  # the visitor's old session is untouched
    assert "Searched:" in summary and "It is now **A**" in summary and box["visible"] is True
    assert "searched ranks" in final[view.banner]  # the banner describes it
    backend = searches.context.backend
    assert backend.models.model(session.spec, recipe) is not None
    # the plot's last search point is the result's parameters and search score
    search = figure.data[0]
    result_kept = 100 * sum(p.numel() for p in backend.models.model(session.spec, recipe).parameters())
    whole = sum(p.numel() for p in backend.models.model(session.spec).parameters())
    assert search.x[-1] == pytest.approx(result_kept / whole)


@pytest.mark.parametrize("args, message", [
    (("feature", "nonsense", 1.0, 10, 1, ""), "Search on wikitext2 or a benchmark task"),
    (("feature", "wikitext2", -1, 10, 1, ""), "The tolerance"),
    (("feature", "wikitext2", 1.0, 10, 0, ""), "The layers searched"),
    (("diagonal", "wikitext2", 1.0, 10, 1, ""), "Unknown decomposition space"),
    (("weight", "wikitext2", 1.0, 10, 1, "nope_proj"), "No projection named 'nope_proj'"),
])
def test_bad_input_is_one_line_and_leaves_the_slots(visitor, args, message):
    searches, session = visitor
    with pytest.raises(gr.Error) as caught:
        list(searches.rank_search(session, *args, *CAL_INPUTS))
    assert message in str(caught.value) and "\n" not in str(caught.value)
    assert not searches.context.backend.models.jobs.busy()


def test_the_bound_drawn_is_the_tolerance_by_hand():
    from prune.lowrank.rank_search import Point

    points = [Point(-1, "", None, 100, 10.0, 12.0), Point(1, "mlp.up_proj", 4, 90, 10.2)]
    figure = explain_plots.rank_search_figure(points, "ppl", 10.0 * 1.01)
    assert [t.name for t in figure.data] == ["search split", "test split (after each layer)",
                                             "original, search split", "original, test split",
                                             "tolerance (search split)"]
    assert list(figure.data[0].x) == [100.0, 90.0] and list(figure.data[1].y) == [12.0]
    assert list(figure.data[4].y) == [10.1, 10.1] and figure.layout.xaxis.autorange == "reversed"
