"""The app in a real browser: Debian's headless Chromium driven by Playwright, on the default model.

The tests share one page and run in file order (pick → see → drag → click → generate →
benchmark → speed), saving a screenshot of each tab to assets/screenshot-<tab>.png. Timings
(start-up, page open → heatmap, Analyze → heatmap) are printed, not asserted.
"""

from __future__ import annotations

import time
import os
import tempfile
from pathlib import Path

import pytest

from conftest import free_port

pytestmark = pytest.mark.slow

# The README's screenshots: refreshed with LAYERCUT_SCREENSHOTS=assets; otherwise a temp folder,
# so a test run leaves the work tree clean.
ASSETS = (Path(__file__).resolve().parents[2] / "assets" if os.environ.get("LAYERCUT_SCREENSHOTS") == "assets"
          else Path(tempfile.mkdtemp(prefix="layercut-screens-")))
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]
VIEWPORT = {"width": 1280, "height": 720}  # a projector's screen: the first one must tell the story
TIMINGS: dict[str, float] = {}


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.fail("Debian's chromium is not installed: run bash setup.sh --test")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def page(browser):
    yield from open_page(browser)


def open_page(browser, default_model=None):
    """A page on a server of its own, whose first screen is computed before it launches (app.py: beside it);
    ``default_model`` (a ModelSpec) is the server's model, the embedded default if None."""
    import app
    from ui.page import build_page, first_screen

    started = time.perf_counter()
    built = build_page(default_model=default_model)
    assert first_screen.warm(built) is not None  # before the launch here: the tests start on a drawn first screen
    TIMINGS["start-up: the first screen computed"] = time.perf_counter() - started
    port = free_port()
    built.demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True,
                      **app.launch_options())
    page = browser.new_page(viewport=VIEWPORT)
    try:
        opened = time.perf_counter()
        page.goto(f"http://127.0.0.1:{port}/")
        page.wait_for_selector("#heatmap .lc-plot .hm", timeout=300_000)
        TIMINGS["page open → first heatmap (the server warm)"] = time.perf_counter() - opened
        page.wait_for_selector("#analyze", state="visible", timeout=60_000)
        yield page
    finally:
        page.close()
        built.demo.close()


def tab(page, name: str) -> None:
    page.get_by_role("tab", name=name).click()
    page.wait_for_timeout(300)


def banner(page) -> str:
    return page.inner_text("#cut-banner")


def wait_banner(page, text: str, timeout: float = 30_000) -> None:
    page.wait_for_function("t => document.querySelector('#cut-banner').innerText.includes(t)", arg=text,
                           timeout=timeout)


# Gradio's status tracker (a timer, the job's progress line) sits inside an output while its event
# runs, and an output can show its new value a moment before the tracker goes.
SETTLED = """([selector, text]) => {
    const el = document.querySelector(selector);
    return el.innerText.includes(text) && !el.querySelector('.progress-text, .eta-bar, .progress-level');
}"""


def settled_text(page, selector: str, text: str, timeout: float = 120_000) -> str:
    """The text of an output once it includes `text` and its event's status tracker has gone."""
    page.wait_for_function(SETTLED, arg=[selector, text], timeout=timeout)
    return page.inner_text(selector)


def test_heatmap_renders_with_best_blocks_and_selection(page):
    title = page.text_content("#heatmap .gtitle")
    assert "lower = more removable" in title
    assert page.locator("#heatmap .hm").count() >= 1  # the heatmap trace
    assert page.locator("#heatmap .scatterlayer .point").count() >= 29  # a best-block marker per size, + selection
    start = page.get_attribute("#layer-range .lc-range", "data-start")
    end = page.get_attribute("#layer-range .lc-range", "data-end")
    assert int(end) - int(start) == 3  # the best block of a tenth of the layers, chosen at startup
    assert "wins" in page.inner_text("#stability")  # how stable that choice is, shown at once
    assert f"[{start}, {end})" in banner(page)
    page.hover("#heatmap .lc-plot")  # the mode bar: a PNG download, no logo, no link to Plotly's cloud
    assert page.locator("#heatmap .modebar-btn").count() == 1
    assert page.get_attribute("#heatmap .modebar-btn", "data-title") == "Download plot as a PNG"
    assert page.locator("a[href*='plotly'], a[href*='plot.ly']").count() == 0


def box_of(page, selector: str) -> dict:
    return page.locator(selector).bounding_box()


def test_the_first_screen_shows_heatmap_range_and_switch_and_a_slot_change_moves_nothing(page):
    assert page.evaluate("window.scrollY") == 0
    for selector in ("#heatmap .lc-plot", "#layer-range .lc-range", "#slot", "#cut-banner", "#analyze"):
        box = box_of(page, selector)
        assert box["y"] >= 0 and box["y"] + box["height"] <= VIEWPORT["height"], (selector, box)  # no scrolling
    page.screenshot(path=str(ASSETS / "screenshot-first-screen.png"))  # the viewport only: what a room sees
    banners, plots = [box_of(page, "#cut-banner")], [box_of(page, "#heatmap .lc-plot")]
    page.locator("#slot").get_by_text("Cut B").click()
    wait_banner(page, "B (editing): empty")
    banners.append(box_of(page, "#cut-banner"))
    click_cell(page, 20, 5)
    wait_banner(page, "B (editing): layers 20–24 (5 of 30) = block [20, 25)")
    banners.append(box_of(page, "#cut-banner"))
    plots.append(box_of(page, "#heatmap .lc-plot"))
    assert len({(b["y"], b["height"]) for b in banners}) == 1, banners  # the banner never changes height
    assert plots[0]["y"] == plots[1]["y"], plots  # so the heatmap stays under the pointer
    page.click("#clear-cut")
    wait_banner(page, "B (editing): empty")
    page.locator("#slot").get_by_text("Cut A").click()
    wait_banner(page, "A (editing)")


def click_cell(page, start: int, size: int) -> None:
    """Click the heatmap cell of the block [start, start + size)."""
    page.locator("#heatmap .lc-plot").scroll_into_view_if_needed()
    point = page.evaluate("""([start, size]) => {
        const gd = document.querySelector('#heatmap .lc-plot');
        const area = gd.querySelector('.nsewdrag').getBoundingClientRect();
        return {x: area.left + gd._fullLayout.xaxis.l2p(start), y: area.top + gd._fullLayout.yaxis.l2p(size)};
    }""", [start, size])
    page.mouse.click(point["x"], point["y"])


def test_dragging_a_handle_changes_the_cut(page):
    control = page.locator("#layer-range .lc-track")
    box = control.bounding_box()
    start, end = int(page.get_attribute("#layer-range .lc-range", "data-start")), \
        int(page.get_attribute("#layer-range .lc-range", "data-end"))
    layers, thumb = 30, 22

    def x_of(boundary):  # centre of a handle sitting on boundary ``boundary``
        return box["x"] + thumb / 2 + (box["width"] - thumb) * boundary / layers

    y = box["y"] + box["height"] / 2
    page.wait_for_function("document.querySelector('#cut-feedback').innerText.includes('agrees on')",
                           timeout=120_000)  # the startup cut's numbers (the original's states computed once)
    before = page.inner_text("#cut-feedback")
    page.mouse.move(x_of(end), y)
    page.mouse.down()
    page.mouse.move(x_of(end + 4), y, steps=8)
    during = page.inner_text("#layer-range .lc-summary")
    assert f"[{start}, {end + 4})" in during and f"{end + 4 - start} of 30 layers" in during  # live, in the browser
    assert f"[{start}, {end})" in banner(page)  # the server has not been asked yet
    page.mouse.up()
    wait_banner(page, f"[{start}, {end + 4})")
    assert f"({end + 4 - start} of 30)" in banner(page)
    assert "parameters" in banner(page) and "%" in banner(page)
    released = time.perf_counter()
    page.wait_for_function("b => { const t = document.querySelector('#cut-feedback').innerText; "
                           "return t.includes('agrees on') && t !== b; }", arg=before, timeout=60_000)
    TIMINGS["release → agreement, KL and perplexity shown"] = time.perf_counter() - released
    assert "A against the original" in page.inner_text("#cut-feedback")


def test_clicking_a_heatmap_cell_selects_that_block(page):
    start, size = 10, 4
    click_cell(page, start, size)
    wait_banner(page, f"[{start}, {start + size})")
    page.wait_for_function("document.querySelector('#layer-range .lc-range').dataset.start === '10'")
    assert page.get_attribute("#layer-range .lc-range", "data-end") == str(start + size)
    assert page.locator("#layer-range .lc-cell.cut").count() == size


def test_analyze_with_another_method_redraws_the_heatmap(page):
    page.locator("#method input").click()
    page.get_by_role("option", name="Block Influence (ShortGPT)").click()
    page.wait_for_timeout(300)
    started = time.perf_counter()
    page.click("#analyze")
    page.wait_for_function("document.querySelector('#heatmap .gtitle').textContent.includes('cos')", timeout=300_000)
    TIMINGS["Analyze → heatmap (block influence)"] = time.perf_counter() - started
    page.wait_for_timeout(500)
    assert "(3 of 30)" in banner(page) and "3 least important layers" in banner(page)  # ShortGPT's own rule
    page.locator("#selection").get_by_text("best contiguous block").click()
    page.click("#best-btn")
    wait_banner(page, "best block of 3 layers")
    assert "(3 of 30) = block [" in banner(page)
    page.wait_for_function("document.querySelector('#layer-range .lc-summary').innerText.includes('Cut layers')"
                           " && document.querySelector('#layer-range .lc-summary').innerText.includes('[')")
    page.screenshot(path=str(ASSETS / "screenshot-cut.png"), full_page=True)


def test_generation_streams_both_outputs_side_by_side(page):
    tab(page, "Generate")
    page.click("#generate-btn")
    seen: list[tuple[str, str]] = []
    deadline = time.perf_counter() + 180
    while time.perf_counter() < deadline:
        pair = (page.input_value("#out-original textarea"), page.input_value("#out-A textarea"))
        if not seen or pair != seen[-1]:
            seen.append(pair)
        stats = page.inner_text("#stats-original") + page.inner_text("#stats-A")
        if stats.count("tokens/s") == 2 and "generating" not in stats:
            break
        page.wait_for_timeout(50)
    final = seen[-1]
    assert final[0].strip() and final[1].strip()
    assert "Paris" in final[0]
    growing = [pair for pair in seen if pair[0] and pair[1] and pair != final]
    assert len(growing) >= 2, seen  # both columns showed partial text before the end
    assert page.inner_text("#stats-A").count("time to first token") == 1
    assert "no B cut" in page.input_value("#out-B textarea")
    caption = settled_text(page, "#divergence", "agrees on")
    assert caption.startswith("A agrees on") and "fed the original's" in caption
    if "leaves the original's answer at token" in caption:  # A's answer marked in place of the plain one
        page.wait_for_selector("#marked-A mark.lc-left", state="visible")
        assert page.locator("#out-A").is_hidden() and page.inner_text("#marked-A").startswith("A: ")
        assert page.evaluate("getComputedStyle(document.querySelector('#marked-A .lc-answer mark')).backgroundColor")\
            == "rgb(252, 228, 168)"  # palette.HIGHLIGHT
    page.wait_for_selector("#divergence-strip .lc-plot .scatterlayer", timeout=30_000)
    page.wait_for_timeout(500)
    page.screenshot(path=str(ASSETS / "screenshot-generate.png"), full_page=True)


def test_the_logit_lens_opens_for_the_original_and_the_cut(page):
    tab(page, "Generate")
    page.get_by_text("Logit lens: the top next token each layer already predicts").click()
    page.click("#lens-btn")
    page.wait_for_selector("#lens-original .lc-plot .hm", timeout=120_000)
    page.wait_for_selector("#lens-cut .lc-plot .hm", timeout=30_000)
    assert "✂ layer 13" in page.inner_text("#lens-original") and "layer 29" in page.inner_text("#lens-cut")
    page.locator("#lens-box").scroll_into_view_if_needed()
    page.wait_for_timeout(500)
    page.locator("#lens-box").screenshot(path=str(ASSETS / "screenshot-logit-lens.png"))


def test_benchmark_with_a_small_limit_fills_the_table(page):
    tab(page, "Benchmarks")
    page.fill("#limit input", "5")
    page.click("#bench-btn")
    page.wait_for_function("document.querySelector('#bench-table').innerText.includes('arc_easy acc')",
                           timeout=300_000)
    table = page.inner_text("#bench-table")
    assert "Original" in table and "Score kept %" in table
    page.wait_for_selector("#bench-plot .lc-plot .barlayer", timeout=30_000)
    page.wait_for_timeout(500)
    page.screenshot(path=str(ASSETS / "screenshot-benchmarks.png"), full_page=True)


def cloze_row(page) -> str:
    """The Benchmarks tab asked CBT-style CN alone on 2 questions: the table once its row is in."""
    page.get_by_label("arc_easy", exact=True).uncheck()
    page.get_by_label("cbt_style_cn (CBT-style, not CBT)").check()
    page.fill("#limit input", "2")
    page.click("#bench-btn")
    return settled_text(page, "#bench-table", "cbt_style_cn acc", timeout=300_000)


def test_a_cloze_task_says_it_is_not_cbt_and_fills_its_row(page):
    tab(page, "Benchmarks")
    tasks = page.inner_text("#tasks")
    assert "cbt_style_cn (CBT-style, not CBT)" in tasks and "cbt_cn (CBT, from the hub)" in tasks
    assert "Original" in cloze_row(page)
    page.get_by_label("cbt_style_cn (CBT-style, not CBT)").uncheck()
    page.get_by_label("arc_easy", exact=True).check()


def test_cut_sweep_plots_every_cut_beside_the_methods(page):
    tab(page, "Benchmarks")
    page.get_by_text("Cut sweep: measure every block of K layers").click()
    page.fill("#sweep-k input", "6")
    page.fill("#sweep-limit input", "3")
    page.wait_for_function("document.querySelector('#sweep-estimate').innerText.includes('on this machine')",
                           timeout=30_000)  # said before it starts, for the settings as they now stand
    page.click("#sweep-btn")
    page.wait_for_function("document.querySelector('#sweep-summary').innerText.includes('Best cut measured')",
                           timeout=600_000)
    page.wait_for_selector("#sweep-plot .lc-plot .scatterlayer", timeout=30_000)
    assert "the uncut model" in page.inner_text("#sweep-summary")  # the best cut against no cut, and its noise
    assert "Spearman" in page.inner_text("#sweep-table")
    page.wait_for_timeout(500)
    page.screenshot(path=str(ASSETS / "screenshot-sweep.png"), full_page=True)


def test_speed_and_memory_tab(page, capsys):
    tab(page, "Speed & memory")
    assert "on this machine" in page.inner_text("#speed-estimate")  # shown since the model loaded
    assert "on this machine" in page.inner_text("#memory-estimate")
    page.fill("#new-tokens input", "8")
    page.fill("#repeats input", "2")
    page.click("#speed-btn")
    speed_table = settled_text(page, "#speed-table", "throughput", timeout=300_000)
    assert "floor per decoded token at" in speed_table and "share of the bandwidth limit reached" in speed_table
    page.click("#memory-btn")
    settled_text(page, "#memory-table", "weight memory", timeout=300_000)
    page.wait_for_selector("#memory-plot .lc-plot .barlayer", timeout=30_000)
    page.wait_for_timeout(500)
    measured = settled_text(page, "#speed-measured", "Measured on")
    assert measured.startswith("Measured on SmolLM2-135M-Instruct · Original · A: cut "), measured
    page.screenshot(path=str(ASSETS / "screenshot-speed.png"), full_page=True)
    # A change of A's cut: the tables stay, marked out of date, and name the cut they measured.
    tab(page, "Analyze & cut")
    click_cell(page, 2, 2)
    wait_banner(page, "[2, 4)")
    tab(page, "Speed & memory")
    for note in ("#speed-measured", "#memory-measured"):
        page.wait_for_function("n => document.querySelector(n).innerText.includes('Out of date: A has changed')",
                               arg=note, timeout=30_000)
        assert measured.split(" · A: ")[1] in page.inner_text(note)  # still says which A it measured
    with capsys.disabled():
        print("\nLayerCut browser timings on the default model:")
        for name, seconds in TIMINGS.items():
            print(f"  {name}: {seconds:.1f} s")


def test_two_visitors_keep_their_own_cuts_and_stop_only_their_own_job(browser, page):
    """A second page on the same server: its own cut; its Stop cancels its job, not the first page's."""
    mine = banner(page)
    other = browser.new_page(viewport=VIEWPORT)
    try:
        other.goto(page.url)
        other.wait_for_selector("#heatmap .lc-plot .hm", timeout=300_000)
        other.get_by_role("radio", name="Cut B").click()
        other.wait_for_function("document.querySelector('#cut-banner').innerText.includes('B (editing)')",
                                timeout=30_000)
        other.wait_for_timeout(1000)  # the heatmap redraws for B
        click_cell(other, 2, 3)
        other.wait_for_function("document.querySelector('#cut-banner').innerText.includes('[2, 5)')", timeout=30_000)
        assert banner(page) == mine  # the first visitor's comparison is untouched
        tab(page, "Generate")
        page.fill("#prompt textarea", "Tell me a long story about a lighthouse keeper.")
        before = page.inner_text("#stats-original")  # the earlier generation's line: the new one must replace it
        page.locator("#generate-btn").click()  # the first visitor's job, running
        tab(other, "Benchmarks")
        other.fill("#limit input", "400")
        other.click("#bench-btn")  # the second visitor's job, waiting for the device
        other.wait_for_function("document.querySelector('#bench-table').closest('.block')"
                                ".parentElement.innerText.includes('queue')", timeout=20_000)
        other.screenshot(path=str(ASSETS / "screenshot-queue.png"), full_page=False)  # its place in the queue
        other.get_by_role("button", name="Stop").last.click()
        page.wait_for_function("b => { const t = document.querySelector('#stats-original').innerText; "
                               "return t.includes('tokens/s') && !t.includes('generating') && t !== b; }",
                               arg=before, timeout=300_000)
        # it ran to the end: the answer's last chunk reaches the text box (read when it has, not at the instant
        # the stats line says done: under load the two can land a frame apart); a cancelled stream never gets there
        page.wait_for_function("document.querySelector('#out-original textarea').value.length > 40", timeout=30_000)
        assert "arc_easy" not in other.inner_text("#bench-table") or "400" not in other.inner_text("#bench-table")
    finally:
        other.close()


def test_sparsity_sweep_plots_each_method_against_the_level(page):
    tab(page, "Benchmarks")
    page.get_by_text("Sparsity sweep: every sparsity method at each level").click()
    page.fill("#sparse-levels textarea", "0, 50, 90")
    page.locator("#sparse-methods").get_by_label("wanda").uncheck()
    page.fill("#sparse-limit input", "5")
    page.fill("#sparse-windows input", "2")
    page.click("#sparse-btn")
    page.wait_for_function("document.querySelector('#sparse-table table') !== null", timeout=600_000)
    table = page.inner_text("#sparse-table")
    assert "magnitude" in table and "90 %" in table and "dense" in table and "wanda" not in table
    page.wait_for_selector("#sparse-plot .lc-plot .scatterlayer", timeout=30_000)
    page.wait_for_timeout(500)
    page.locator("#sparse-plot").screenshot(path=str(ASSETS / "screenshot-sparsity-sweep.png"))
