"""How soon the first screen shows: ``python app.py`` started as a user starts it, its page opened in headless
Chromium as soon as the server answers, until the heatmap is drawn.

Two launches, turns taken in one run: **cold** (an empty LayerCut cache, as on a fresh machine or a restarted
Space: the embedded GGUF dequantized, the model loaded and timed, the analysis, stability and the opening cut's
numbers computed at start-up) and **warm** (the same cache again: what a restart on a kept disk costs). On the warm
server, the page is then opened again several times: page open → heatmap is what every new visitor waits.
Writes benchmarks/results/first_screen.json.

    .venv/bin/python -m benchmarks.first_screen [--reopens 5]
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


def open_to_heatmap(browser, url: str) -> float:
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    try:
        with harness.Clock() as clock:
            page.goto(url)
            page.wait_for_selector(HEATMAP, timeout=600_000)
        return clock.wall
    finally:
        page.close()


def launch(browser, cache: str, reopens: int) -> dict:
    """One ``python app.py`` from start to heatmap, then ``reopens`` more pages on it."""
    port = harness.free_port()
    env = {**os.environ, "LAYERCUT_CACHE": cache, "GRADIO_SERVER_PORT": str(port), "HF_HUB_OFFLINE": "1",
           "HF_DATASETS_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False"}
    url = f"http://127.0.0.1:{port}/"
    with harness.Clock() as clock:
        server = subprocess.Popen([sys.executable, "app.py"], cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        try:
            wait_up(url, server)
            up = clock.elapsed
            first = open_to_heatmap(browser, url)
            again = [open_to_heatmap(browser, url) for _ in range(reopens)]
        finally:
            server.terminate()
            server.wait(30)
    return {"launch_to_server_up_s": round(up, 1), "launch_to_heatmap_s": round(up + first, 1),
            "first_page_open_to_heatmap_s": round(first, 2),
            "page_open_to_heatmap_s": {"median": round(statistics.median(again), 2), "max": round(max(again), 2),
                                       "all": [round(s, 2) for s in again]} if again else None}


def main() -> None:
    parser = harness.parser(__doc__)
    parser.add_argument("--reopens", type=int, default=5)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    cache = tempfile.mkdtemp(prefix="layercut-first-screen-")
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
            cold = launch(browser, cache, args.reopens)
            warm = launch(browser, cache, args.reopens)
            browser.close()
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    found = {"what": "python app.py → server answers → page opened → heatmap drawn (headless Chromium)",
             "cold": cold, "warm_restart": warm}
    path = write_result("first_screen", found, how=f"two launches in one run, cold cache then warm; {args.reopens} "
                        "more pages opened on each")
    print(path.read_text())


if __name__ == "__main__":
    main()
