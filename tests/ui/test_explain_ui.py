"""Explaining the cut in the app: the numbers beside the range after a release, a superseded release changing
nothing, and no numbers without a cut."""

from __future__ import annotations

import gradio as gr
import pytest

from evaluation.serving.backend import Backend
from evaluation.core.jobs import Cancelled
from prune.core.recipe import Recipe
from ui import palette, text
from ui.session import Session

from conftest import handlers_on, tiny_model, update_of


@pytest.fixture
def visitor(tiny_tokenizer, page):
    backend = Backend(data_dir="", device="cpu")
    spec = backend.models.adopt(tiny_model("llama", 6), tiny_tokenizer, name="tiny-llama")
    return handlers_on(page, backend), Session().for_model(spec, backend.models.load(spec))


def test_a_release_shows_the_cuts_numbers_against_the_original(visitor):
    handlers, session = visitor
    feedback = handlers.cut.feedback
    assert feedback(session) == ""  # no cut yet: nothing to compare
    cut = session.with_block(2, 4, "chosen by hand")
    shown = feedback(cut)
    found = handlers.context.backend.explain.cut_feedback(session.spec, Recipe.block(6, 2,
                                                                                     4))  # the same numbers, cached
    assert shown.startswith("**A against the original**") and found.summary() in shown
    assert found.cached and "cached" in feedback(cut)
    other = feedback(session.with_block(0, 3, "chosen by hand"))
    assert "resumed from layer 0" in other and other != shown


def test_the_numbers_follow_the_edited_slot_and_the_slider_its_cut(visitor, page):
    handlers, session = visitor
    cuts, cut_size, edited = handlers.cut, handlers.steps.cut_size, page.view.session
    a = session.with_block(2, 4, "chosen by hand")
    assert cuts.feedback(a).startswith("**A against the original**")
    b = cuts.edit_slot(a, "B")[edited]
    assert cuts.feedback(b) == ""  # B is empty: A's numbers no longer show
    b = b.with_block(0, 3, "chosen by hand")
    assert cuts.feedback(b).startswith("**B against the original**")
    assert cut_size(b) == gr.update(value=3)
    cleared = cuts.clear_slot(b)[edited]
    assert cuts.feedback(cleared) == "" and cut_size(cleared) == gr.update()


def test_a_superseded_release_changes_nothing(visitor, monkeypatch):
    handlers, session = visitor

    def superseded(*_args, **_kwargs):
        raise Cancelled("Cancelled: the cut feedback was stopped before it finished.")

    monkeypatch.setattr(handlers.context.backend.explain, "cut_feedback", superseded)
    assert handlers.cut.feedback(session.with_block(1, 2, "chosen by hand")) == gr.update()


def test_after_a_generation_each_column_is_marked_where_it_leaves_the_original(visitor, page):
    handlers, session = visitor
    explains, tab = handlers.generate, page.generate
    session = session.with_block(1, 5, "chosen by hand")
    states = list(explains.generate(session, "The quick brown fox", 12, 0, 1, 0))
    answers = states[-1][tab.answers]
    assert set(answers) == {"original", "A"}
    shown = explains.divergence(session, "The quick brown fox", 12, answers)
    text_a, text_b = (update_of(shown, tab.columns[slot].answer) for slot in "AB")
    marked_a, marked_b = (update_of(shown, tab.columns[slot].marked) for slot in "AB")
    figure, caption = shown[tab.divergence_plot], shown[tab.divergence_md]
    report = handlers.context.backend.explain.divergence(session.spec, session.variants(), "The quick brown fox",
                                           max_new_tokens=12, answers={"A": answers["A"]})
    column = report.columns["A"]
    assert text_b == gr.update() and marked_b == gr.update()  # no B
    if column.first is None:
        assert text_a == gr.update() and marked_a == gr.update()
        assert "follows the original's answer to the end" in caption
    else:  # the marked answer shows in the plain one's place
        assert text_a == gr.update(visible=False)
        marked = text.divergence_html("A", session.variants(), column.parts, column.first)
        assert marked_a == gr.update(value=marked, visible=True)
        assert f"leaves the original's answer at token {column.first}" in caption
    assert f"**A** agrees on {column.agreement_pct:.0f} % of next tokens" in caption
    assert list(figure.data[0].y) == pytest.approx(list(column.kl)) and len(figure.data) == 1
    assert figure.data[0].name.startswith(text.column_label("A", session.variants()) + ": agrees on")
    assert figure.data[0].line.color == palette.MODEL_COLORS["A"]
    again = next(explains.generate(session, "The quick brown fox", 12, 0, 1, 0))  # a new answer streams plain
    assert [again[tab.columns[slot].marked] for slot in "AB"] == [gr.update(visible=False)] * 2
    assert all(again[tab.columns[label].answer]["visible"] is True for label in ("original", "A", "B"))


def test_divergence_without_a_cut_or_answers_shows_nothing(visitor, page):
    handlers, session = visitor
    tab = page.generate
    shown = handlers.generate.divergence(session, "Hi", 8, {"original": [1, 2]})
    texts = [update_of(shown, getattr(tab.columns[slot], part)) for slot in "AB" for part in ("answer", "marked")]
    assert texts == [gr.update()] * 4 and shown[tab.divergence_md] == ""


def test_the_logit_lens_shows_the_original_with_the_cut_marked_and_the_cut_model_beside(visitor, page):
    handlers, session = visitor
    lens, tab = handlers.generate.logit_lens, page.generate
    shown = lens(session, "The quick brown fox jumps")
    original, empty = shown[tab.lens_original], shown[tab.lens_cut]
    assert list(original.data[0].y) == [-1, 0, 1, 2, 3, 4, 5] and "Choose a cut" in empty.layout.annotations[0].text
    cut = session.with_block(2, 4, "chosen by hand")
    shown = lens(cut, "The quick brown fox jumps")
    original, beside = shown[tab.lens_original], shown[tab.lens_cut]
    lenses = handlers.context.backend.explain.logit_lens(cut.spec, {"A": cut.cut()}, "The quick brown fox jumps",
                                                         last=12)
    assert list(beside.data[0].y) == [-1, 0, 1, 2, 3, 4, 5]  # the kept layers at their original depth …
    rows = [list(r) for r in lenses["A"].probs]
    assert [list(r) for r in beside.data[0].z] == [*rows[:3], [None] * len(rows[0]), [None] * len(rows[0]), *rows[3:]]
    assert list(beside.layout.yaxis.ticktext)[3:5] == ["(layer 2 removed)", "(layer 3 removed)"]  # … gaps between
    ticks = list(original.layout.yaxis.ticktext)
    assert ticks[3] == "✂ layer 2" and ticks[4] == "✂ layer 3" and ticks[5] == "layer 4"
