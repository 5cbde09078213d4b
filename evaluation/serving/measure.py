"""Measuring every compared model side by side, each measurement as the calling visitor's job: streamed generation,
speed and memory, lm-eval's benchmarks, WikiText-2 and C4 perplexity.

A part of :class:`~evaluation.serving.backend.Backend`. Every measurement comes back as a
:class:`~evaluation.measure.measurement.Measurement` labelled "original" or by the caller's label, and what costs
minutes is cached in the results store by everything that changes it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

from prune.core.calibration import Calibration, load_text
from prune.core.errors import InvalidInput
from prune.core.paths import digest
from prune.quantize.weights import kernel_of

from evaluation.core.jobs import Progress
from evaluation.core.pool import ModelSpec
from evaluation.core.settings import BATCH_SIZE
from evaluation.core.store import ResultStore
from evaluation.measure import compiled as compiled_mode, generation, memory, sparse_kernels, speed
from evaluation.engines import llama_cpp
from evaluation.measure.measurement import ORIGINAL, Measurement, from_json_list, to_json_list
from evaluation.quality import c4, lm_eval_adapter, perplexity, reuse
from evaluation.quality.lm_eval_adapter import DEFAULT_SCORER
from evaluation.serving import engine as engines
from evaluation.serving.models import Models, Variants
from evaluation.serving.variants import Side

MEMORY_PROMPT_TOKENS = 128


def check_engine(engine: str | None, int4_type: str) -> None:
    """A second engine LayerCut runs the columns in (None: its own loop only), and the GGUF type of an int4 column."""
    if engine not in (None, llama_cpp.LLAMA_CPP):
        raise InvalidInput(f"The engines are LayerCut's own and {llama_cpp.LLAMA_CPP}, not {engine!r}.")
    if int4_type not in llama_cpp.INT4_TYPES:
        raise InvalidInput(f"An int4 column runs in {llama_cpp.LLAMA_CPP} as {', '.join(llama_cpp.INT4_TYPES)}, "
                           f"not {int4_type!r}.")
    if engine is not None and (why := llama_cpp.why_not_installed()):
        raise InvalidInput(why)


class Measure:
    """Every measurement of a comparison (the original and up to two variants), as the visitor's job."""

    def __init__(self, models: Models):
        self.models = models

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
            with self.models.jobs.run("generation", progress, owner=owner, hold=False) as job:
                with self.models.jobs.holding(job):
                    base, sides = self.models.sides(spec, variants, job)
                by_label = {side.label: side for side in sides}
                models = {side.label: side.model for side in sides}
                yield from generation.stream_side_by_side(
                    models, base.tokenizer, prompt, job=job, hold=lambda: self.models.jobs.holding(job),
                    ready=lambda labels: self.models.ready(base, [by_label[label] for label in labels], job),
                    **settings)

        return stream()

    def speed(self, spec: ModelSpec, variants: Variants, *, batch_sizes=(1, 8, 32), prompt_len: int = 128,
              new_tokens=(32,), repeats: int = 3, compiled: bool = False, engine: str | None = None,
              int4_type: str = llama_cpp.INT4_TYPES[0], progress: Progress | None = None,
              owner: str | None = None) -> list[Measurement]:
        """Prefill/decode latency and throughput of every compared model, with the ideal speedup beside each;
        ``compiled``: the compiled mode's rows too (``evaluation.measure.compiled``), beside the eager ones;
        ``engine="llama.cpp"``: each column's batch-1 rows in llama.cpp too (``evaluation.serving.engine``), an int4
        column as ``int4_type``."""
        check_engine(engine, int4_type)
        with self.models.jobs.run("the speed measurement", progress, owner=owner) as job:
            base, sides = self.models.sides(spec, variants, job)
            together = self.models.ready(base, sides, job)  # else each takes its turn on the device, timed alone
            found, notes = [], {}
            for turn in ([sides] if together else [[side] for side in sides]):
                self.models.ready(base, turn, job)
                with_kernels = sparse_kernels.kernel_batches(batch_sizes, sparse_kernels.device_wins(turn[0].model))
                fast = self._kernel_forms(turn, batch_sizes, with_kernels, notes)
                dense = tuple(b for b in batch_sizes if b not in with_kernels)
                for batches, kernel_forms in ((with_kernels, fast), (dense, {})):
                    if batches:
                        found += self._speed_rows(turn, kernel_forms, compiled,
                                                  batch_sizes=batches, prompt_len=prompt_len, new_tokens=new_tokens,
                                                  repeats=repeats, job=job)
                del fast, kernel_forms  # the kernel forms' compressed weights go before the next turn
            if engine is not None:
                found += engines.speed_rows(self.models, base, sides, prompt_len=prompt_len, new_tokens=new_tokens,
                                            repeats=repeats, int4_type=int4_type, job=job)
        found = [replace(m, details={**m.details, "sparsity_note": notes[m.model]}) if notes[m.model] else m
                 for m in found]
        original = [m for m in found if m.model == ORIGINAL]
        out = list(original)
        for side in sides[1:]:
            out += speed.with_ideal(sides[0].model, side.model, original, [m for m in found if m.model == side.label])
        return engines.beside(out)

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
        with self.models.jobs.run("the memory measurement", progress, owner=owner) as job:
            base, sides = self.models.sides(spec, variants, job)
            ids = base.tokenizer(load_text(Calibration()), add_special_tokens=False, return_tensors="pt")["input_ids"]
            ids = ids[:, :MEMORY_PROMPT_TOKENS]  # [1, T]
            out = []
            for i, side in enumerate(sides):
                self.models.ready(base, [side], job)
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
        with self.models.jobs.run("the benchmarks", progress, owner=owner) as job:
            base, sides = self.models.sides(spec, variants, job)
            keys = {s.label: {t: {**settings, **self.models.key(base, s.recipe), "task": t} for t in request.names}
                    for s in sides}
            found = {label: {t: store.get(key) for t, key in per.items()} for label, per in keys.items()}
            missing = {label: tuple(t for t, entry in per.items() if entry is None) for label, per in found.items()}
            scorers = reuse.paired_scorers(base.model, base.tokenizer, sides, missing, scorer, batch_size)
            for i, side in enumerate(sides):
                sub = job.sub(i / len(sides), (i + 1) / len(sides))
                if not missing[side.label]:
                    continue
                self.models.ready(base, [side], job)
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
                   max_windows: int | None = None, engine: str | None = None,
                   int4_type: str = llama_cpp.INT4_TYPES[0], use_cache: bool = True, progress: Progress | None = None,
                   owner: str | None = None) -> list[Measurement]:
        """WikiText-2 perplexity of every compared model at each sequence length, with and without BOS;
        ``engine="llama.cpp"``: each column's perplexity from llama.cpp's logits on the same windows too, and its
        top-1 agreement with the column in PyTorch."""
        check_engine(engine, int4_type)
        rows = perplexity.wikitext2_rows(self.models.data_dir)
        store = ResultStore(enabled=use_cache)
        text = digest("\n".join(rows))
        with self.models.jobs.run("the perplexity measurement", progress, owner=owner) as job:
            base, sides = self.models.sides(spec, variants, job)
            perplexity.check_seq_lens(base.model, seq_lens)
            settings = [(s, b) for s in seq_lens for b in bos if not (b and base.tokenizer.bos_token_id is None)]
            if not settings:
                raise InvalidInput("This tokenizer has no BOS token: measure perplexity without BOS.")
            ids = None
            out, steps = [], len(sides) * len(settings)
            for i, side in enumerate(sides):
                for j, (seq_len, with_bos) in enumerate(settings):
                    key = {"kind": "perplexity", **self.models.key(base, side.recipe), "seq_len": seq_len,
                           "bos": with_bos, "max_windows": max_windows, "text": text}
                    cached = store.get(key)
                    if cached is None:
                        self.models.ready(base, [side], job)
                        ids = perplexity.token_ids(base.tokenizer, rows) if ids is None else ids
                        step = (i * len(settings) + j) / steps
                        cached = to_json_list(perplexity.measure_perplexity(
                            side.model, base.tokenizer, ids, label=side.label, seq_lens=(seq_len,),
                            bos=(with_bos,), max_windows=max_windows, job=job.sub(step, step + 1 / steps)))
                        store.put(key, cached)
                    out += [replace(m, model=side.label) for m in from_json_list(cached)]  # this caller's label
            if engine is not None:
                ids = perplexity.token_ids(base.tokenizer, rows) if ids is None else ids
                for seq_len, with_bos in settings:
                    out += engines.perplexity_rows(self.models, base, sides, ids, seq_len=seq_len, with_bos=with_bos,
                                                   max_windows=max_windows, int4_type=int4_type, store=store,
                                                   text=text, job=job)
            job.update(1.0, "Perplexity measured.")
        return engines.beside(out)

    def c4_results(self, spec: ModelSpec, variants: Variants, *, limit: int | None = None, use_cache: bool = True,
                   progress: Progress | None = None, owner: str | None = None) -> dict[str, dict]:
        """C4 perplexity by SparseGPT's and Wanda's rule (``evaluation.quality.c4``) of every compared model, as a
        results entry in lm-eval's layout per label; ``limit``: the first windows only."""
        texts = c4.documents(c4.shard(self.models.data_dir))
        store = ResultStore(enabled=use_cache)
        with self.models.jobs.run("the C4 perplexity", progress, owner=owner) as job:
            base, sides = self.models.sides(spec, variants, job)
            perplexity.check_seq_lens(base.model, (2,))  # a causal model
            seq_len, chunks, out = c4.seq_len_for(base.model), None, {}
            for i, side in enumerate(sides):
                key = {"kind": c4.TASK, **self.models.key(base, side.recipe), "seq_len": seq_len, "limit": limit,
                       "text": digest(texts)}
                if (entry := store.get(key)) is None:
                    self.models.ready(base, [side], job)
                    chunks = c4.windows(base.tokenizer, texts, seq_len)[:limit] if chunks is None else chunks
                    sub = job.sub(i / len(sides), (i + 1) / len(sides))
                    nll, count = perplexity.mean_nll(side.model, chunks, report=lambda done: sub.update(
                        min(done, 1.0), f"{side.label}: C4 perplexity over {len(chunks)} windows of {seq_len}"))
                    entry = c4.entry(nll, count, len(chunks), seq_len)
                    store.put(key, entry)
                out[side.label] = entry
            job.update(1.0, "C4 perplexity measured.")
        return out
