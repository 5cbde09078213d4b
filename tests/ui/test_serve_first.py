"""Serve first, compute after: the server answers while its first screen is still being computed, and a page that
opens meanwhile waits for that computation — told its progress — instead of computing it a second time."""

from __future__ import annotations

import threading
import time
import urllib.request

from evaluation.core.pool import ModelSpec
from evaluation.serving.backend import Backend
from ui.session import Session

from conftest import free_port


def test_the_server_answers_before_the_first_screen_and_a_page_opened_meanwhile_waits_for_it(tiny_folder,
                                                                                              monkeypatch):
    import app
    from ui.page import build_page, first_screen

    backend = Backend(device="cpu")
    page = build_page(backend, default_model=ModelSpec(tiny_folder))
    release, scored, measured = threading.Event(), [], []
    place, score, feedback = backend.models.place, backend.analysis.score, backend.explain.cut_feedback
    monkeypatch.setattr(backend.models, "place", lambda spec: (release.wait(120), place(spec))[1])
    monkeypatch.setattr(backend.analysis, "score", lambda *args, **kwargs: (scored.append(1), score(*args,
                                                                                                   **kwargs))[1])
    monkeypatch.setattr(backend.explain, "cut_feedback", lambda *args, **kwargs: (measured.append(1), feedback(
        *args, **kwargs))[1])
    first_screen.start(page)  # held at its first step until released
    port = free_port()
    page.demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True,
                     **app.launch_options())
    context, method = page.handlers.context, page.header.method.value
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=60) as answer:
            assert answer.status == 200
        assert context.first_screen is None and not context.warming.done.is_set()  # it answered first
        told, opened = [], {}
        visitor = threading.Thread(target=lambda: opened.update(page.handlers.pick.opening(
            Session(), method, None, lambda fraction, desc=None: told.append(desc))))
        visitor.start()
        time.sleep(1.0)
        assert not opened and told and told[-1].startswith("Preparing the first screen — ")
        release.set()
        visitor.join(300)
        screen = context.first_screen
        assert screen is not None and context.warming.shown.is_set()
        assert opened[page.session].cut() == screen.session.cut() and opened[page.session].cut() is not None
        assert scored == [1]  # one analysis: the page took the start-up's
        assert page.handlers.cut.shown_feedback(opened[page.session]) == context.first_screen.feedback  # waited
        assert measured == [1]  # the cut's numbers measured once: the page took the start-up's
        settled = page.handlers.pick.settle(opened[page.session])  # waits for the rest of the start-up
        assert context.warming.done.is_set() and settled == context.first_screen.settled
        assert "Winners over" in settled[page.cut.stability_md] and backend.models.rates(ModelSpec(tiny_folder))
    finally:
        release.set()
        page.demo.close()


def test_a_restart_on_a_kept_cache_computes_nothing_again(tiny_folder, tmp_path, monkeypatch):
    """The analysis, the opening cut's numbers, the timing probe and the stability of a first start-up are read
    back by the next one (counted, not timed)."""
    import evaluation.serving.analysis as analysis
    import prune.depth.methods.context as context
    from evaluation.measure import speed
    from ui.page import build_page, first_screen

    monkeypatch.setenv("LAYERCUT_CACHE", str(tmp_path))
    ran = {"residual streams": 0, "timing probes": 0, "stability checks": 0}

    def counted(name, real):
        def run(*args, **kwargs):
            ran[name] += 1
            return real(*args, **kwargs)
        return run

    monkeypatch.setattr(context, "residual_streams", counted("residual streams", context.residual_streams))
    monkeypatch.setattr(speed, "probe_rates", counted("timing probes", speed.probe_rates))
    monkeypatch.setattr(analysis, "block_stability", counted("stability checks", analysis.block_stability))
    first = first_screen.warm(build_page(Backend(device="cpu"), default_model=ModelSpec(tiny_folder)))
    assert first is not None and first.settled is not None
    assert ran == {"residual streams": 1, "timing probes": 1, "stability checks": 1}  # counted: the patches bite
    again = first_screen.warm(build_page(Backend(device="cpu"), default_model=ModelSpec(tiny_folder)))
    assert ran == {"residual streams": 1, "timing probes": 1, "stability checks": 1}  # nothing computed again
    assert again.feedback.endswith("· cached")
    assert list(again.settled.values()) == list(first.settled.values())  # the same lines, on another page
    assert again.session.cut() == first.session.cut()


def test_a_page_opening_fires_only_the_events_listed_with_their_reasons(tiny_folder):
    """The events a page load triggers — the load event and every event chained after it — are exactly
    ``ui.page.PAGE_LOAD``'s, each of which says why it is there."""
    from ui.page import PAGE_LOAD, build_page

    dependencies = build_page(Backend(device="cpu"), default_model=ModelSpec(tiny_folder)).demo.get_config_file()[
        "dependencies"]
    fired = [d for d in dependencies if any(trigger == "load" for _, trigger in d["targets"])]
    ids = {d["id"] for d in fired}
    while chained := [d for d in dependencies if d.get("trigger_after") in ids and d["id"] not in {f["id"] for f in
                                                                                                  fired}]:
        fired += chained
        ids = {d["id"] for d in chained}
    assert sorted(d["api_name"] for d in fired) == sorted(PAGE_LOAD)
    assert all(len(reason) > 20 for reason in PAGE_LOAD.values())


def test_loading_or_analyzing_cancels_what_the_opening_would_still_write(tiny_folder):
    """A page opened during a cold start waits for its first screen and then for the rest of the start-up: a model
    the visitor loads meanwhile (or an analysis) must not be written over by them."""
    from ui.page import build_page

    page = build_page(Backend(device="cpu"), default_model=ModelSpec(tiny_folder))
    dependencies = page.demo.get_config_file()["dependencies"]
    by_name = {d["api_name"]: d["id"] for d in dependencies}

    def cancelled_by(button) -> set[int]:
        return {fn for d in dependencies if d["targets"] == [(button._id, "click")] for fn in d["cancels"]}

    opening, settle = by_name["startup"], by_name["settle"]
    assert {opening, settle} <= cancelled_by(page.header.load_btn)
    assert settle in cancelled_by(page.header.analyze_btn) and opening not in cancelled_by(page.header.analyze_btn)
