"""A shared server in a real browser: a page closed in the middle of a benchmark (a job that does not
stream) frees the device for another visitor at once, instead of minutes later."""

from __future__ import annotations

import time

import pytest
from gradio_client import Client

from conftest import shared_server
from test_browser import ARGS, CHROMIUM, VIEWPORT, tab

pytestmark = pytest.mark.slow
WAIT_S = 120  # a bound on waiting for the job to stop, not a timing under test


def test_a_page_closed_during_a_benchmark_frees_the_device_for_another_visitor():
    from playwright.sync_api import sync_playwright

    with shared_server() as (url, backend):
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
            page = browser.new_page(viewport=VIEWPORT)
            page.goto(url)
            page.wait_for_selector("#heatmap .lc-plot .hm", timeout=600_000)
            assert "Server memory:" in page.inner_text("#server-memory")
            tab(page, "Benchmarks")
            page.fill("#limit input", "0")  # "all": 500 questions on a shared server
            page.click("#bench-btn")
            deadline = time.monotonic() + WAIT_S
            while not backend.models.jobs.busy() and time.monotonic() < deadline:
                time.sleep(0.2)
            assert backend.models.jobs.busy(), "the benchmark did not start"
            time.sleep(5)  # scoring
            page.close()
            deadline = time.monotonic() + WAIT_S
            while backend.models.jobs.busy() and time.monotonic() < deadline:
                time.sleep(0.5)
            assert not backend.models.jobs.busy(), "the closed page's benchmark still holds the device"
            browser.close()
        other = Client(url, verbose=False, download_files=False)
        other.predict("angular", api_name="/startup")
        original, *_ = other.predict("What is the capital of France?", 8, 0, 1, 0, api_name="/generate")
        assert original["value"].strip()
