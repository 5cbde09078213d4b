"""The one backend the UI tabs and the command line call: models, cuts, and every measurement.

It holds the original model and its pruned variants (weight-sharing views from
``prune.remove_layers``, cached by removed-layer set; the original is never altered), runs
heavy work as jobs (one at a time per device, with progress and cancellation, see
:mod:`evaluation.jobs`), caches benchmark and perplexity results on disk
(:mod:`evaluation.store`), and returns every measurement as a
:class:`~evaluation.measurement.Measurement` labelled "original" or "pruned".
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

import prune
from prune.architectures import decoder_layers
from prune.calibration import Calibration, load_text
from prune.devices import default_device
from prune.errors import InvalidInput, LayerCutError, MissingDependency
from prune.loading import check_model
from prune.methods import get_method
from prune.methods.context import Context
from prune.paths import cache_root, digest, safe_child, write_atomic
from prune.scoring import model_fingerprint
from prune.surgery import check_block, check_layers

from . import generation, lm_eval_adapter, memory, perplexity, reuse, speed
from .lm_eval_adapter import DEFAULT_SCORER
from .jobs import Job, JobRunner, Progress
from .measurement import ORIGINAL, PRUNED, Measurement, from_json_list, to_json_list
from .offline_tasks import default_data_dir
from .store import ResultStore

EXPORT_MARKER = "layercut.json"
_MEMORY_PROMPT_TOKENS = 128


@dataclass
class SweepReport:
    """A cut sweep and how well each importance method predicts it."""

    sweep: object  # evaluation.sweep.SweepResult
    agreement: dict[str, float]  # method → Spearman rank correlation with the measured loss
    scores: dict[str, list[float]]  # method → its block score at each start of the sweep


@dataclass(frozen=True)
class ModelInfo:
    name: str
    num_layers: int
    num_params: int
    layer_params: list[int]  # parameters of each decoder layer
    device: str
    dtype: str


@dataclass(frozen=True)
class CutInfo:
    removed: list[int]
    layers_removed: int
    params_removed: int
    params_removed_pct: float
    description: str


class Backend:
    """Original model, pruned variants, and measurements of both; see the module docstring.

    ``data_dir``: the benchmark data folder; None → ``LAYERCUT_DATA_DIR`` or ../shared/benchdata,
    "" → none (benchmarks read the Hugging Face Hub).
    """

    def __init__(self, data_dir: str | None = None, device: str | None = None):
        if data_dir is None:
            self.data_dir = default_data_dir()
        else:
            self.data_dir = Path(data_dir).expanduser() if str(data_dir).strip() else None
        self.device = device or default_device()
        self.jobs = JobRunner(self.device)
        self.model = self.tokenizer = self.info = None
        self._fingerprint: str | None = None
        self._loaded_from: tuple[str | None, dict] | None = None  # how load() got the current model
        self._variants: dict[tuple[int, ...], torch.nn.Module] = {}
        self._removed: tuple[int, ...] | None = None
        self._contexts: dict[str, Context] = {}
        self._disk_bytes: dict[tuple[int, ...], int] = {}
        self._wikitext_ids: tuple[str | None, torch.Tensor | None] = (None, None)

    # ------------------------------------------------------------ model and cut

    def load(self, name_or_path: str | None = None, *, token=None, trust_remote_code=False, dtype=None,
             progress: Progress | None = None) -> ModelInfo:
        """Load a model (None → the embedded default), replacing the previous model, cut and variants.

        A bad id or architecture fails before anything is forgotten; a load that fails later
        (e.g. too big once weights are counted) brings the previous model back.
        """
        options = {"device": self.device, "dtype": dtype, "token": token, "trust_remote_code": trust_remote_code}
        with self.jobs.run("loading the model", progress) as job:
            job.update(0.0, f"Loading {name_or_path or prune.DEFAULT_MODEL}…")
            check_model(name_or_path, token=token, trust_remote_code=trust_remote_code)
            previous = self._loaded_from
            self._forget()  # free the old weights before allocating the new ones
            try:
                model, tokenizer = prune.load_model(name_or_path, **options)
            except LayerCutError:
                if previous is not None:
                    self.adopt(*prune.load_model(previous[0], **previous[1]), name=previous[0])
                    self._loaded_from = previous
                raise
            info = self.adopt(model, tokenizer, name=name_or_path)
            self._loaded_from = (name_or_path, options)
            job.update(1.0, f"Loaded {info.name}: {info.num_layers} layers.")
            return info

    def adopt(self, model, tokenizer, *, name: str | None = None) -> ModelInfo:
        """Use an already loaded model (e.g. from ``prune.load_model``) as the original."""
        layers = decoder_layers(model)  # fails clearly for an architecture we cannot cut
        first = next(model.parameters())
        self._forget()
        self.model, self.tokenizer = model, tokenizer
        self._fingerprint = model_fingerprint(model)
        self.info = ModelInfo(
            name=getattr(model, "layercut_name", None) or str(name), num_layers=len(layers),
            num_params=memory.num_params(model),
            layer_params=[sum(p.numel() for p in layer.parameters()) for layer in layers],
            device=str(first.device), dtype=str(first.dtype).removeprefix("torch."),
        )
        return self.info

    def _forget(self) -> None:
        self.model = self.tokenizer = self.info = self._fingerprint = self._removed = self._loaded_from = None
        self._variants.clear()
        self._contexts.clear()
        self._disk_bytes.clear()
        self._wikitext_ids = (None, None)
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    def _require_model(self) -> None:
        if self.model is None:
            raise InvalidInput("Load a model first.")

    def set_cut(self, start: int, end: int) -> CutInfo:
        """Cut the block [start, end) (end exclusive) from here on."""
        self._require_model()
        check_block(self.info.num_layers, start, end)
        return self._set_removed(range(start, end))

    def set_cut_layers(self, layers: list[int]) -> CutInfo:
        """Cut any set of layers (e.g. a persistence cut)."""
        self._require_model()
        return self._set_removed(check_layers(self.info.num_layers, layers))

    def clear_cut(self) -> None:
        self._removed = None

    def _set_removed(self, layers) -> CutInfo:
        removed = tuple(sorted(set(int(i) for i in layers)))
        self._variant(removed)
        self._removed = removed
        return self.cut_info

    def _variant(self, removed: tuple[int, ...]) -> torch.nn.Module:
        if removed not in self._variants:
            self._variants[removed] = prune.remove_layers(self.model, removed)
        return self._variants[removed]

    @property
    def pruned(self) -> torch.nn.Module | None:
        return None if self._removed is None else self._variant(self._removed)

    @property
    def cut_info(self) -> CutInfo | None:
        if self._removed is None:
            return None
        removed, info = list(self._removed), self.info
        params = sum(info.layer_params[i] for i in removed)
        return CutInfo(removed, len(removed), params, 100.0 * params / info.num_params,
                       describe_cut(removed, info.num_layers))

    def _models(self) -> dict[str, torch.nn.Module]:
        """'original' and, with a cut, 'pruned'."""
        self._require_model()
        models = {ORIGINAL: self.model}
        if self._removed is not None:
            models[PRUNED] = self.pruned
        return models

    def _key(self, label: str) -> dict:
        """What identifies one model side in result caches."""
        first = next(self.model.parameters())
        return {"model": self._fingerprint, "removed": list(self._removed or ()) if label == PRUNED else [],
                "dtype": str(first.dtype), "device": first.device.type}

    # ------------------------------------------------------------ analysis

    def analyze(self, method: str, *, calibration: Calibration | None = None, progress: Progress | None = None,
                use_cache: bool = True, **options) -> prune.ImportanceResult:
        """``prune.score`` (and its disk cache), keeping one residual stream per calibration in memory."""
        self._require_model()
        spec = get_method(method)
        with self.jobs.run(f"the {spec.label} analysis", progress) as job:
            job.update(0.0, f"Scoring layers with {spec.label}…")
            with cancellable(self.model, job):
                result = prune.score(None, None, method, context=self._context(calibration or Calibration()),
                                     use_cache=use_cache, **options)
            job.update(1.0, f"Scored in {result.elapsed_s:.1f} s.")
            return result

    def _context(self, calibration: Calibration) -> Context:
        """The method context of a calibration: its residual stream is computed once and kept."""
        key = digest(calibration.key())
        if key not in self._contexts:
            while len(self._contexts) >= 2:  # bound the memory held by residual streams
                self._contexts.pop(next(iter(self._contexts)))
            self._contexts[key] = Context(self.model, self.tokenizer, calibration)
        return self._contexts[key]

    # ------------------------------------------------------------ export

    def export(self, folder: str, *, root: str | Path | None = None) -> Path:
        """Save the pruned model and tokenizer as a normal Hugging Face folder.

        ``folder`` is a plain folder name inside ``root`` (default: the cache's exports/);
        anything that would escape it is refused, and a non-empty folder that is not an
        earlier LayerCut export is never overwritten.
        """
        self._require_model()
        if self._removed is None:
            raise InvalidInput("Choose layers to cut before exporting: there is no pruned model yet.")
        base = Path(root).expanduser() if root is not None else cache_root() / "exports"
        base.mkdir(parents=True, exist_ok=True)
        target = safe_child(base, folder)
        if target.exists() and (not target.is_dir() or (any(target.iterdir())
                                                        and not (target / EXPORT_MARKER).is_file())):
            raise InvalidInput(f"Refusing to overwrite {target}: it exists and is not a LayerCut export.")
        with self.jobs.run("the export") as job:
            job.update(0.0, f"Saving to {target}…")
            staging = Path(tempfile.mkdtemp(dir=base, prefix=f".{target.name}-"))
            try:
                memory.save_checkpoint(self.pruned, self.tokenizer, staging)
                self._disk_bytes[self._removed] = _model_files_bytes(staging)
                write_atomic(staging / EXPORT_MARKER, json.dumps({
                    "base_model": self.info.name, "removed_layers": list(self._removed),
                    "description": self.cut_info.description, "layercut_version": prune.__version__}, indent=1))
                if target.exists():
                    shutil.rmtree(target)
                os.replace(staging, target)
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
            return target

    # ------------------------------------------------------------ measurements

    def generate(self, prompt: str, *, max_new_tokens: int = 64, temperature: float = 0.0, top_p: float = 1.0,
                 seed: int = 0, progress: Progress | None = None) -> Iterator[dict]:
        """Stream both models' answers: yields {"original": state, "pruned": state} as tokens arrive.

        Bad input (no model, an empty prompt) raises here, before the first token.
        """
        models = self._models()
        generation.encode_prompt(self.tokenizer, prompt)
        settings = generation.check_settings(max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p,
                                             seed=seed)

        def stream():
            with self.jobs.run("generation", progress, hold=False) as job:
                yield from generation.stream_side_by_side(models, self.tokenizer, prompt, job=job,
                                                          hold=lambda: self.jobs.holding(job), **settings)

        return stream()

    def speed(self, *, batch_sizes=(1, 8, 32), prompt_len: int = 128, new_tokens=(32,), repeats: int = 3,
              progress: Progress | None = None) -> list[Measurement]:
        """Prefill/decode latency and throughput of both models, with the ideal speedup beside the pruned."""
        models = self._models()
        with self.jobs.run("the speed measurement", progress) as job:
            found = speed.measure_speed(models, batch_sizes=batch_sizes, prompt_len=prompt_len,
                                        new_tokens=new_tokens, repeats=repeats, job=job)
        if PRUNED not in models:
            return found
        original = [m for m in found if m.model == ORIGINAL]
        pruned = speed.with_ideal(self.model, models[PRUNED], original, [m for m in found if m.model == PRUNED])
        return original + pruned

    def memory(self, *, new_tokens: int = 64, progress: Progress | None = None) -> list[Measurement]:
        """Parameters, weight memory, peak memory while generating and checkpoint size of both models."""
        models = self._models()
        text = load_text(Calibration())
        ids = self.tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
        ids = ids[:, :_MEMORY_PROMPT_TOKENS]  # [1, T]
        with self.jobs.run("the memory measurement", progress) as job:
            out = []
            for i, (label, model) in enumerate(models.items()):
                job.update(i / len(models), f"{label}: generating and saving…")
                removed = self._removed if label == PRUNED else ()
                if removed not in self._disk_bytes:
                    self._disk_bytes[removed] = memory.checkpoint_bytes(model)
                out += memory.measure_memory(model, ids, label=label, new_tokens=new_tokens,
                                             saved_bytes=self._disk_bytes[removed])
            job.update(1.0, "Memory measured.")
            return out

    def benchmark_results(self, tasks: list[str], *, limit: int | None = 100, num_fewshot: int = 0,
                          batch_size: int = 16, scorer: str = DEFAULT_SCORER, seed: int = 0, use_cache: bool = True,
                          progress: Progress | None = None) -> dict[str, dict[str, dict]]:
        """lm-eval results per model side and standard task name (see ``lm_eval_adapter.evaluate``).

        With the fast scorer and a contiguous cut, the pruned model resumes from the original's
        hidden states at the cut (``reuse.make_fast_pair``) instead of rerunning the prefix.
        """
        models = self._models()
        names = lm_eval_adapter.check_request(tasks, num_fewshot=num_fewshot, limit=limit, data_dir=self.data_dir)
        lm_eval_adapter.get_scorer(scorer)
        store = ResultStore(enabled=use_cache)
        data = lm_eval_adapter.data_fingerprint(names, self.data_dir)
        settings = {"kind": "benchmark", "limit": limit, "num_fewshot": num_fewshot, "batch_size": batch_size,
                    "scorer": scorer, "seed": seed, "data": data, "bootstrap_iters": 1000}
        keys = {label: {task: {**settings, **self._key(label), "task": task} for task in names} for label in models}
        found = {label: {task: store.get(key) for task, key in keys[label].items()} for label in models}
        missing = {label: [task for task, entry in found[label].items() if entry is None] for label in models}
        scorers = self._paired_scorers(missing, scorer, batch_size)
        with self.jobs.run("the benchmarks", progress) as job:
            for i, (label, model) in enumerate(models.items()):
                sub = job.sub(i / len(models), (i + 1) / len(models))
                if missing[label]:
                    sub.update(0.0, f"{label}: {', '.join(missing[label])}…")
                    fresh = lm_eval_adapter.evaluate(model, self.tokenizer, missing[label], limit=limit,
                                                     num_fewshot=num_fewshot, batch_size=batch_size, scorer=scorer,
                                                     data_dir=self.data_dir, seed=seed, job=sub,
                                                     lm=scorers.get(label))
                    for task, entry in fresh.items():
                        store.put(keys[label][task], entry)
                        found[label][task] = entry
            job.update(1.0, "Benchmarks done.")
        return {label: {task: found[label][task] for task in names} for label in models}

    def _paired_scorers(self, missing: dict[str, list[str]], scorer: str, batch_size: int) -> dict:
        """Original and pruned scorers that share the prefix, when both run the same tasks on a block cut."""
        removed = list(self._removed or ())
        contiguous = bool(removed) and removed == list(range(removed[0], removed[-1] + 1))
        if scorer != "fast" or not contiguous or not missing.get(ORIGINAL) or missing[ORIGINAL] != missing.get(PRUNED):
            return {}
        original, pruned = reuse.make_fast_pair(self.model, self.tokenizer, removed[0], removed[-1] + 1, batch_size)
        return {ORIGINAL: original, PRUNED: pruned}

    def benchmarks(self, tasks: list[str], *, limit: int | None = 100, num_fewshot: int = 0, batch_size: int = 16,
                   scorer: str = DEFAULT_SCORER, seed: int = 0, use_cache: bool = True,
                   progress: Progress | None = None) -> list[Measurement]:
        """Accuracy (%, ± stderr) and other lm-eval metrics of both models."""
        results = self.benchmark_results(tasks, limit=limit, num_fewshot=num_fewshot, batch_size=batch_size,
                                         scorer=scorer, seed=seed, use_cache=use_cache, progress=progress)
        return [m for label, entries in results.items() for m in lm_eval_adapter.to_measurements(entries, model=label)]

    def sweep(self, task: str, block_size: int, *, limit: int | None = 100, methods: list[str] | None = None,
              batch_size: int = 16, use_cache: bool = True, progress: Progress | None = None) -> SweepReport:
        """Measured ``task`` quality of every cut of ``block_size`` layers, beside each method's scores.

        Cached like benchmarks; ``methods`` (default: every registered one whose analysis can
        run) are analysed on the original and ranked by agreement with the measurement.
        """
        self._require_model()
        from . import sweep as sweeps

        names = lm_eval_adapter.check_request([task], limit=limit, data_dir=self.data_dir)
        if not 1 <= int(block_size) < self.info.num_layers:
            raise InvalidInput(f"A block must have 1…{self.info.num_layers - 1} layers, not {block_size}.")
        store = ResultStore(enabled=use_cache)
        key = {"kind": "sweep", **self._key(ORIGINAL), "task": names[0], "block_size": int(block_size),
               "limit": limit, "batch_size": batch_size, "data": lm_eval_adapter.data_fingerprint(names, self.data_dir)}
        cached = store.get(key)
        if cached is not None:
            result = sweeps.SweepResult.from_json(cached)
        else:
            with self.jobs.run(f"the sweep over blocks of {block_size}", progress) as job:
                with cancellable(self.model, job):
                    result = sweeps.sweep(self.model, self.tokenizer, names[0], int(block_size), limit=limit,
                                          data_dir=self.data_dir, batch_size=batch_size, progress=job.update)
            store.put(key, result.to_json())
        analyses = {}
        for method in methods if methods is not None else list(prune.METHODS):
            try:
                analyses[method] = self.analyze(method, progress=progress)
            except MissingDependency:
                continue
        return SweepReport(result, sweeps.rank_agreement(result, analyses),
                           {m: [float(v) for v in r.block_scores[int(block_size) - 1, result.starts]]
                            for m, r in analyses.items()})

    def perplexity(self, *, seq_lens=(128, 2048), bos=(False, True), max_windows: int | None = None,
                   use_cache: bool = True, progress: Progress | None = None) -> list[Measurement]:
        """WikiText-2 perplexity of both models at each sequence length, with and without BOS."""
        models = self._models()
        perplexity.check_seq_lens(self.model, seq_lens)
        settings = [(s, b) for s in seq_lens for b in bos if not (b and self.tokenizer.bos_token_id is None)]
        if not settings:
            raise InvalidInput("This tokenizer has no BOS token: measure perplexity without BOS.")
        rows = perplexity.wikitext2_rows(self.data_dir)
        store = ResultStore(enabled=use_cache)
        text = digest("\n".join(rows))
        if self._wikitext_ids[0] != text:  # tokenize once per model and text
            self._wikitext_ids = (text, perplexity.token_ids(self.tokenizer, rows))
        out = []
        with self.jobs.run("the perplexity measurement", progress) as job:
            for i, (label, model) in enumerate(models.items()):
                for j, (seq_len, with_bos) in enumerate(settings):
                    key = {"kind": "perplexity", **self._key(label), "seq_len": seq_len, "bos": with_bos,
                           "max_windows": max_windows, "text": text}
                    cached = store.get(key)
                    if cached is None:
                        step = (i * len(settings) + j) / (len(models) * len(settings))
                        sub = job.sub(step, step + 1 / (len(models) * len(settings)))
                        cached = to_json_list(perplexity.measure_perplexity(
                            model, self.tokenizer, self._wikitext_ids[1], label=label, seq_lens=(seq_len,),
                            bos=(with_bos,), max_windows=max_windows, job=sub))
                        store.put(key, cached)
                    out += from_json_list(cached)
            job.update(1.0, "Perplexity measured.")
        return out

    def cancel(self) -> None:
        """Stop the running job (and any waiting one) at its next safe point."""
        self.jobs.cancel()


def describe_cut(removed: list[int], num_layers: int) -> str:
    """'layers 20–25 (6 of 30), end exclusive [20, 26)', or the list for a non-contiguous cut."""
    count = f"({len(removed)} of {num_layers})"
    if removed == list(range(removed[0], removed[-1] + 1)):
        span = f"layer {removed[0]}" if len(removed) == 1 else f"layers {removed[0]}–{removed[-1]}"
        return f"{span} {count}, end exclusive [{removed[0]}, {removed[-1] + 1})"
    return f"layers {', '.join(map(str, removed))} {count}"


@contextmanager
def cancellable(model: torch.nn.Module, job: Job):
    """Make every forward of ``model`` a safe point of ``job`` (for code that takes no job)."""
    hook = model.register_forward_pre_hook(lambda _m, _a: job.check())
    try:
        yield
    finally:
        hook.remove()


def _model_files_bytes(folder: Path) -> int:
    """Bytes of the weights and config files of a saved checkpoint (the tokenizer left out)."""
    return sum(p.stat().st_size for p in folder.iterdir()
               if p.is_file() and (p.suffix == ".safetensors" or p.name in ("config.json", "generation_config.json")
                                   or p.name.endswith(".index.json")))
