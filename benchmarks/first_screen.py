"""How soon the first screen shows: ``python app.py`` started as a user starts it, its page opened in headless
Chromium as soon as the server answers, until the heatmap is drawn.

Two launches, turns taken in one run: **cold** (an empty LayerCut cache, as on a woken Space or a cleared cache: the
embedded GGUF dequantized, the model loaded, analyzed, then the opening cut's numbers, the timing probe and the
stability computed, each step's seconds as the server prints them) and **warm** (the same cache again: what a
restart on a kept disk costs). On the cold launch's page, the talk's path follows the heatmap (drag, generate, a
benchmark). On each server, the page is then opened again several times: page open → heatmap is what every new
visitor waits.
Writes benchmarks/results/first_screen.json.

With ``--against REV`` (e.g. the commit before a change), pages are then opened in turn on REV's server and on this
checkout's, both warm: the ratio of their medians is the change's effect, side by side on one noisy machine.

    .venv/bin/python -m benchmarks.first_screen [--reopens 5] [--against REV]
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile

from benchmarks import REPO, harness
from benchmarks.record import write_result
from benchmarks.space_build import wait_up

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]
HEATMAP = "#heatmap .lc-plot .hm"
STEPS_LINE = "LayerCut: the first screen took "  # ui.page.first_screen prints it


def open_to_heatmap(browser, url: str, keep: bool = False):
    """Seconds from opening a page to its heatmap drawn; with ``keep``, the page too (left open)."""
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    try:
        with harness.Clock() as clock:
            page.goto(url)
            page.wait_for_selector(HEATMAP, timeout=600_000)
        return (clock.wall, page) if keep else clock.wall
    finally:
        if not keep:
            page.close()


def talk(page) -> dict:
    """The talk's path after the heatmap, on the opened page: drag the cut's end 4 layers on and wait for its
    numbers, generate in both columns, run a 5-question benchmark; each step's seconds."""
    steps = {}
    page.wait_for_function("document.querySelector('#cut-feedback').innerText.includes('agrees on')",
                           timeout=300_000)
    box = page.locator("#layer-range .lc-track").bounding_box()
    end, layers, thumb = int(page.get_attribute("#layer-range .lc-range", "data-end")), 30, 22
    x = [box["x"] + thumb / 2 + (box["width"] - thumb) * boundary / layers for boundary in (end, end + 4)]
    y, before = box["y"] + box["height"] / 2, page.inner_text("#cut-feedback")
    with harness.Clock() as clock:
        page.mouse.move(x[0], y)
        page.mouse.down()
        page.mouse.move(x[1], y, steps=8)
        page.mouse.up()
        page.wait_for_function("b => { const t = document.querySelector('#cut-feedback').innerText; "
                               "return t.includes('agrees on') && t !== b; }", arg=before, timeout=300_000)
    steps["drag → the cut's numbers"] = clock.wall
    with harness.Clock() as clock:
        page.get_by_role("tab", name="Generate").click()
        page.click("#generate-btn")
        page.wait_for_function("(document.querySelector('#stats-original').innerText + document.querySelector("
                               "'#stats-A').innerText).split('tokens/s').length === 3", timeout=600_000)
    steps["generate, both columns"] = clock.wall
    with harness.Clock() as clock:
        page.get_by_role("tab", name="Benchmarks").click()
        page.fill("#limit input", "5")
        page.click("#bench-btn")
        page.wait_for_function("document.querySelector('#bench-table').innerText.includes('arc_easy acc')",
                               timeout=600_000)
    steps["benchmark, 5 questions"] = clock.wall
    return {name: round(seconds, 1) for name, seconds in steps.items()}


def launch(browser, cache: str, reopens: int, talks: bool = False) -> dict:
    """One ``python app.py`` from start to heatmap (with ``talks``, on along the talk's path), then ``reopens``
    more pages on it; the server's own line of its start-up steps read from its output."""
    port = harness.free_port()
    url = f"http://127.0.0.1:{port}/"
    with tempfile.TemporaryFile("w+") as output, harness.Clock() as clock:
        server = subprocess.Popen([sys.executable, "app.py"], cwd=REPO, env=server_env(cache, port), stdout=output,
                                  stderr=subprocess.DEVNULL, text=True)
        try:
            wait_up(url, server)
            up = clock.elapsed
            first, page = open_to_heatmap(browser, url, keep=True)
            path = talk(page) if talks else None
            page.close()
            again = [open_to_heatmap(browser, url) for _ in range(reopens)]
        finally:
            server.terminate()
            server.wait(30)
        output.seek(0)
        steps = start_up_steps(output.read())
    found = {"launch_to_server_up_s": round(up, 1), "launch_to_heatmap_s": round(up + first, 1),
             "first_page_open_to_heatmap_s": round(first, 2), "start_up_steps_s": steps,
             "page_open_to_heatmap_s": {"median": round(statistics.median(again), 2), "max": round(max(again), 2),
                                        "all": [round(s, 2) for s in again]} if again else None}
    if path is not None:
        found["talk_s"] = {**path, "total from launch": round(up + first + sum(path.values()), 1)}
    return found


def server_env(cache: str, port: int) -> dict:
    return {**os.environ, "LAYERCUT_CACHE": cache, "GRADIO_SERVER_PORT": str(port), "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False", "PYTHONUNBUFFERED": "1"}


def side_by_side(browser, cache: str, rev: str, opens: int) -> dict:
    """Page open → heatmap on this checkout's server and on ``rev``'s (a worktree of it), both warm on the same
    cache and opened in turn ``opens`` times each: the change's effect, measured in one run on a noisy machine."""
    tree = tempfile.mkdtemp(prefix="layercut-against-")
    subprocess.run(["git", "worktree", "add", "--detach", tree, rev], cwd=REPO, check=True, capture_output=True)
    servers = {}
    try:
        for label, where in (("this checkout", REPO), (rev, tree)):
            port = harness.free_port()
            servers[label] = (subprocess.Popen([sys.executable, "app.py"], cwd=where, env=server_env(cache, port),
                                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
                              f"http://127.0.0.1:{port}/")
        for server, url in servers.values():
            wait_up(url, server)
            open_to_heatmap(browser, url)  # a page that waits for the first screen is not what this measures
        times = {label: [] for label in servers}
        for _ in range(opens):
            for label, (_, url) in servers.items():
                times[label].append(open_to_heatmap(browser, url))
    finally:
        for server, _ in servers.values():
            server.terminate()
            server.wait(30)
        subprocess.run(["git", "worktree", "remove", "--force", tree], cwd=REPO, capture_output=True)
    medians = {label: statistics.median(seconds) for label, seconds in times.items()}
    return {"against": rev, "page_open_to_heatmap_s": {label: {"median": round(medians[label], 2),
                                                               "all": [round(s, 2) for s in seconds]}
                                                       for label, seconds in times.items()},
            "this_checkout_over_against": round(medians["this checkout"] / medians[rev], 2)}


def start_up_steps(output: str) -> dict[str, float]:
    """The server's 'LayerCut: the first screen took dequantize 8.0 s · load 0.7 s · …' as {step: seconds}."""
    line = next((text for text in output.splitlines() if text.startswith(STEPS_LINE)), STEPS_LINE)
    steps = line[len(STEPS_LINE):].split(";")[0].split(" · ")
    return {name: float(seconds) for name, seconds, _ in (step.rsplit(" ", 2) for step in steps if step)}


def main() -> None:
    parser = harness.parser(__doc__)
    parser.add_argument("--reopens", type=int, default=5)
    parser.add_argument("--against", metavar="REV", help="also open pages in turn on REV's server and this one's")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    cache = tempfile.mkdtemp(prefix="layercut-first-screen-")
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
            cold = launch(browser, cache, args.reopens, talks=True)
            warm = launch(browser, cache, args.reopens)
            against = side_by_side(browser, cache, args.against, args.reopens) if args.against else None
            browser.close()
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    found = {"what": "python app.py → server answers → page opened → heatmap drawn (headless Chromium)",
             "cold": cold, "warm_restart": warm, **({"side_by_side": against} if against else {})}
    path = write_result("first_screen", found, how=f"two launches in one run, cold cache then warm; {args.reopens} "
                        "more pages opened on each")
    print(path.read_text())


if __name__ == "__main__":
    main()
