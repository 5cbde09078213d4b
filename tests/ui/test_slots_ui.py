"""Slots that say what they hold: an empty slot or one without a depth cut shows no selection and says why, and
the buttons that write a slot (Build, Heal, the rank search) name it and what it holds before they run."""

from __future__ import annotations

from dataclasses import replace

import pytest

from evaluation.serving.backend import Backend
from prune.core.recipe import Recipe
from prune.lowrank.step import Decompose
from prune.sparsity.step import Sparsify
from ui import repair_text
from ui.page import FEEDBACK_AFTER, OPENING
from ui.session import Session

from conftest import handlers_on, tiny_model

LAYERS = 6
LOW_RANK = Recipe((Decompose.of("weight", param_ratio=0.8),))


@pytest.fixture(scope="module")
def loaded(tiny_tokenizer):
    """A session on a tiny 6-layer Llama served by a real backend."""
    backend = Backend(data_dir="", device="cpu")
    spec = backend.models.adopt(tiny_model("llama", LAYERS), tiny_tokenizer, name="tiny-llama")
    return backend, Session().for_model(spec, backend.models.load(spec))


def test_an_empty_slot_shows_no_selection_and_says_how_to_make_one(loaded, page):
    _backend, session = loaded
    session = replace(session.with_block(1, 3, "by hand"), editing="B")
    shown = page.view.show(session)[page.view.layer_range]
    assert shown["value"] is None and shown["custom"] is False
    assert shown["note"] == "B is empty — drag the range or click a heatmap cell to cut"
    shown = page.view.show(replace(session, editing="A"))[page.view.layer_range]
    assert shown["value"] == [1, 3] and shown["note"] == ""  # A's block, and nothing to explain


def test_a_slot_without_a_depth_cut_says_what_it_holds_instead_of_handles(loaded, page):
    _backend, session = loaded
    wanda = Recipe((Sparsify.of("wanda", 0.5),))
    shown = page.view.show(replace(session, editing="B").with_cut(wanda))[page.view.layer_range]
    assert shown["value"] is None
    assert shown["note"] == ("B holds Wanda, 50 % unstructured sparsity (calibration: builtin, 32 × 128 tokens) "
                             "— dragging here replaces it")
    dropped = Recipe.drop(LAYERS, attention=[2], mlp=[])
    shown = page.view.show(session.with_cut(dropped))[page.view.layer_range]
    assert shown["value"] is None and shown["note"].startswith("A holds attention dropped in layer 2 (1 of 6)")


def test_a_note_is_escaped_for_the_html_it_is_shown_in(loaded, page):
    from ui.range_control import range_update

    update = range_update(None, layers=4, layer_params=[1] * 4, total_params=4, note="A holds <b>x</b> & y")
    assert update["note"] == "A holds &lt;b&gt;x&lt;/b&gt; &amp; y"


def test_build_heal_and_search_name_the_slot_they_write_and_what_it_holds(loaded, page):
    _backend, session = loaded
    session = replace(session.with_block(1, 3, "by hand"), editing="B").with_cut(LOW_RANK)
    targets = page.targets
    shown = targets.show(session)
    assert shown[targets.build]["value"] == "Build into B (replaces B: weight 80%)"
    assert shown[targets.search]["value"] == "Search ranks into B (replaces B: weight 80%)"
    assert shown[targets.heal]["value"] == "Heal B into A (replaces A: cut 1–2)"
    assert targets.show(session, stack=True)[targets.build]["value"] == "Build into B (after B: weight 80%)"
    shown = targets.show(replace(session, editing="A"))
    assert shown[targets.heal]["value"] == "Heal A into B (replaces B: weight 80%)"
    assert shown[targets.build]["value"] == "Build into A (replaces A: cut 1–2)"
    empty = targets.show(session.with_cut(None))  # B emptied
    assert empty[targets.build]["value"] == "Build into B" and empty[targets.search]["value"] == "Search ranks into B"


def test_the_labels_follow_every_event_that_changes_a_slot_and_builds_stacking(page):
    wired = {fn.api_name: fn for fn in page.demo.fns.values()}
    names = [f"targets_after_{name}" for event, name in FEEDBACK_AFTER.items() if event != OPENING]
    for name in [*names, "targets_after_stack", "around_opening"]:  # a page's opening: with the expert box
        fn = wired[name]
        targets = [block._id for block in page.targets.outputs()]
        assert [block._id for block in fn.outputs][:len(targets)] == targets, name
        assert [block._id for block in fn.inputs] == [page.session._id, page.header.steps.stack._id], name


def test_healing_says_what_it_replaced():
    said = repair_text.heal_done({"steps_done": 3}, "A", "B", LOW_RANK)
    assert said.startswith("**B is now A healed**: 3 steps. It replaced B's weight 80%. Compare")
    assert "replaced" not in repair_text.heal_done({"steps_done": 3}, "A", "B")


def test_the_targets_handler_returns_the_labels(loaded, page):
    backend, session = loaded
    handlers = handlers_on(page, backend)
    shown = handlers.cut.targets(session.with_cut(LOW_RANK), True)
    assert shown[page.targets.build]["value"] == "Build into A (after A: weight 80%)"
