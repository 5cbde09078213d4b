"""The expert heatmap in a real browser (Debian's Chromium through Playwright) on a tiny mixture of experts served as
a local folder: the box opens, Map the experts draws layers × experts, the slider sets the edited slot (its banner,
the removed experts crossed out, the bytes line and the numbers against the original), a click on an expert too. The
screenshot is kept in the run's temp folder (with LAYERCUT_SCREENSHOTS=assets, as assets/screenshot-experts.png)."""

from __future__ import annotations

import pytest

from evaluation.core.pool import ModelSpec
from tiny_architectures import tiny

import test_browser
from test_browser import ASSETS, open_page

browser = test_browser.browser

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def moe_page(browser, tmp_path_factory, tiny_tokenizer):
    folder = tmp_path_factory.mktemp("tiny-moe")
    model = tiny("qwen3_moe")  # 4 layers of 4 experts, 2 a token; the tiny tokenizer's 320 tokens
    model.save_pretrained(folder)
    tiny_tokenizer.save_pretrained(folder)
    yield from open_page(browser, ModelSpec(str(folder)))


def test_map_the_experts_then_the_slider_and_a_click_set_the_slot(moe_page):
    page = moe_page
    page.locator("#experts-box").get_by_text("Experts: which matter").click()
    page.locator("#experts-btn").click()
    page.wait_for_selector("#expert-map .lc-plot .hm", timeout=120_000)
    assert page.locator("#expert-map .lc-plot .xtick").count() == 4  # experts 0…3
    box = page.locator("#experts-removed input[type=number]")
    box.fill("2")
    box.press("Tab")  # the number box's blur releases the slider
    page.wait_for_function("document.querySelector('#experts-line').innerText.includes('2 of 4 experts removed')",
                           timeout=60_000)
    page.wait_for_function("document.querySelector('#cut-feedback').innerText.includes('agrees on')",
                           timeout=120_000)
    assert "REAP expert pruning, 50 % of each layer's experts removed" in page.locator("#cut-banner").inner_text()
    page.locator("#expert-map").scroll_into_view_if_needed()
    page.screenshot(path=str(ASSETS / "screenshot-experts.png"), full_page=False)
    page.locator("#expert-ranked input").check()  # each layer sorted, least salient first
    page.wait_for_function("document.querySelector('#expert-map').innerText.includes('least salient first')",
                           timeout=60_000)
    plot = page.locator("#expert-map .lc-plot .nsewdrag").first
    bounds = plot.bounding_box()
    plot.click(position={"x": bounds["width"] * 0.1, "y": bounds["height"] * 0.1})  # the first column: 1 a layer
    page.wait_for_function("document.querySelector('#experts-line').innerText.includes('1 of 4 experts removed')",
                           timeout=60_000)
