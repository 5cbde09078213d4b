"""A shared server in a real browser: a page closed in the middle of a benchmark (a job that does not
stream) frees the device for another visitor at once, instead of minutes later."""

from __future__ import annotations

import time

import pytest
from gradio_client import Client

from conftest import free_port
from evaluation.backend import Backend
from evaluation.offline_tasks import default_data_dir
from test_browser import ARGS, CHROMIUM, VIEWPORT, tab
from ui.inputs import Policy

pytestmark = pytest.mark.slow
WAIT_S = 120  # a bound on waiting for the job to stop, not a timing under test


def test_a_page_closed_during_a_benchmark_frees_the_device_for_another_visitor():
    import app
    from playwright.sync_api import sync_playwright

    policy = Policy(shared=True)
    backend = Backend(data_dir=str(default_data_dir()))
    demo = app.build_demo(backend, policy=policy)
    port = free_port()
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True,
                **app.launch_options(policy))
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
            page = browser.new_page(viewport=VIEWPORT)
            page.goto(f"http://127.0.0.1:{port}/")
            page.wait_for_selector("#heatmap .lc-plot .hm", timeout=600_000)
            assert "Server memory:" in page.inner_text("#server-memory")
            tab(page, "Benchmarks")
            page.fill("#limit input", "0")  # "all": 500 questions on a shared server
            page.click("#bench-btn")
            deadline = time.monotonic() + WAIT_S
            while not backend.jobs.busy() and time.monotonic() < deadline:
                time.sleep(0.2)
            assert backend.jobs.busy(), "the benchmark did not start"
            time.sleep(5)  # scoring
            page.close()
            deadline = time.monotonic() + WAIT_S
            while backend.jobs.busy() and time.monotonic() < deadline:
                time.sleep(0.5)
            assert not backend.jobs.busy(), "the closed page's benchmark still holds the device"
            browser.close()
        other = Client(f"http://127.0.0.1:{port}/", verbose=False, download_files=False)
        other.predict("angular", api_name="/startup")
        original, *_ = other.predict("What is the capital of France?", 8, 0, 1, 0, api_name="/generate")
        assert original["value"].strip()
    finally:
        demo.close()
