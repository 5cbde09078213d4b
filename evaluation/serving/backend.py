"""The one backend the page, the public API and the command line call; it holds no selection of its own.

It is made of parts, each owning its state and reached through its public methods:

* ``models`` (:class:`~evaluation.serving.models.Models`): base models loaded once and shared, variants built from
  recipes and cached, the device's jobs and turns; every other part is given it.
* ``analysis``: layer importance and its stability; ``measure``: generation, speed, memory, benchmarks and
  perplexity side by side; ``sweeps``: every cut of K layers, the sparsity levels; ``frontier``: every family at
  each size and the best under a target; ``explain``: a cut's feedback, divergence, the logit lens; ``training``:
  the rank search, healing and the linear patch; ``mt_bench``: judged answers; ``exports``: a variant saved, zipped
  and offered; ``experts``: a mixture of experts' expert saliency (the expert heatmap).

Every call names the base model (a :class:`~evaluation.core.pool.ModelSpec`) and the compared models as
``{label: Recipe}``; heavy work runs as a job of the calling visitor (one at a time per device, with progress and
per-visitor cancellation), and every measurement comes back as a
:class:`~evaluation.measure.measurement.Measurement`. Nothing one caller does changes what another sees.
"""

from __future__ import annotations

from pathlib import Path

from prune.core.devices import default_device

from evaluation.core import allocator
from evaluation.serving.analysis import Analysis
from evaluation.serving.experts import Experts
from evaluation.serving.explain import Explain
from evaluation.serving.exports import Exports
from evaluation.serving.frontier import Frontier
from evaluation.serving.measure import Measure
from evaluation.serving.models import Models
from evaluation.serving.mt_bench import MtBench
from evaluation.serving.sweeps import Sweeps
from evaluation.serving.training import Training


class Backend:
    """The parts of the backend, built once per process; see the module docstring.

    ``data_dir``: the benchmark data folder; None → ``LAYERCUT_DATA_DIR`` or ../shared/benchdata,
    "" → none (benchmarks read the Hugging Face Hub).
    """

    def __init__(self, data_dir: str | Path | None = None, device: str | None = None, *,
                 model_budget_bytes: int | str | None = None):
        allocator.configure()  # before Gradio's worker threads allocate: see evaluation/core/allocator.py
        self.models = Models(data_dir, device or default_device(), model_budget_bytes)
        self.analysis = Analysis(self.models)
        self.measure = Measure(self.models)
        self.sweeps = Sweeps(self.models, self.analysis)
        self.frontier = Frontier(self.models, self.analysis)
        self.explain = Explain(self.models)
        self.experts = Experts(self.models)
        self.training = Training(self.models)
        self.mt_bench = MtBench(self.models)
        self.exports = Exports(self.models)

    def cancel(self, owner: str | None = None) -> None:
        """Stop ``owner``'s running and waiting jobs at their next safe point (None: everyone's)."""
        self.models.jobs.cancel(owner)
