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
    spec = backend.models.adopt(tiny_model("llama", 4), tiny_tokenizer, name="tiny-llama")
    return handlers_on(page, backend).heal, Session().for_model(spec, backend.models.load(spec))


def test_the_curve_grows_and_the_healed_model_fills_the_other_slot(visitor, page):
    heals, session = visitor
    box, view = page.cut.heal, page.view
    others = [*view.outputs(), *page.benchmarks.results.outputs()]  # the heal event's outputs beside its own two
    session = session.with_block(1, 3, "chosen by hand")
    outputs = list(heals.heal(session, "last_layers", "task", 1, 3, 0))
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
    (False, ("lora", "task", 1, 3, 0), "Choose a cut for A first"),
    (True, ("lora", "task", 1, -1, 0), "Healing steps"),
    (True, ("lora", "task", 1, 3, -5), "The time budget"),
    (True, ("sgd", "task", 1, 3, 0), "Unknown repair 'sgd'"),
    (True, ("lora", "jsd", 1, 3, 0), "Unknown healing loss 'jsd'"),
    (True, ("lora", "kd", 0, 3, 0), "The temperature"),
    (False, ("patch-lstsq", "task", 1, 0, 0), "Choose a cut for A first"),
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
        list(heals.heal(healed, "lora", "task", 1, 2, 0))


def test_a_distilled_heal_records_its_teacher_and_draws_its_divergence(visitor, page):
    heals, session = visitor
    session = session.with_block(1, 3, "chosen by hand")
    *live, _, measured = list(heals.heal(session, "last_layers", "kd_mix", 2, 2, 0))
    healed = measured[page.view.session].cuts[1].steps[-1]
    assert healed.option["teacher"] == "forward_kl" and healed.option["kd_ratio"] == 0.5
    assert healed.option["temperature"] == 2
    assert "forward KL (KD) to the original × 0.5 + next-token loss × 0.5" in live[-1][page.cut.heal.plot].data[0].name
    assert live[0][page.cut.heal.plot].data[0].y[0] > 0  # the cut differs from its teacher before training


@pytest.mark.parametrize("by_button", [True, False])
def test_the_patch_fills_the_other_slot_from_the_box_or_one_click(visitor, page, by_button):
    heals, session = visitor
    session = session.with_block(1, 3, "chosen by hand")
    outputs = list(heals.patch(session) if by_button else heals.heal(session, "patch-lstsq", "task", 1, 0, 0))
    status_md = page.header.analysis_md if by_button else page.cut.heal.status
    started, done, measured = outputs
    assert "Patching A's cut into B: linear patch (ReplaceMe, least squares)" in started[status_md]
    new = measured[page.view.session]
    assert new.cuts[0] == session.cuts[0] and new.cuts[1].steps[:-1] == session.cuts[0].steps
    assert new.cuts[1].steps[-1].kind == "patch"
    status = measured[status_md]
    ppl = {m.model: m.value for m in new.results if m.group == "perplexity"}
    if by_button:  # the one-line status bar: its numbers first
        assert status.startswith("**B = A patched** · test ppl original ") and f"B {ppl['B']:.1f}" in status
        assert "fit error" in status and "(plain cut " in status
    else:
        assert "**B is now A patched** (lstsq" in status and "block [1, 3) → layer 0's down projection" in status
        assert all(f"{label} **" in status for label in ("original", "A", "B"))


@pytest.mark.parametrize("block, message", [((0, 2), "starts at layer 0"), (None, "holds no depth cut to patch")])
def test_a_patch_that_cannot_apply_is_one_line(visitor, block, message):
    heals, session = visitor
    if block is not None:
        session = session.with_block(*block, "chosen by hand")
    with pytest.raises(gr.Error) as caught:
        list(heals.patch(session))
    assert message in str(caught.value) and "\n" not in str(caught.value)
