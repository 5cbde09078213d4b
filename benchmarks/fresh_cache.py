"""Run a benchmark in a fresh, temporary LayerCut cache (no cached result can stand in for a measurement), reusing
the dequantized default model, offline; imported by the scripts beside it."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable


def in_fresh_cache(run: Callable[[], object]) -> None:
    cache = tempfile.mkdtemp(prefix="layercut-bench-")
    models = os.path.join(os.environ.get("LAYERCUT_CACHE") or os.path.expanduser("~/.cache/layercut"), "models")
    if os.path.isdir(models):  # reuse the dequantized default model
        os.symlink(models, os.path.join(cache, "models"))
    os.environ["LAYERCUT_CACHE"] = cache
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    try:
        run()
    finally:
        shutil.rmtree(cache, ignore_errors=True)
