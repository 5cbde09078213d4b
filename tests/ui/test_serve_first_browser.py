"""Serve first, compute after, in a real browser (Debian's Chromium): a page opened while the server still computes
its first screen shows the layout and that computation's progress at once, then the heatmap when it is ready."""

from __future__ import annotations

import tempfile
import threading
from pathlib import Path

import pytest

from evaluation.core.pool import ModelSpec
from evaluation.serving.backend import Backend

from conftest import free_port

pytestmark = pytest.mark.slow

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"]
SHOTS = Path(tempfile.mkdtemp(prefix="layercut-serve-first-"))


def test_a_page_opened_before_the_first_screen_shows_its_layout_and_progress_then_the_heatmap(tiny_folder,
                                                                                             monkeypatch):
    if not Path(CHROMIUM).exists():
        pytest.fail("Debian's chromium is not installed: run bash setup.sh --test")
    import app
    from playwright.sync_api import sync_playwright
    from ui.page import build_page, first_screen

    backend = Backend(device="cpu")
    page = build_page(backend, default_model=ModelSpec(tiny_folder))
    release, place = threading.Event(), backend.models.place
    monkeypatch.setattr(backend.models, "place", lambda spec: (release.wait(300), place(spec))[1])
    first_screen.start(page)  # held at its first step (loading the model) until released
    port = free_port()
    page.demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True,
                     **app.launch_options())
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
            tab = browser.new_page(viewport={"width": 1280, "height": 720})
            tab.goto(f"http://127.0.0.1:{port}/")
            tab.wait_for_selector("#heatmap", timeout=60_000)  # the layout, while the first screen is computed
            tab.wait_for_function("document.body.innerText.includes('Preparing the first screen — Loading')",
                                  timeout=60_000)
            assert tab.locator("#heatmap .lc-plot .hm").count() == 0 and not release.is_set()
            assert tab.locator("#analyze").is_visible() and tab.locator("#layer-range").count() == 1
            tab.screenshot(path=str(SHOTS / "while-computing.png"))
            release.set()
            tab.wait_for_selector("#heatmap .lc-plot .hm", timeout=300_000)
            tab.wait_for_function("document.querySelector('#cut-feedback').innerText.includes('agrees on')",
                                  timeout=300_000)
            tab.wait_for_function("document.querySelector('#stability').innerText.includes('Winners over')",
                                  timeout=300_000)  # then what the first screen did not wait for
            tab.get_by_role("tab", name="Generate").click()
            tab.wait_for_function("document.querySelector('#generate-estimate').innerText.includes('Estimate: ')",
                                  timeout=60_000)  # and the estimates, which divide by the speed measured
            tab.get_by_role("tab", name="Analyze & cut").click()
            tab.wait_for_function("!document.body.innerText.includes('Preparing the first screen')",
                                  timeout=30_000)  # every progress line gone
            tab.screenshot(path=str(SHOTS / "drawn.png"))
            browser.close()
    finally:
        release.set()
        page.demo.close()
