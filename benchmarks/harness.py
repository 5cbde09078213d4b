"""What the benchmark scripts share, so that each says only what it measures: its parser and the options several
take, the timer, a fresh cache, the default model in the app's Backend, and the pairs that Backend compares at once.
Results are written by :func:`benchmarks.record.write_result`.

    from benchmarks import harness

    args = harness.parser(__doc__, "data_dir", "ppl_windows").parse_args()
    harness.in_fresh_cache(lambda: run(args))  # run: backend, spec, info = harness.default_model(args.data_dir)
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from benchmarks.record import program

OPTIONS = {  # options several scripts take: one name, type, default and help for all of them
    "data_dir": dict(default=None, help="benchmark data folder (default: as the app finds it)"),
    "ppl_windows": dict(type=int, default=64, help="WikiText-2 test windows (the first N)"),
    "hellaswag": dict(type=int, default=200, help="hellaswag questions (0: skip)"),
}


def parser(doc: str, *shared: str) -> argparse.ArgumentParser:
    """A script's parser: its usage says how it was started (``python -m benchmarks.<name>``), the first line of its
    docstring is the description, and it takes the ``shared`` options it names (``OPTIONS``)."""
    found = argparse.ArgumentParser(prog=" ".join(program()), description=doc.splitlines()[0])
    for name in shared:
        found.add_argument(f"--{name}", **OPTIONS[name])
    return found


class Clock:
    """Wall and process-CPU seconds of a ``with`` block (``wall``, ``cpu``), and the wall seconds so far while it
    runs (``elapsed``); the CPU clock is read outside the wall clock's span, so ``wall`` times the block alone."""

    def __enter__(self) -> Clock:
        self._cpu = time.process_time()
        self._wall = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self.wall = self.elapsed
        self.cpu = time.process_time() - self._cpu

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self._wall


# ---------------------------------------------------------------- a fresh cache


def cache_reusing_models(folder: Path) -> Path:
    """``folder`` made a LayerCut cache whose ``models`` is the persistent cache's (a symlink): nothing cached can
    stand in for a measurement, and the default model is dequantized once, ever."""
    persistent = Path(os.environ.get("LAYERCUT_CACHE") or Path.home() / ".cache" / "layercut") / "models"
    persistent.mkdir(parents=True, exist_ok=True)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "models").symlink_to(persistent, target_is_directory=True)
    return folder


def in_fresh_cache(run: Callable[[], object]) -> None:
    """``run()`` with ``LAYERCUT_CACHE`` a new temporary cache (:func:`cache_reusing_models`), removed after."""
    cache = cache_reusing_models(Path(tempfile.mkdtemp(prefix="layercut-bench-")))
    os.environ["LAYERCUT_CACHE"] = str(cache)
    try:
        run()
    finally:
        shutil.rmtree(cache, ignore_errors=True)


# ---------------------------------------------------------------- the app's Backend


class Loaded(NamedTuple):
    backend: Any  # evaluation.serving.backend.Backend
    spec: Any  # evaluation.core.pool.ModelSpec
    info: Any  # what backend.models.load said of it


def default_model(data_dir: str | None = None, **options) -> Loaded:
    """The Backend the app uses (``data_dir``, ``options`` as it takes them) with the embedded default model loaded:
    where every benchmark of the app's own paths starts."""
    from evaluation.core.pool import ModelSpec
    from evaluation.serving.backend import Backend

    backend, spec = Backend(data_dir=data_dir, **options), ModelSpec()
    return Loaded(backend, spec, backend.models.load(spec))


def pairs(variants: dict) -> list[dict]:
    """``variants`` two at a time, in order: the Backend compares at most two models with the original at once."""
    items = list(variants.items())
    return [dict(items[i: i + 2]) for i in range(0, len(items), 2)]


def wikitext2(backend, **settings):
    """WikiText-2 validation from the backend's data folder (none: found as the app finds it), as a calibration: the
    text the repairs train and fit on, never the test split they are measured on."""
    from prune.core.calibration import Calibration

    data = backend.models.data_dir
    return Calibration(source="wikitext2", path=str(data) if data else None, **settings)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now, for a server a benchmark starts."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def perplexity_and_hellaswag(backend, spec, variants: dict, original: str, windows: int,
                             questions: int) -> tuple[dict, dict]:
    """Each of ``variants`` (and the original, under the name ``original``) measured two at a time beside the original:
    WikiText-2 test perplexity over the first ``windows`` windows of 128 tokens (no BOS), and the hellaswag
    acc_norm Measurement on the first ``questions`` (none when 0)."""
    from evaluation.measure.measurement import ORIGINAL
    from evaluation.quality import lm_eval_adapter

    ppl, acc = {}, {}
    for pair in pairs(variants):
        ppl.update({m.model: m.value for m in backend.measure.perplexity(spec, pair, seq_lens=(128,), bos=(False,),
                                                                         max_windows=windows)})
    if questions:
        request = lm_eval_adapter.check_request(["hellaswag"], limit=questions, data_dir=backend.models.data_dir)
        for pair in pairs(variants):
            acc.update({m.model: m for m in backend.measure.benchmarks(spec, pair, request, batch_size=16)
                        if m.name == "hellaswag acc_norm"})
        acc[original] = acc.pop(ORIGINAL)
    ppl[original] = ppl.pop(ORIGINAL)
    return ppl, acc
