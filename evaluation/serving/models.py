"""The models a server holds, as every other part of the backend asks for them: base models loaded once and shared,
variants built from recipes and cached, and each brought whole onto the device for the job that computes with it.

Every call names the base model by a :class:`~evaluation.core.pool.ModelSpec` and a variant by its
:class:`~prune.core.recipe.Recipe`; the original is never altered. A part of the
:class:`~evaluation.serving.backend.Backend` that the other parts are given.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import asdict, replace
from pathlib import Path

import torch

from prune.core.budget import configured_budget
from prune.core.calibration import default_calibration
from prune.core.errors import InvalidInput
from prune.core.layer_files import own_files, streams
from prune.core.paths import default_data_dir
from prune.core.recipe import Recipe

from evaluation.core.jobs import Job, JobRunner, Progress, building
from evaluation.core.pool import Loaded, ModelInfo, ModelPool, ModelSpec
from evaluation.core.store import ResultStore
from evaluation.core.timing import Rates, machine
from evaluation.measure import speed
from evaluation.measure.measurement import ORIGINAL
from evaluation.serving.residency import Residency
from evaluation.serving.variants import Side, VariantCache, estimated_bytes, own_bytes

Variants = Mapping[str, Recipe]  # label → recipe, in column order
MAX_VARIANTS = 2


class Models:
    """Shared base models, cached variants and their turns on the device; see the module docstring.

    ``data_dir``: the benchmark data folder; None → ``LAYERCUT_DATA_DIR`` or ../shared/benchdata, "" → none
    (benchmarks read the Hugging Face Hub).
    """

    def __init__(self, data_dir: str | Path | None, device: str, model_budget_bytes: int | str | None):
        if data_dir is None:
            self.data_dir = default_data_dir()
        else:
            self.data_dir = Path(data_dir).expanduser() if str(data_dir).strip() else None
        self.device = device
        self.jobs = JobRunner(device)
        self.pool = ModelPool(device, configured_budget(model_budget_bytes))  # LAYERCUT_MEMORY_BUDGET if set
        self.variants = VariantCache()
        self.residency = Residency(device, lambda: [*self.pool.models(), *self.variants.models()])
        self.default_calibration = default_calibration(self.data_dir)  # WikiText-2 validation when at hand
        self._rates: dict[ModelSpec, Rates] = {}  # each loaded model's speed on this machine, for estimates
        self._rates_guard = threading.Lock()

    def load(self, spec: ModelSpec, *, progress: Progress | None = None, owner: str | None = None,
             timed: bool = True) -> ModelInfo:
        """Make sure ``spec`` is loaded (shared with every visitor) and, when ``timed``, its speed here known
        (:meth:`rates`); a failed load unloads nothing it need not. ``timed=False``: the first screen, which needs
        no speed, is drawn first and the probe follows."""
        if (loaded := self.pool.peek(spec)) is not None and ((rates := self.rates(spec)) is not None or not timed):
            return replace(loaded.info, rates=rates)
        with self.jobs.run("loading the model", progress, owner=owner) as job:
            job.update(0.0, f"Loading {spec.label}…")
            loaded = self.base(spec, job)
            found = self.rates(spec)
            if found is None and timed:
                found = self._timed(spec, loaded, job)
            job.update(1.0, f"Loaded {loaded.info.name}: {loaded.info.num_layers} layers.")
            return replace(loaded.info, rates=found)

    def _timed(self, spec: ModelSpec, loaded: Loaded, job: Job) -> Rates:
        """``loaded``'s rates probed (:func:`~evaluation.measure.speed.probe_rates`), and kept in memory and in the
        results cache (a restart, or another process of this server, reads them: :meth:`rates`)."""
        job.update(0.95, "Timing one short pass on this machine…")
        found = speed.probe_rates(loaded.model)
        ResultStore().put(self._rates_key(loaded), asdict(found))
        with self._rates_guard:
            self._rates[spec] = found
        return found

    def _kept(self, spec: ModelSpec, loaded: Loaded) -> Rates | None:
        """The rates the results cache keeps for ``loaded`` on this machine (then held in memory too), or None."""
        try:
            found = Rates(**ResultStore().get(self._rates_key(loaded)))
        except TypeError:  # none kept, or unreadable
            return None
        with self._rates_guard:
            self._rates[spec] = found
        return found

    def _rates_key(self, loaded: Loaded) -> dict:
        """What ``loaded``'s speed here depends on: its weights, the device, the processor and its threads (the
        results cache adds torch's version)."""
        return {"kind": "rates", "model": loaded.fingerprint, "device": str(self.device), "machine": machine(),
                "threads": torch.get_num_threads()}

    def place(self, spec: ModelSpec) -> None:
        """Load ``spec``'s weights onto the device now, with no forward pass: a ZeroGPU Space places its models at
        start-up, outside any GPU call, as its docs ask (the GPU worker forked later finds them there)."""
        with self.jobs.run("placing the model"):
            self.base(spec)

    def rates(self, spec: ModelSpec) -> Rates | None:
        """How fast ``spec``'s model ran here (what the page's time estimates divide by): measured by a timed load,
        in this process or another on this machine (a ZeroGPU worker: read from the disk cache); None before."""
        with self._rates_guard:
            found = self._rates.get(spec)
        if found is None and (loaded := self.pool.peek(spec)) is not None:
            found = self._kept(spec, loaded)
        return found

    def adopt(self, model, tokenizer, *, name: str | None = None) -> ModelSpec:
        """Serve an already loaded model (from ``prune.load_model``) and return the spec that names it."""
        spec = ModelSpec(name=name or getattr(model, "layercut_name", None) or "custom model")
        self.pool.adopt(spec, model, tokenizer)
        return spec

    def base(self, spec: ModelSpec, job: Job | None = None) -> Loaded:
        """The loaded base model; for ``job``, brought whole onto the device if it waits off it (:meth:`ready`)."""
        base = self.pool.get(spec)
        if job is not None:
            self.ready(base, [Side(ORIGINAL, Recipe(), base.model)], job)
        return base

    def ready(self, base: Loaded, sides: list[Side], job: Job) -> bool:
        """Bring what ``sides`` compute with whole onto the device for ``job``, others waiting off it if they must
        (:mod:`evaluation.serving.residency`): a variant built into files of its own itself, any other side its base
        (cuts and drops are views of it; a variant built in memory stays where it is). Whether all of it fits."""
        models = {}
        for side in sides:
            if own_files(side.model):
                models[side.recipe.short()] = side.model
            else:
                models[base.info.name] = base.model
        return self.residency.ready(models, job)

    def sides(self, spec: ModelSpec, variants: Variants, job: Job | None = None) -> tuple[Loaded, list[Side]]:
        """The base and the compared models: the original first, then each variant in order.

        A variant not cached yet is built here; with ``job`` its build (per layer for sparsity)
        is reported and can be cancelled.
        """
        if len(variants) > MAX_VARIANTS:
            raise InvalidInput(f"Compare at most {MAX_VARIANTS} compressed models with the original.")
        if ORIGINAL in variants:
            raise InvalidInput(f"'{ORIGINAL}' names the base model; give the compressed models other labels.")
        base = self.base(spec, job)
        sides = [Side(ORIGINAL, Recipe(), base.model)]
        sides += [Side(label, recipe, self.variants.get(base, recipe, building(job, label)))
                  for label, recipe in variants.items()]
        return base, sides

    @staticmethod
    def key(base: Loaded, recipe: Recipe) -> dict:
        """What identifies one compared model in result caches."""
        info = base.info
        return {"model": base.fingerprint, "recipe": recipe.key, "dtype": info.dtype,
                "device": info.device.split(":")[0]}

    def model(self, spec: ModelSpec, recipe: Recipe | None = None) -> torch.nn.Module:
        """The model a recipe derives from ``spec`` (shares weights where it can; never alters the base)."""
        return self.variants.get(self.base(spec), recipe or Recipe())

    def estimated_bytes(self, spec: ModelSpec, recipe: Recipe) -> int:
        """What ``recipe``'s variant will own (its copied or rebuilt matrices), before building it."""
        return estimated_bytes(self.base(spec).model, recipe)

    def built_into_files(self, spec: ModelSpec, recipe: Recipe) -> bool:
        """Whether ``recipe``'s variant will be built layer by layer into files of its own and read from them (the
        base is read from disk, or the variant's weights would not fit in memory beside it)."""
        base = self.base(spec).model
        room = self.residency.room_beside(base) if self.residency.waiting(base) else None  # its build brings it back
        return any(s.layerwise for s in recipe.steps) and streams(base, estimated_bytes(base, recipe), room)

    def build(self, spec: ModelSpec, recipe: Recipe, *, progress: Progress | None = None,
              owner: str | None = None) -> int:
        """Build (or find cached) the variant ``recipe`` derives, as this visitor's job; the bytes it owns.

        Sparsity and width steps calibrate layer by layer: ``progress`` reports each layer, and
        the visitor's Stop cancels between layers. Comparisons then find it built.
        """
        with self.jobs.run(f"building {recipe.short()}", progress, owner=owner) as job:
            base = self.base(spec, job)
            model = self.variants.get(base, recipe, job.update)
            job.update(1.0, f"Built {recipe.short()}.")
            return own_bytes(model, base.model)
