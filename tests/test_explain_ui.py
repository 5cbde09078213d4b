"""Explaining the cut in the app: the numbers beside the range after a release, a superseded release changing
nothing, and no numbers without a cut."""

from __future__ import annotations

import gradio as gr
import pytest

from evaluation.backend import Backend
from evaluation.jobs import Cancelled
from prune.recipe import Recipe
from ui.explain_handlers import ExplainHandlers
from ui.handlers import Handlers
from ui.session import Session

from conftest import tiny_model


@pytest.fixture
def visitor(tiny_tokenizer):
    backend = Backend(data_dir="", device="cpu")
    spec = backend.adopt(tiny_model("llama", 6), tiny_tokenizer, name="tiny-llama")
    return ExplainHandlers(Handlers(backend)), Session().for_model(spec, backend.load(spec))


def test_a_release_shows_the_cuts_numbers_against_the_original(visitor):
    explains, session = visitor
    assert explains.feedback(session) == ""  # no cut yet: nothing to compare
    cut = session.with_block(2, 4, "chosen by hand")
    shown = explains.feedback(cut)
    found = explains.h.backend.cut_feedback(session.spec, Recipe.block(6, 2, 4))  # the same numbers, cached
    assert shown.startswith("**A against the original**") and found.summary() in shown
    assert found.cached and "cached" in explains.feedback(cut)
    other = explains.feedback(session.with_block(0, 3, "chosen by hand"))
    assert "resumed from layer 0" in other and other != shown


def test_a_superseded_release_changes_nothing(visitor, monkeypatch):
    explains, session = visitor

    def superseded(*_args, **_kwargs):
        raise Cancelled("Cancelled: the cut feedback was stopped before it finished.")

    monkeypatch.setattr(explains.h.backend, "cut_feedback", superseded)
    assert explains.feedback(session.with_block(1, 2, "chosen by hand")) == gr.update()
