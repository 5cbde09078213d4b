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
    release, scored = threading.Event(), []
    place, score = backend.models.place, backend.analysis.score
    monkeypatch.setattr(backend.models, "place", lambda spec: (release.wait(120), place(spec))[1])
    monkeypatch.setattr(backend.analysis, "score", lambda *args, **kwargs: (scored.append(1), score(*args,
                                                                                                   **kwargs))[1])
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
        assert screen is not None and context.warming.done.is_set()
        assert opened[page.session].cut() == screen.session.cut() and opened[page.session].cut() is not None
        assert scored == [1]  # one analysis: the page took the start-up's
    finally:
        release.set()
        page.demo.close()
