"""The one backend the UI tabs and the command line call; it holds no selection of its own.

Every call names the base model (a :class:`~evaluation.core.models.ModelSpec`) and the compared
models as ``{label: Recipe}``; the backend loads base models into a shared pool, builds
variants from recipes into a cache keyed by recipe, runs heavy work as jobs of the calling
visitor (one at a time per device, with progress and per-visitor cancellation), and returns
every measurement as a :class:`~evaluation.measure.measurement.Measurement` labelled "original" or
by the caller's label. Nothing one caller does changes what another sees.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path

import torch

import prune
from prune.core.calibration import Calibration, default_calibration, load_text
from prune.core.budget import configured_budget
from prune.core.devices import default_device
from prune.core.errors import InvalidInput
from prune.depth.methods import get_method
from prune.depth.methods.context import Context
from prune.core.paths import digest
from prune.core.layer_files import own_files, streams
from prune.core.recipe import Recipe
from prune.depth.stability import Stability, block_stability
from prune.quantize.weights import kernel_of

from evaluation.core import allocator
from evaluation.explain import cut as explain
from evaluation.measure import compiled as compiled_mode, generation, memory, sparse_kernels, speed
from evaluation.core.timing import Rates
from evaluation.quality import c4, lm_eval_adapter, perplexity, reuse
from evaluation.core.jobs import building, cancellable, Job, JobRunner, Progress
from evaluation.quality.lm_eval_adapter import DEFAULT_SCORER
from evaluation.measure.measurement import ORIGINAL, Measurement, from_json_list, to_json_list
from evaluation.core.models import Loaded, ModelInfo, ModelPool, ModelSpec
from prune.core.paths import default_data_dir
from evaluation.serving.residency import Residency
from evaluation.core.store import ResultStore
from evaluation.serving.variants import Side, VariantCache, estimated_bytes, own_bytes
from evaluation.core.settings import BATCH_SIZE
from evaluation.serving.explaining import Explaining
from evaluation.serving.frontiers import Frontiers
from evaluation.serving.judging import Judging
from evaluation.serving.sweeping import Sweeping
from evaluation.serving.training import Training

Variants = Mapping[str, Recipe]  # label → recipe, in column order


MAX_VARIANTS = 2
MEMORY_PROMPT_TOKENS = 128
_CONTEXTS_KEPT = 2  # residual streams kept in memory (each is [L+1, N, T, D] floats)


class Backend(Sweeping, Frontiers, Explaining, Training, Judging):
    """Shared base models, cached variants, and measurements of any comparison; see the module docstring.

    ``data_dir``: the benchmark data folder; None → ``LAYERCUT_DATA_DIR`` or ../shared/benchdata,
    "" → none (benchmarks read the Hugging Face Hub).
    """

    def __init__(self, data_dir: str | Path | None = None, device: str | None = None, *,
                 model_budget_bytes: int | str | None = None):
        if data_dir is None:
            self.data_dir = default_data_dir()
        else:
            self.data_dir = Path(data_dir).expanduser() if str(data_dir).strip() else None
        self.device = device or default_device()
        allocator.configure()  # before Gradio's worker threads allocate: see evaluation/core/allocator.py
        self.jobs = JobRunner(self.device)
        self.pool = ModelPool(self.device, configured_budget(model_budget_bytes))  # LAYERCUT_MEMORY_BUDGET if set
        self.variants = VariantCache()
        self.residency = Residency(self.device, lambda: [*self.pool.models(), *self.variants.models()])
        self.default_calibration = default_calibration(self.data_dir)  # WikiText-2 validation when at hand
        self._contexts: OrderedDict[tuple[str, str], Context] = OrderedDict()
        self.explainer = explain.Explainer()
        self._rates: dict[ModelSpec, Rates] = {}  # each loaded model's speed on this machine, for estimates
        self._rates_guard = threading.Lock()

    # ------------------------------------------------------------ models

    def load(self, spec: ModelSpec, *, progress: Progress | None = None, owner: str | None = None) -> ModelInfo:
        """Make sure ``spec`` is loaded (shared with every visitor) and its speed here measured (:meth:`rates`); a
        failed load unloads nothing it need not."""
        if (loaded := self.pool.peek(spec)) is not None and (rates := self.rates(spec)) is not None:
            return replace(loaded.info, rates=rates)
        with self.jobs.run("loading the model", progress, owner=owner) as job:
            job.update(0.0, f"Loading {spec.label}…")
            loaded = self._base(spec, job)
            job.update(0.95, "Timing one short pass on this machine…")
            found = speed.probe_rates(loaded.model)
            with self._rates_guard:
                self._rates[spec] = found
            job.update(1.0, f"Loaded {loaded.info.name}: {loaded.info.num_layers} layers.")
            return replace(loaded.info, rates=found)

    def place(self, spec: ModelSpec) -> None:
        """Load ``spec``'s weights onto the device now, with no forward pass: a ZeroGPU Space places its models at
        start-up, outside any GPU call, as its docs ask (the GPU worker forked later finds them there)."""
        with self.jobs.run("placing the model"):
            self._base(spec)

    def rates(self, spec: ModelSpec) -> Rates | None:
        """How fast ``spec``'s model ran here when it was loaded (what the page's time estimates divide by); None
        before its first load."""
        with self._rates_guard:
            return self._rates.get(spec)

    def adopt(self, model, tokenizer, *, name: str | None = None) -> ModelSpec:
        """Serve an already loaded model (from ``prune.load_model``) and return the spec that names it."""
        spec = ModelSpec(name=name or getattr(model, "layercut_name", None) or "custom model")
        self.pool.adopt(spec, model, tokenizer)
        return spec

    def _base(self, spec: ModelSpec, job: Job | None = None) -> Loaded:
        """The loaded base model; for ``job``, brought whole onto the device if it waits off it (:meth:`_ready`)."""
        base = self.pool.get(spec)
        if job is not None:
            self._ready(base, [Side(ORIGINAL, Recipe(), base.model)], job)
        return base

    def _ready(self, base: Loaded, sides: list[Side], job: Job) -> bool:
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

    def _sides(self, spec: ModelSpec, variants: Variants, job: Job | None = None) -> tuple[Loaded, list[Side]]:
        """The base and the compared models: the original first, then each variant in order.

        A variant not cached yet is built here; with ``job`` its build (per layer for sparsity)
        is reported and can be cancelled.
        """
        if len(variants) > MAX_VARIANTS:
            raise InvalidInput(f"Compare at most {MAX_VARIANTS} compressed models with the original.")
        if ORIGINAL in variants:
            raise InvalidInput(f"'{ORIGINAL}' names the base model; give the compressed models other labels.")
        base = self._base(spec, job)
        sides = [Side(ORIGINAL, Recipe(), base.model)]
        sides += [Side(label, recipe, self.variants.get(base, recipe, building(job, label)))
                  for label, recipe in variants.items()]
        return base, sides

    def model(self, spec: ModelSpec, recipe: Recipe | None = None) -> torch.nn.Module:
        """The model a recipe derives from ``spec`` (shares weights where it can; never alters the base)."""
        base = self._base(spec)
        return self.variants.get(base, recipe or Recipe())

    def estimated_bytes(self, spec: ModelSpec, recipe: Recipe) -> int:
        """What ``recipe``'s variant will own (its copied or rebuilt matrices), before building it."""
        return estimated_bytes(self._base(spec).model, recipe)

    def built_into_files(self, spec: ModelSpec, recipe: Recipe) -> bool:
        """Whether ``recipe``'s variant will be built layer by layer into files of its own and read from them (the
        base is read from disk, or the variant's weights would not fit in memory beside it)."""
        base = self._base(spec).model
        room = self.residency.room_beside(base) if self.residency.waiting(base) else None  # its build brings it back
        return any(s.layerwise for s in recipe.steps) and streams(base, estimated_bytes(base, recipe), room)

    def build(self, spec: ModelSpec, recipe: Recipe, *, progress: Progress | None = None,
              owner: str | None = None) -> int:
        """Build (or find cached) the variant ``recipe`` derives, as this visitor's job; the bytes it owns.

        Sparsity and width steps calibrate layer by layer: ``progress`` reports each layer, and
        the visitor's Stop cancels between layers. Comparisons then find it built.
        """
        with self.jobs.run(f"building {recipe.short()}", progress, owner=owner) as job:
            base = self._base(spec, job)
            model = self.variants.get(base, recipe, job.update)
            job.update(1.0, f"Built {recipe.short()}.")
            return own_bytes(model, base.model)

    def _key(self, base: Loaded, recipe: Recipe) -> dict:
        """What identifies one compared model in result caches."""
        info = base.info
        return {"model": base.fingerprint, "recipe": recipe.key, "dtype": info.dtype,
                "device": info.device.split(":")[0]}

    # ------------------------------------------------------------ analysis

    def analyze(self, spec: ModelSpec, method: str, *, calibration: Calibration | None = None,
                progress: Progress | None = None, owner: str | None = None, use_cache: bool = True,
                **options) -> prune.ImportanceResult:
        """``prune.score`` (and its disk cache), keeping one residual stream per calibration in memory."""
        method_spec = get_method(method)
        with self.jobs.run(f"the {method_spec.label} analysis", progress, owner=owner) as job:
            base = self._base(spec, job)
            job.update(0.0, f"Scoring layers with {method_spec.label}…")
            context = self._context(base, calibration or self.default_calibration)
            with cancellable(base.model, job):
                return prune.score(None, None, method, context=context, use_cache=use_cache, **options)

    def stability(self, spec: ModelSpec, method: str, block_size: int, *, calibration: Calibration | None = None,
                  resamples: int = 20, progress: Progress | None = None, owner: str | None = None,
                  **options) -> Stability:
        """How often each block of ``block_size`` wins over bootstrap resamples of the calibration windows."""
        with self.jobs.run("the stability check", progress, owner=owner) as job:
            base = self._base(spec, job)
            job.update(0.0, f"Re-scoring {resamples} resamples of the calibration windows…")
            context = self._context(base, calibration or self.default_calibration)
            with cancellable(base.model, job):
                return block_stability(context, method, block_size, resamples=resamples, **options)

    def _context(self, base: Loaded, calibration: Calibration) -> Context:
        """The method context of (model, calibration): its residual stream is computed once and kept."""
        key = (base.fingerprint, digest(calibration.key()))
        if key not in self._contexts:
            while len(self._contexts) >= _CONTEXTS_KEPT:  # bound the memory held by residual streams
                self._contexts.popitem(last=False)
            self._contexts[key] = Context(base.model, base.tokenizer, calibration)
        self._contexts.move_to_end(key)
        return self._contexts[key]

    # ------------------------------------------------------------ export

    def export(self, spec: ModelSpec, recipe: Recipe, target: Path, *, scores: list[Measurement] | None = None,
               progress: Progress | None = None, owner: str | None = None, factored: bool = False,
               gguf: str | None = None) -> Path:
        """Save what ``recipe`` derives as a normal Hugging Face folder with a model card (see ``exports``);
        ``factored`` keeps low-rank factors as they are (smaller; LayerCut loads them); ``gguf``: a GGUF type, to
        write the model as a GGUF file in the folder too."""
        from evaluation.exports import folder as exports

        if recipe.is_original:
            raise InvalidInput("Choose a cut before exporting: there is no compressed model yet.")
        with self.jobs.run("the export", progress, owner=owner) as job:
            base = self._base(spec, job)
            job.update(0.0, "Saving the checkpoint…")
            return exports.export(self.variants.get(base, recipe, building(job, "the export")), base.tokenizer, recipe,
                                  base_name=base.info.name, num_layers=base.info.num_layers, target=target,
                                  scores=scores, factored=factored, gguf=gguf,
                                  tokenizer_gguf=getattr(base.model, "layercut_gguf", None))

    # ------------------------------------------------------------ measurements

    def generate(self, spec: ModelSpec, variants: Variants, prompt: str, *, max_new_tokens: int = 64,
                 temperature: float = 0.0, top_p: float = 1.0, seed: int = 0, progress: Progress | None = None,
                 owner: str | None = None) -> Iterator[dict]:
        """Stream every compared model's answer: yields ``{label: state}`` as tokens arrive.

        Bad input (an empty prompt, bad settings) raises here, before the first token.
        """
        settings = generation.check_settings(max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p,
                                             seed=seed)
        if not (prompt or "").strip():
            raise InvalidInput("The prompt is empty: type something for the models to continue.")

        def stream():
            with self.jobs.run("generation", progress, owner=owner, hold=False) as job:
                with self.jobs.holding(job):
                    base, sides = self._sides(spec, variants, job)
                by_label = {side.label: side for side in sides}
                models = {side.label: side.model for side in sides}
                yield from generation.stream_side_by_side(
                    models, base.tokenizer, prompt, job=job, hold=lambda: self.jobs.holding(job),
                    ready=lambda labels: self._ready(base, [by_label[label] for label in labels], job), **settings)

        return stream()

    def speed(self, spec: ModelSpec, variants: Variants, *, batch_sizes=(1, 8, 32), prompt_len: int = 128,
              new_tokens=(32,), repeats: int = 3, compiled: bool = False, progress: Progress | None = None,
              owner: str | None = None) -> list[Measurement]:
        """Prefill/decode latency and throughput of every compared model, with the ideal speedup beside each;
        ``compiled``: the compiled mode's rows too (``evaluation.measure.compiled``), beside the eager ones."""
        with self.jobs.run("the speed measurement", progress, owner=owner) as job:
            base, sides = self._sides(spec, variants, job)
            together = self._ready(base, sides, job)  # else each takes its turn on the device, timed alone
            found, notes = [], {}
            for turn in ([sides] if together else [[side] for side in sides]):
                self._ready(base, turn, job)
                with_kernels = sparse_kernels.kernel_batches(batch_sizes, sparse_kernels.device_wins(turn[0].model))
                fast = self._kernel_forms(turn, batch_sizes, with_kernels, notes)
                dense = tuple(b for b in batch_sizes if b not in with_kernels)
                for batches, kernel_forms in ((with_kernels, fast), (dense, {})):
                    if batches:
                        found += self._speed_rows(turn, kernel_forms, compiled,
                                                  batch_sizes=batches, prompt_len=prompt_len, new_tokens=new_tokens,
                                                  repeats=repeats, job=job)
                del fast, kernel_forms  # the kernel forms' compressed weights go before the next turn
        found = [replace(m, details={**m.details, "sparsity_note": notes[m.model]}) if notes[m.model] else m
                 for m in found]
        original = [m for m in found if m.model == ORIGINAL]
        out = list(original)
        for side in sides[1:]:
            out += speed.with_ideal(sides[0].model, side.model, original, [m for m in found if m.model == side.label])
        return out

    @staticmethod
    def _kernel_forms(turn: list[Side], batch_sizes, with_kernels: tuple[int, ...], notes: dict) -> dict:
        """{label: the 2:4 kernel form} of each 2:4 variant the kernels can run, built only when some batch size
        runs it; ``notes`` gets each side's note on its zeros."""
        fast = {}
        for side in turn:
            notes[side.label] = sparse_kernels.why_no_gain(side.recipe, side.model)
            if sparse_kernels.two_four(side.recipe) and notes[side.label] is None:
                notes[side.label] = sparse_kernels.routing_note(batch_sizes, with_kernels) or None
                if with_kernels:
                    kernel_form, note = sparse_kernels.accelerated(side.model)
                    notes[side.label] = " ".join(filter(None, (note, notes[side.label])))
                    if kernel_form is not side.model:  # else PyTorch refused: timed dense, as the note says
                        fast[side.label] = kernel_form
        return fast

    @staticmethod
    def _speed_rows(turn: list[Side], fast: dict, compiled: bool, **settings) -> list[Measurement]:
        """Each side timed in its 2:4 kernel form where ``fast`` holds one, else as it is, eagerly (and compiled
        when asked); each row says which kernel ran (a quantized model's: ``prune.quantize.weights.kernel_of``)."""
        timed = {side.label: fast.get(side.label, side.model) for side in turn}
        rows = speed.measure_speed(timed, **settings)
        if compiled:
            try:
                rows += speed.measure_speed(timed, compiled=True, **settings)
            finally:
                compiled_mode.release()
        kernels = {label: sparse_kernels.KERNEL if label in fast else kernel_of(model) or sparse_kernels.DENSE
                   for label, model in timed.items()}
        return [replace(m, details={**m.details, "kernel": kernels[m.model]}) for m in rows]

    def memory(self, spec: ModelSpec, variants: Variants, *, new_tokens: int = 64, progress: Progress | None = None,
               owner: str | None = None) -> list[Measurement]:
        """Parameters, weight memory, peak memory while generating and checkpoint size of every compared model."""
        with self.jobs.run("the memory measurement", progress, owner=owner) as job:
            base, sides = self._sides(spec, variants, job)
            ids = base.tokenizer(load_text(Calibration()), add_special_tokens=False, return_tensors="pt")["input_ids"]
            ids = ids[:, :MEMORY_PROMPT_TOKENS]  # [1, T]
            out = []
            for i, side in enumerate(sides):
                self._ready(base, [side], job)
                job.update(i / len(sides), f"{side.label}: generating…")
                out += memory.measure_memory(side.model, ids, label=side.label, new_tokens=new_tokens)
            job.update(1.0, "Memory measured.")
            return out

    def benchmark_results(self, spec: ModelSpec, variants: Variants, request: lm_eval_adapter.TaskRequest, *,
                          batch_size: int = BATCH_SIZE, scorer: str = DEFAULT_SCORER, seed: int = 0,
                          use_cache: bool = True, progress: Progress | None = None,
                          owner: str | None = None) -> dict[str, dict[str, dict]]:
        """lm-eval results per compared model and standard task name (see ``lm_eval_adapter.evaluate``).

        With the fast scorer, a variant that is one contiguous cut resumes from the original's
        hidden states at the cut (``reuse.make_fast_pair``) instead of rerunning the prefix.
        """
        lm_eval_adapter.get_scorer(scorer)
        store = ResultStore(enabled=use_cache)
        settings = {"kind": "benchmark", "limit": request.limit, "num_fewshot": request.num_fewshot,
                    "batch_size": batch_size, "scorer": scorer, "seed": seed, "data": request.data,
                    "bootstrap_iters": 1000}
        with self.jobs.run("the benchmarks", progress, owner=owner) as job:
            base, sides = self._sides(spec, variants, job)
            keys = {s.label: {t: {**settings, **self._key(base, s.recipe), "task": t} for t in request.names}
                    for s in sides}
            found = {label: {t: store.get(key) for t, key in per.items()} for label, per in keys.items()}
            missing = {label: tuple(t for t, entry in per.items() if entry is None) for label, per in found.items()}
            scorers = reuse.paired_scorers(base.model, base.tokenizer, sides, missing, scorer, batch_size)
            for i, side in enumerate(sides):
                sub = job.sub(i / len(sides), (i + 1) / len(sides))
                if not missing[side.label]:
                    continue
                self._ready(base, [side], job)
                sub.update(0.0, f"{side.label}: {', '.join(missing[side.label])}…")
                part = lm_eval_adapter.TaskRequest(missing[side.label], request.limit, request.num_fewshot,
                                                   request.data_dir, request.data)
                fresh = lm_eval_adapter.evaluate(side.model, base.tokenizer, part, batch_size=batch_size,
                                                 scorer=scorer, seed=seed, job=sub, lm=scorers.get(side.label))
                for task, entry in fresh.items():
                    store.put(keys[side.label][task], entry)
                    found[side.label][task] = entry
            job.update(1.0, "Benchmarks done.")
        return found

    def benchmarks(self, spec: ModelSpec, variants: Variants, request: lm_eval_adapter.TaskRequest,
                   **settings) -> list[Measurement]:
        """Accuracy (%, ± stderr) and other lm-eval metrics of every compared model."""
        results = self.benchmark_results(spec, variants, request, **settings)
        return [m for label, entries in results.items() for m in lm_eval_adapter.to_measurements(entries, model=label)]

    def perplexity(self, spec: ModelSpec, variants: Variants, *, seq_lens=(128, 2048), bos=(False, True),
                   max_windows: int | None = None, use_cache: bool = True, progress: Progress | None = None,
                   owner: str | None = None) -> list[Measurement]:
        """WikiText-2 perplexity of every compared model at each sequence length, with and without BOS."""
        rows = perplexity.wikitext2_rows(self.data_dir)
        store = ResultStore(enabled=use_cache)
        text = digest("\n".join(rows))
        with self.jobs.run("the perplexity measurement", progress, owner=owner) as job:
            base, sides = self._sides(spec, variants, job)
            perplexity.check_seq_lens(base.model, seq_lens)
            settings = [(s, b) for s in seq_lens for b in bos if not (b and base.tokenizer.bos_token_id is None)]
            if not settings:
                raise InvalidInput("This tokenizer has no BOS token: measure perplexity without BOS.")
            ids = None
            out, steps = [], len(sides) * len(settings)
            for i, side in enumerate(sides):
                for j, (seq_len, with_bos) in enumerate(settings):
                    key = {"kind": "perplexity", **self._key(base, side.recipe), "seq_len": seq_len, "bos": with_bos,
                           "max_windows": max_windows, "text": text}
                    cached = store.get(key)
                    if cached is None:
                        self._ready(base, [side], job)
                        ids = perplexity.token_ids(base.tokenizer, rows) if ids is None else ids
                        step = (i * len(settings) + j) / steps
                        cached = to_json_list(perplexity.measure_perplexity(
                            side.model, base.tokenizer, ids, label=side.label, seq_lens=(seq_len,),
                            bos=(with_bos,), max_windows=max_windows, job=job.sub(step, step + 1 / steps)))
                        store.put(key, cached)
                    out += [replace(m, model=side.label) for m in from_json_list(cached)]  # this caller's label
            job.update(1.0, "Perplexity measured.")
        return out

    def c4_results(self, spec: ModelSpec, variants: Variants, *, limit: int | None = None, use_cache: bool = True,
                   progress: Progress | None = None, owner: str | None = None) -> dict[str, dict]:
        """C4 perplexity by SparseGPT's and Wanda's rule (``evaluation.quality.c4``) of every compared model, as a
        results entry in lm-eval's layout per label; ``limit``: the first windows only."""
        texts = c4.documents(c4.shard(self.data_dir))
        store = ResultStore(enabled=use_cache)
        with self.jobs.run("the C4 perplexity", progress, owner=owner) as job:
            base, sides = self._sides(spec, variants, job)
            perplexity.check_seq_lens(base.model, (2,))  # a causal model
            seq_len, chunks, out = c4.seq_len_for(base.model), None, {}
            for i, side in enumerate(sides):
                key = {"kind": c4.TASK, **self._key(base, side.recipe), "seq_len": seq_len, "limit": limit,
                       "text": digest(texts)}
                if (entry := store.get(key)) is None:
                    self._ready(base, [side], job)
                    chunks = c4.windows(base.tokenizer, texts, seq_len)[:limit] if chunks is None else chunks
                    sub = job.sub(i / len(sides), (i + 1) / len(sides))
                    nll, count = perplexity.mean_nll(side.model, chunks, report=lambda done: sub.update(
                        min(done, 1.0), f"{side.label}: C4 perplexity over {len(chunks)} windows of {seq_len}"))
                    entry = c4.entry(nll, count, len(chunks), seq_len)
                    store.put(key, entry)
                out[side.label] = entry
            job.update(1.0, "C4 perplexity measured.")
        return out


    # ------------------------------------------------------------ explaining a cut


    def cancel(self, owner: str | None = None) -> None:
        """Stop ``owner``'s running and waiting jobs at their next safe point (None: everyone's)."""
        self.jobs.cancel(owner)
