"""Results name the models they measured and are marked out of date when a slot or the model changes."""

from __future__ import annotations

from dataclasses import replace

import gradio as gr

from evaluation.core.pool import ModelSpec
from prune.core.recipe import Recipe
from ui import slot_text
from ui.page import stale
from ui.session import Session

A = Recipe.block(30, 13, 16, origin="by hand")
B = Recipe.block(30, 20, 26, origin="by hand")


def session(a=A, b=None, name="tiny") -> Session:
    return Session(spec=ModelSpec(name), cuts=(a, b))


def test_fresh_numbers_name_the_model_and_each_slot_they_measured():
    what = slot_text.measured_what(session())
    assert what == ("tiny", (A, None))
    assert slot_text.measured_note(what, what) == "Measured on **tiny** · Original · A: cut 13–15"


def test_a_changed_slot_marks_the_numbers_out_of_date_and_names_it():
    then = slot_text.measured_what(session())
    note = slot_text.measured_note(then, slot_text.measured_what(session(b=B)))
    assert note.startswith('<span class="lc-stale">Out of date: B has changed since.</span>')
    assert "These results are for tiny · Original · A: cut 13–15." in note
    both = slot_text.measured_note(then, slot_text.measured_what(session(a=B, b=A)))
    assert "A and B have changed since" in both
    other = slot_text.measured_note(then, slot_text.measured_what(session(name="other")))
    assert "another model (other) is loaded" in other


def test_the_page_check_leaves_unmeasured_areas_empty_and_follows_each_area_state():
    check = stale.notes
    now = session(b=B)
    then = slot_text.measured_what(session())
    notes = check(now, None, then)
    assert notes[0] == "" and notes[1].startswith('<span class="lc-stale">Out of date: B has changed')
    assert check(now, slot_text.measured_what(now), None) == [slot_text.measured_note(slot_text.measured_what(now),
                                                                             slot_text.measured_what(now)), ""]
    assert replace(now, editing="B").cuts == now.cuts  # editing another slot changes no numbers
    assert check(replace(now, editing="B"), slot_text.measured_what(now), None)[0].startswith("Measured on")


def events_named(page, prefix: str) -> list:
    return [fn for fn in page.demo.fns.values() if (fn.api_name or "").startswith(prefix)]


def test_a_new_n_clears_the_stability_measured_for_another(page):
    from ui.page.cut_handlers import CutHandlers

    [event] = events_named(page, "stability_pending")
    assert [target[1] for target in event.targets] == ["input"]  # the visitor's own moves, not a load's
    assert event.inputs == [page.cut.block_size] and event.outputs == [page.cut.stability_md]
    assert CutHandlers.stability_pending(8) == ("N is now **8**: press *How stable is the best block of N?* to "
                                                 "measure its stability.")


def test_every_slot_change_is_followed_by_each_result_notes_check(page):
    from ui.page import FEEDBACK_AFTER

    checks = events_named(page, "stale_check_")
    assert len(checks) == len(FEEDBACK_AFTER) - 1  # not after a page's opening: nothing is measured yet
    notes = {area.note for area in page.measured}
    assert notes and all(set(fn.outputs) == notes for fn in checks)


def test_a_build_line_gives_way_when_a_slot_changes_another_way(page):
    from ui.page import BUILDS, FEEDBACK_AFTER, OPENING
    from ui.page.cut_handlers import CutHandlers

    built = slot_text.built_status({"B": B}, {"B": 0}, 3.0)
    assert built.startswith(slot_text.BUILT)
    assert CutHandlers.status_after_change(session(), built) == ""  # no analysis: nothing to go back to
    assert CutHandlers.status_after_change(session(), "**Angular**: scored in 2 s") == gr.update()  # not a build's
    after = {fn.api_name for fn in events_named(page, "status_after_")}
    assert after == {f"status_after_{name}" for event, name in FEEDBACK_AFTER.items()
                     if event not in (*BUILDS, OPENING)}  # an opening has no build line to replace
