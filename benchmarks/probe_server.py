"""The shared server a probe attacks: ``app.py --shared`` in a subprocess, with a private cache, model root and
Hugging Face modules folder, offline but believing the Hub reachable; imported by ``shared_probe.py``, and run by
it as ``python -m benchmarks.probe_server PORT MODEL_ROOT``.

The private cache reuses the dequantized default model of the persistent cache
(:func:`benchmarks.harness.cache_reusing_models`), so only the first run ever dequantizes.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from benchmarks import REPO, harness

TRACEBACK = re.compile(r"Traceback \(most recent call last\)|File \"[^\"]+\", line \d+")


def serve(port: int, model_root: str) -> None:
    """The subprocess: build the shared page and serve it until killed.

    The server believes the Hub reachable, as a Space does, so hub names reach the code that reads them; nothing
    leaves the machine: huggingface_hub read HF_HUB_OFFLINE=1 at import and stays offline, datasets too, and the
    Hub's address is a closed port on 127.0.0.1.
    """
    import app  # the repository's root is the working directory
    import prune.core.loading
    from ui.inputs import Policy

    prune.core.loading.hub_reachable = lambda timeout_s=3.0: True
    os.environ["HF_HUB_OFFLINE"] = "0"  # read at call time by the hub calibration's own check

    demo = app.build_demo(policy=Policy(shared=True, model_root=Path(model_root).resolve()))
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True,
                **app.launch_options())
    demo.block_thread()


class Server:
    """One shared server in a subprocess; ``restart`` after a crash gives a fresh one on the same folders."""

    def __init__(self) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="layercut-probe-"))
        self.cache = self.tmp / "cache"
        self.model_root = self.tmp / "models"
        self.outside = self.tmp / "outside"  # a folder beside the model root, never loadable
        self.marker = self.tmp / "MARKER-remote-code-ran"
        harness.cache_reusing_models(self.cache)
        for folder in (self.model_root, self.outside):
            folder.mkdir()
        self.log_path = self.tmp / "server.log"
        self.proc: subprocess.Popen | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def paths(self) -> list[str]:
        """The server-side folders no reply should name (beyond what the visitor typed)."""
        found = {str(REPO), str(REPO.resolve()), str(self.tmp), str(self.cache), str(self.model_root),
                 str(Path.home()), "/tmp/", os.path.realpath(sys.prefix), sys.prefix}
        return sorted(found, key=len, reverse=True)

    def start(self, timeout_s: float = 240) -> float:
        """Start the server (on its port again after a restart, so visitors' clients still reach it); the seconds it
        took to answer."""
        self.port = self.port or harness.free_port()
        env = {**os.environ, "LAYERCUT_SHARED": "1", "LAYERCUT_CACHE": str(self.cache),
               "LAYERCUT_MODEL_ROOT": str(self.model_root), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
               "HF_ENDPOINT": f"http://127.0.0.1:{harness.free_port()}",  # nothing listens there: refused at once
               "HF_MODULES_CACHE": str(self.tmp / "hf_modules"), "GRADIO_ANALYTICS_ENABLED": "False",
               "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
        started = time.monotonic()
        with open(self.log_path, "a") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", __spec__.name, str(self.port), str(self.model_root)], cwd=REPO, env=env,
                stdout=log, stderr=subprocess.STDOUT)
        while time.monotonic() - started < timeout_s:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited at start (code {self.proc.returncode}):\n{self.log()[-3000:]}")
            if self.answers(timeout_s=2):
                return time.monotonic() - started
            time.sleep(0.5)
        raise RuntimeError(f"the server did not answer within {timeout_s} s:\n{self.log()[-3000:]}")

    def answers(self, timeout_s: float = 10) -> bool:
        try:
            return httpx.get(self.url + "config", timeout=timeout_s).status_code == 200
        except httpx.HTTPError:
            return False

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None and self.answers()

    def restart(self) -> None:
        self.stop()
        self.start()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_tracebacks(self) -> list[str]:
        """Each traceback in the server's output, as its last line (the exception)."""
        found, lines = [], self.log().splitlines()
        for index, line in enumerate(lines):
            if line.startswith("Traceback (most recent call last)"):
                tail = next((later for later in lines[index + 1:] if later and not later.startswith((" ", "\t"))),
                            "?")
                found.append(tail.strip())
        return found

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)


if __name__ == "__main__":
    parser = harness.parser(__doc__)
    parser.add_argument("port", type=int)
    parser.add_argument("model_root")
    args = parser.parse_args()
    serve(args.port, args.model_root)
