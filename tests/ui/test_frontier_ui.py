"""The frontier in the app: run as it goes, then the best under a target put into slot A with one click; bad input
and a frontier of another model refused in one line."""

from __future__ import annotations

import gradio as gr
import pytest

from evaluation.frontier.plan import DEFAULT_AXIS, Target
from ui import frontier_plots
from evaluation.serving.backend import Backend
from ui.session import Session

from conftest import deployment_frontier, handlers_on, tiny_model, update_of


@pytest.fixture(scope="module")
def served(tiny_tokenizer):
    """A real backend serving a tiny 8-layer Llama with room for the frontier's 512-token windows."""
    backend = Backend(device="cpu")
    model = tiny_model("llama", 8)
    model.config.max_position_embeddings = 1024
    spec = backend.models.adopt(model, tiny_tokenizer, name="tiny-llama-frontier-ui")
    return backend, spec, Session().for_model(spec, backend.models.load(spec))


@pytest.fixture(scope="module")
def ran(page, served):
    """Every output the frontier's run yielded."""
    backend, _spec, session = served
    return list(handlers_on(page, backend).frontier.run(session, "params", "90, 80", "arc_easy", 2, 1))


def test_the_frontier_redraws_as_each_point_arrives_and_keeps_what_it_measured(page, served, ran):
    _backend, spec, _session = served
    box = page.benchmarks.frontier
    assert len(ran) > 5 and all(box.plot in out and box.table in out for out in ran)
    first, last = ran[0][box.summary], ran[-1][box.summary]
    assert first.startswith("Measuring in full… 0 of") and last.startswith("Measured ") and "Pareto front" in last
    shown_spec, result = ran[-1][box.shown]
    assert shown_spec == spec and result.complete and result.sizes == (0.9, 0.8)
    assert "| 100 % | original | original |" in ran[-1][box.table] and "params not zero" in ran[-1][box.table]


def test_with_two_windows_the_page_shows_the_screen_first_then_the_frontier(page, served):
    """The early answer: each candidate's screen (its own table and figure, nothing to put into a slot yet), then
    the points measured in full; ticking 'Measure every candidate in full' skips the screen."""
    backend, _spec, session = served
    box = page.benchmarks.frontier
    handlers = handlers_on(page, backend).frontier
    ran = list(handlers.run(session, "bytes", "90", "arc_easy", 2, 2))
    screens = [out for out in ran if out[box.summary].startswith("Screening (2 perplexity windows a candidate")]
    assert screens and ran[:len(screens)] == screens and all(out[box.shown] is None for out in screens)
    assert screens[0][box.table].startswith("Screen: WikiText-2 test perplexity over the first 2 windows")
    assert "Screening: 1 candidate so far" in screens[1][box.plot].layout.title.text  # [0]: the original alone
    assert ran[-1][box.summary].startswith("Measured ") and ran[-1][box.shown][1].screen == 2
    everything = list(handlers.run(session, "bytes", "90", "arc_easy", 2, 2, everything=True))
    assert not any(out[box.shown] is None for out in everything) and everything[-1][box.shown][1].screen == 0


def test_the_best_under_a_target_goes_into_slot_a_and_the_page_edits_it(page, served, ran):
    backend, _spec, session = served
    box = page.benchmarks.frontier
    shown = ran[-1][box.shown]
    out = handlers_on(page, backend).frontier.best(session.with_cut(None, "A"), shown, "params=0.85")
    chosen = shown[1].best_under(Target("params", 0.85, True))
    after = update_of(out, page.view.session)
    assert chosen.params <= 0.85 * shown[1].dense.params and not chosen.recipe.is_original
    assert after.cut("A") == chosen.recipe and after.editing == "A" and after.cut("B") is None
    assert "the best under 85 % of the parameters" in after.cut("A").origin
    assert out[box.best_md].startswith("Best under 85 % of the parameters:") and "Now in A" in out[box.best_md]


def test_a_target_nothing_reaches_says_so_and_changes_no_slot(page, served, ran):
    backend, _spec, session = served
    out = handlers_on(page, backend).frontier.best(session, ran[-1][page.benchmarks.frontier.shown], "bytes=1KiB")
    assert out[page.benchmarks.frontier.best_md].startswith("No measured model is under 1 KiB as stored")
    assert page.view.session not in out


@pytest.mark.parametrize("target, shown, words", [
    ("size=3", "ran", "A target is bytes=0.8"),
    ("params=0.8", None, "Run the frontier on this model first"),
    ("params=0.8", "other", "Run the frontier on this model first"),
])
def test_bad_targets_and_missing_or_foreign_frontiers_are_one_line(page, served, ran, tiny_tokenizer, target, shown,
                                                                   words):
    backend, _spec, session = served
    state = ran[-1][page.benchmarks.frontier.shown]
    if shown == "other":  # a frontier of another visitor's model
        other = backend.models.adopt(tiny_model("llama", 4), tiny_tokenizer, name="another-model")
        state = (other, state[1])
    elif shown is None:
        state = None
    with pytest.raises(gr.Error, match=words):
        handlers_on(page, backend).frontier.best(session, state, target)


def test_more_than_five_sizes_or_an_unknown_axis_are_refused_before_any_work(page, served):
    backend, _spec, session = served
    handlers = handlers_on(page, backend).frontier
    with pytest.raises(gr.Error, match="at most 5 sizes"):
        list(handlers.run(session, "params", "95, 90, 85, 80, 75, 70", "arc_easy", 2, 1))
    with pytest.raises(gr.Error, match="Size the frontier by bytes, params, ms"):
        list(handlers.run(session, "flops", "90", "arc_easy", 2, 1))


def test_the_page_sizes_by_bytes_as_stored_and_says_what_zeros_save(page):
    box = page.benchmarks.frontier
    assert box.axis.value == DEFAULT_AXIS == "bytes" and box.target.value == "bytes=0.8"
    assert any("zeros stored densely save nothing" in label for label, _ in box.axis.choices)


def test_the_figure_joins_each_measured_floor_to_its_decode_and_flags_what_gains_nothing():
    figure = frontier_plots.frontier_figure(deployment_frontier())
    floors = sorted(tuple(trace.x) for trace in figure.data if trace.mode == "lines+markers")
    assert floors == [(3.4, 40.0), (10.7, 58.0), (12.6, 67.4)]  # int8, the depth cut, the original: no floor, none
    hovers = [text for trace in figure.data if trace.text for text in trace.text]
    assert sum("† neither smaller in bytes nor faster" in text for text in hovers) == 4  # Wanda-like, 2:4: 2 panels
    assert figure.layout.xaxis.title.text == "weight bytes as stored (MiB)"
    assert max(trace.x[0] for trace in figure.data if trace.name == "original") == 512.0  # MiB on the size axis


def test_every_family_the_frontier_plans_has_its_own_look():
    from evaluation.frontier.compound import Repair
    from evaluation.frontier.plan import FAMILIES, SINGLES

    looks = {family: frontier_plots.look(family) for family in (*FAMILIES, *Repair("kd", 1).families())}
    assert len({looks[family] for family in SINGLES}) == len(SINGLES)  # no two single families alike
    assert looks["experts, REAP + int4"][0] == looks["experts, REAP"][0]  # a compound takes its structure's colour

