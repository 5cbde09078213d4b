"""What a benchmark measured, written as data: its figures as JSON under ``benchmarks/results/``, with the machine,
device, versions, commit, date and command line that produced them (issue 42). ``python -m benchmarks.tables``
renders the docs' tables from these files.

    from benchmarks.record import write_result

    write_result("deployed_default", {"columns": found}, how="batch 1, median of 5", model="default")

``LAYERCUT_RESULTS_DIR`` sends the files to another folder: a trial run with toy arguments must not overwrite a
measured result.
"""

from __future__ import annotations

import importlib.metadata
import json
import math
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path

from benchmarks import REPO
from evaluation.core.timing import machine

RESULTS = REPO / "benchmarks" / "results"
ALWAYS = ("torch", "transformers")  # their versions are written whether the script imported them or not
IF_IMPORTED = {"lm_eval": "lm_eval", "gradio": "gradio", "torchao": "torchao", "peft": "peft", "gguf": "gguf",
               "llama_cpp": "llama_cpp_python", "playwright": "playwright"}  # module → distribution


def write_result(name: str, figures: dict, *, how: str, model: str | None = None, device=None,
                 folder: Path | str | None = None) -> Path:
    """Write ``<folder>/<name>.json`` (``name`` may hold a subfolder: ``gpu/<run>``): ``figures``, then ``model``,
    ``how`` and the provenance (:func:`provenance`). ``device``: as :func:`device_name` reads it. NaN is written as
    null, and anything JSON cannot hold as its ``str``."""
    stamp = provenance(device)
    clash = sorted(set(figures) & {"model", "how", *stamp})
    if clash:
        raise ValueError(f"{name}: the figures repeat keys the record writes itself: {clash}")
    found = {**figures, **({"model": model} if model is not None else {}), "how": how, **stamp}
    path = Path(folder or results_dir()) / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_finite(found), indent=2, ensure_ascii=False, default=str) + "\n", encoding="utf-8")
    return path


def results_dir() -> Path:
    """Where results go: ``benchmarks/results/``, or ``LAYERCUT_RESULTS_DIR``."""
    return Path(os.environ.get("LAYERCUT_RESULTS_DIR") or RESULTS)


def provenance(device=None) -> dict:
    """Where, when and from what a run came: machine, device, versions, commit (and whether the work tree differed
    from it, results aside) as the script started, date and command line."""
    commit, dirty = CODE
    return {"machine": machine(), "device": device_name(device), "versions": versions(), "commit": commit,
            "dirty": dirty, "date": time.strftime("%Y-%m-%d"), "command": command()}


def code() -> tuple[str | None, bool]:
    """The checkout's commit, and whether tracked files (results aside) differ from it."""
    changed = _git("status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)benchmarks/results")
    return _git("rev-parse", "--short", "HEAD") or None, bool(changed)


def device_name(device=None) -> str:
    """'CPU' for None or a CPU device, the card's name for a CUDA device (``"cuda"``, ``torch.device``), any other
    string as given (already a name)."""
    if device is None:
        return "CPU"
    if isinstance(device, str) and device.split(":")[0] not in ("cpu", "cuda", "mps", "xpu"):
        return device
    import torch

    device = torch.device(device)
    return torch.cuda.get_device_name(device) if device.type == "cuda" else device.type.upper()


def versions() -> dict:
    """Python, torch and transformers, and the other libraries that matter here which the script imported."""
    found = {"python": platform.python_version()}
    wanted = [*ALWAYS, *(dist for module, dist in IF_IMPORTED.items() if module in sys.modules)]
    for dist in wanted:
        try:
            found[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            pass
    return found


def command() -> str:
    """The command line as typed (:func:`program`, then the arguments)."""
    return shlex.join([*program(), *sys.argv[1:]])


def program() -> list[str]:
    """What started this process: ``python -m <module>`` for a module run so (``argv[0]`` is then its file), else
    ``python <script>``, the script's path relative to the repository when it lies inside it."""
    module = getattr(sys.modules.get("__main__"), "__spec__", None)
    if module is not None:
        return ["python", "-m", module.name.removesuffix(".__main__")]
    script = sys.argv[0] if sys.argv else ""
    if Path(script).is_file() and Path(script).resolve().is_relative_to(REPO):
        script = str(Path(script).resolve().relative_to(REPO))
    return ["python", script]


def _finite(value):
    """``value`` with NaN and infinities as null (JSON has none), tuples as lists, keys JSON cannot hold as text."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key if isinstance(key, (str, int, float, bool)) or key is None else str(key): _finite(item)
                for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=60).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


CODE = code()  # read when a benchmark imports this module, before it runs: the code that ran, not a later commit
