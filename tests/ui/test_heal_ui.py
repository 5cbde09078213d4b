"""Healing in the app: the loss curve grows step by step, the healed model lands in the other slot beside the
unhealed one, held-out perplexity of the three columns follows, and bad input is one line."""

from __future__ import annotations

import gradio as gr
import pytest

from evaluation.serving.backend import Backend
from prune.healing.step import Heal
from ui.session import Session

from conftest import handlers_on, tiny_model, update_of


@pytest.fixture
def visitor(tiny_tokenizer, data_dir, page):
    backend = Backend(data_dir=str(data_dir), device="cpu")
    spec = backend.adopt(tiny_model("llama", 4), tiny_tokenizer, name="tiny-llama")
    return handlers_on(page, backend).heal, Session().for_model(spec, backend.load(spec))


def test_the_curve_grows_and_the_healed_model_fills_the_other_slot(visitor, page):
    heals, session = visitor
    box, view = page.cut.heal, page.view
    others = [*view.outputs(), *page.benchmarks.results.outputs()]  # the heal event's outputs beside its own two
    session = session.with_block(1, 3, "chosen by hand")
    outputs = list(heals.heal(session, "last_layers", 3, 0))
    *live, done, measured = outputs
    assert len(live) == 4  # step 0 (before training), then each step
    for count, shown in enumerate(live, start=1):
        train, held = shown[box.plot].data
        assert len(train.x) == count and [update_of(shown, c) for c in others] == [gr.update()] * len(others)
        assert f"step {count - 1} of 3" in shown[box.status]
    assert list(live[-1][box.plot].data[1].x) == [0, 3]  # held out before training and at the end (every 10 steps)
    status = measured[box.status]
    new = measured[view.session]
    assert new.cuts[0] == session.cuts[0] and new.cuts[1] == session.cuts[0].then(Heal.of("last_layers", 3))
    assert new.editing == "A" and "**B is now A healed**: 3 steps" in status
    assert "WikiText-2 *test* perplexity" in status and all(f"{label} **" in status for label in ("original", "A", "B"))
    ppl = {m.model: m.value for m in new.results if m.group == "perplexity"}
    assert set(ppl) == {"original", "A", "B"} and f"B **{ppl['B']:.2f}**" in status
    assert "healing" in measured[view.banner] and "B" in measured[view.banner]  # the banner describes the healed slot


@pytest.mark.parametrize("cut, args, message", [
    (False, ("lora", 3, 0), "Choose a cut for A first"),
    (True, ("lora", -1, 0), "Healing steps"),
    (True, ("lora", 3, -5), "The time budget"),
    (True, ("sgd", 3, 0), "Unknown healing method 'sgd'"),
])
def test_bad_input_is_one_line(visitor, cut, args, message):
    heals, session = visitor
    session = session.with_block(1, 3, "chosen by hand") if cut else session
    with pytest.raises(gr.Error) as caught:
        list(heals.heal(session, *args))
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_a_healed_slot_is_not_healed_again(visitor):
    heals, session = visitor
    healed = session.with_cut(session.with_block(1, 3, "x").cuts[0].then(Heal.of("lora", 2)))
    with pytest.raises(gr.Error, match="already healed"):
        list(heals.heal(healed, "lora", 2, 0))
