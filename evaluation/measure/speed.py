"""Inference speed: prefill latency, per-token decode latency and throughput, the ideal speedup, and the limit.

Each (batch size, output length) runs after a warm-up, ``repeats`` times, under inference mode (as a deployment
runs: no autograd graph); a value is the median with the interquartile range as spread. On CUDA the device is timed
with events and synchronised; on CPU with ``perf_counter``. The prefill computes logits for the last position only
(as ``generate`` does).

**The ideal speedup** says which bound it uses (``details["ideal_by"]``). A decode step reads every stored weight
and the KV cache for a few FLOPs each, so it is bound by memory: its ideal is the ratio of bytes read per token
(``evaluation.measure.bandwidth``: quantized values and scales as stored, a cut's fewer layers, the cache). A
prefill, and a whole request, are bound by compute: their ideal is the ratio of matmul FLOPs for the same work:
every 2-D weight of every decoder layer (2 FLOPs per weight and token), the attention scores and values
(4 · context · heads · head_dim per token and layer that still has attention) and the LM head (2 · hidden · vocab
per token whose logits are computed). Norms, activations and the embedding lookup are ignored; a mixture-of-experts
layer counts all its experts.

**The limit** (:func:`with_limit`): each decode row carries its bytes per token, its floor (bytes ÷ this device's
measured bandwidth) and the share of that floor reached (floor ÷ measured), and the three are rows of their own.
"""

from __future__ import annotations

import threading
from dataclasses import replace

import numpy as np
import torch

from prune.core.chunked_loss import last_logits_only
from prune.core.devices import input_device
from prune.core.architectures import CAUSAL, SEQ2SEQ, decoder_layers, kind_of, layer_config
from prune.core.errors import InvalidInput
from prune.core.experts import experts_per_token
from prune.core.structure import expert_parameters
from prune.core.kv import cache_returned, with_cache
from prune.drop.sublayers import attention_layers

from evaluation.core.jobs import Job
from evaluation.core.timing import Rates, Timer
from evaluation.measure import bandwidth
from evaluation.measure import compiled as compiled_mode
from evaluation.measure.measurement import Measurement

GROUP = "speed"
PROBE_TOKENS, PROBE_STEPS, PROBE_RUNS = 128, 3, 2  # the rate probe: a prefill of this many tokens, then this
# many decode steps, so many times


# ---------------------------------------------------------------- FLOPs


def layer_matmul_flops(model) -> list[int]:
    """Per decoder layer: 2 FLOPs per weight of every matrix (projections, MLP) a token multiplies; of a mixture of
    experts' stacked experts, the k of each stack's E the token is routed to."""
    k = experts_per_token(model)
    found = []
    for layer in decoder_layers(model):
        stacked = {id(p) for _, p in expert_parameters(layer)}
        found.append(round(2 * sum(p.numel() * (min(1.0, k / p.shape[0]) if k and id(p) in stacked else 1.0)
                                   for p in layer.parameters() if p.dim() >= 2)))
    return found


def _attention_width(config) -> int:
    """heads × head_dim: the width of the attention scores and values."""
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return heads * head_dim


def head_flops(model) -> int:
    """2 FLOPs per LM-head weight, per token whose logits are computed."""
    return 2 * model.get_output_embeddings().weight.numel()


def forward_flops(model, tokens: int, past: int = 0, head_tokens: int | None = None) -> float:
    """Matmul FLOPs of one sequence's forward over ``tokens`` new tokens after ``past`` cached ones."""
    layers = layer_matmul_flops(model)
    # Σ over the new tokens of their context lengths past+1 … past+tokens
    contexts = tokens * past + tokens * (tokens + 1) / 2
    attention = 4 * _attention_width(layer_config(model)) * contexts * attention_layers(model)  # a dropped one has none
    head_tokens = tokens if head_tokens is None else head_tokens
    return tokens * sum(layers) + attention + head_tokens * head_flops(model)


def per_token_flops(model, context: int) -> float:
    """FLOPs for one token that attends to ``context`` positions (itself included), LM head included."""
    return forward_flops(model, 1, past=max(int(context) - 1, 0), head_tokens=1)


def ideal_speedup(original, pruned, context: int) -> float:
    """How much faster the pruned model would be if time were proportional to per-token FLOPs."""
    return per_token_flops(original, context) / per_token_flops(pruned, context)


# ---------------------------------------------------------------- timing


class GpuUtilization:
    """Samples NVML GPU utilisation in a thread while the block runs (CUDA with nvidia-ml-py only)."""

    def __init__(self, device: torch.device, interval_s: float = 0.02):
        self.samples: list[int] = []
        self._interval, self._handle, self._stop = interval_s, None, threading.Event()
        if device.type != "cuda":
            return
        try:
            import pynvml

            pynvml.nvmlInit()
            index = device.index if device.index is not None else torch.cuda.current_device()
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            self._nvml = pynvml
        except Exception:  # no NVML library, driver mismatch…: simply no utilisation figure
            self._handle = None

    def __enter__(self):
        if self._handle is not None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        return self

    def _sample(self):
        while not self._stop.is_set():
            self.samples.append(self._nvml.nvmlDeviceGetUtilizationRates(self._handle).gpu)
            self._stop.wait(self._interval)

    def __exit__(self, *exc):
        if self._handle is not None:
            self._stop.set()
            self._thread.join()
        return False


# ---------------------------------------------------------------- measuring


@torch.inference_mode()
def one_pass(model, input_ids: torch.Tensor):
    """One forward pass over ``input_ids`` (an encoder-decoder's decoder reads one token)."""
    extra = {"decoder_input_ids": input_ids[:, :1]} if kind_of(model) == SEQ2SEQ else {}
    return model(input_ids=input_ids, **extra)


@torch.inference_mode()
def _run_once(model, input_ids: torch.Tensor, new_tokens: int) -> tuple[float, float]:
    """(prefill ms, decode ms) for one greedy generation of ``new_tokens`` tokens; for an encoder or an
    encoder-decoder, which generate nothing here, (one pass over ``input_ids``, 0). Under inference mode, as a
    deployment runs: with autograd recording, each pass would build a graph and keep what a backward needs (every
    step's activations, and a layer read from disk or dequantized, alive through the KV cache's history)."""
    device = input_ids.device
    if kind_of(model) != CAUSAL:
        with Timer(device) as prefill:
            one_pass(model, input_ids)
        return prefill.ms, 0.0
    with Timer(device) as prefill:
        out = model(input_ids=input_ids, use_cache=True, **last_logits_only(model))  # the prefill skips unused logits
        token = out.logits[:, -1].argmax(dim=-1, keepdim=True)
    cache = cache_returned(out)
    with Timer(device) as decode:
        for _ in range(new_tokens - 1):  # the prefill produced the first token
            out = model(input_ids=token, use_cache=True, **with_cache(model, cache))
            cache = cache_returned(out)
            token = out.logits[:, -1].argmax(dim=-1, keepdim=True)
    return prefill.ms, decode.ms


def summary(name: str, samples: list[float], unit: str, higher: bool, model: str, details: dict) -> Measurement:
    q1, median, q3 = np.percentile(samples, [25, 50, 75])
    return Measurement(name, float(median), unit, higher, float(q3 - q1), "IQR", model, GROUP,
                       details={**details, "samples": [float(s) for s in samples]})


def measure_speed(models: dict, *, batch_sizes=(1, 8, 32), prompt_len: int = 128, new_tokens=(32,),
                  repeats: int = 3, warmup: int = 1, seed: int = 0, compiled: bool = False,
                  job: Job | None = None) -> list[Measurement]:
    """Speed of each model in ``{label: model}`` (see the module docstring for what is timed).

    The models take turns run by run, so a change in the machine's load affects them alike. ``compiled``: each decode
    step compiled over a static cache (``evaluation.measure.compiled``), the rows named "… (compiled)", each model's
    compile time a row of its own; else the eager loop, the rows marked eager.
    """
    batch_sizes, new_tokens = list(batch_sizes), list(new_tokens)
    if not batch_sizes or min(batch_sizes) < 1 or not new_tokens or min(new_tokens) < 2:
        raise InvalidInput("Speed needs batch sizes ≥ 1 and output lengths ≥ 2 tokens.")
    if prompt_len < 1 or repeats < 1:
        raise InvalidInput("Speed needs a prompt of at least 1 token and at least 1 repeat.")
    for model in models.values():
        limit = getattr(model.config, "max_position_embeddings", None)
        if limit and prompt_len + max(new_tokens) > limit:
            raise InvalidInput(f"Prompt + output ({prompt_len + max(new_tokens)} tokens) exceeds the model's "
                               f"{limit} positions.")
    first = next(iter(models.values()))
    device = input_device(first)
    run = compiled_mode.CompiledRuns(max(new_tokens)) if compiled else _run_once
    generator = torch.Generator().manual_seed(seed)
    results: list[Measurement] = []
    steps, done = len(batch_sizes) * len(models) * (warmup + repeats * len(new_tokens)), 0
    for batch in batch_sizes:
        ids = torch.randint(0, layer_config(first).vocab_size, (batch, prompt_len), generator=generator).to(device)
        prefills: dict[str, list[float]] = {label: [] for label in models}
        utils = {label: GpuUtilization(device) for label in models}
        try:
            for _ in range(warmup):
                for label, model in models.items():
                    run(model, ids, 2)
                    done += 1
                    _report(job, done / steps, f"warm-up, batch {batch}")
            for count in new_tokens:
                decode = {label: [] for label in models}
                throughput = {label: [] for label in models}
                for r in range(repeats):
                    for label, model in models.items():
                        with utils[label]:
                            pre_ms, dec_ms = run(model, ids, count)
                        prefills[label].append(pre_ms)
                        decode[label].append(dec_ms / (count - 1))
                        throughput[label].append(batch * count / ((pre_ms + dec_ms) / 1000))
                        done += 1
                        _report(job, done / steps, f"{label}: batch {batch}, {count} new tokens, run {r + 1}/{repeats}")
                common = {"batch": batch, "prompt_len": prompt_len, "new_tokens": count, "device": str(device)}
                for label in models:
                    results.append(summary(decode_name(batch, count), decode[label],
                                            "ms", False, label, {**common, "context": prompt_len + count / 2}))
                    results.append(summary(f"throughput (batch {batch}, {count} new)", throughput[label], "tokens/s",
                                            True, label, common))
        except torch.cuda.OutOfMemoryError:
            torch.cuda.empty_cache()
            raise InvalidInput(f"Batch size {batch} ran out of memory on {device}: "
                               "choose smaller batch sizes.") from None
        for label in models:
            results.append(summary(f"prefill latency (batch {batch}, {prompt_len} tokens)", prefills[label], "ms",
                                    False, label, {"batch": batch, "prompt_len": prompt_len, "device": str(device)}))
            samples = utils[label].samples
            if samples:
                results.append(Measurement(f"GPU utilization (batch {batch})", float(np.mean(samples)), "%", None,
                                           float(np.std(samples)), "std", label, GROUP,
                                           details={"batch": batch, "samples": len(samples)}))
    if kind_of(first) != CAUSAL:  # an encoder generates nothing: its passes over the prompt only
        results = [m for m in results if not m.name.startswith(("decode", "throughput"))]
    results = run.labelled(_ordered(results), models) if compiled else compiled_mode.eager_labelled(_ordered(results))
    return with_limit(results, models, device)


DECODE = "decode latency per token"
LIMIT = "limit"  # the group of the bandwidth-limit rows


def decode_name(batch: int, count: int) -> str:
    """The decode row's name at a batch size and a number of new tokens."""
    return f"{DECODE} (batch {batch}, {count} new)"


def with_limit(results: list[Measurement], models: dict, device: torch.device) -> list[Measurement]:
    """Each decode row with its bytes per token, floor and share of the limit (``evaluation.measure.bandwidth``) in
    its details, and the three as rows of their own after the speed rows (none for a model read from disk)."""
    out, limits = [], []
    for m in results:
        read = bandwidth.decode_bytes(models[m.model], m.details["context"], m.details["batch"]) \
            if m.name.startswith(DECODE) else None
        if read is None:
            out.append(m)
            continue
        limit = bandwidth.bandwidth(device)
        floor = limit.floor_ms(read)
        found = {"bytes_per_token": read, "floor_ms": floor, "limit_share": floor / m.value,
                 "bandwidth_GBps": limit.bytes_per_s / 1e9, "bandwidth_how": limit.how}
        out.append(replace(m, details={**m.details, **found}))
        where = m.name.removeprefix(DECODE)
        details = {k: m.details[k] for k in ("batch", "context", "device", "mode") if k in m.details}
        limits += [Measurement(f"bytes read per decoded token{where}", read / 2**20, "MiB", False, model=m.model,
                               group=LIMIT, details={**details, **found}),
                   Measurement(f"floor per decoded token at {limit.bytes_per_s / 1e9:.1f} GB/s{where}", floor, "ms",
                               False, model=m.model, group=LIMIT, details={**details, **found}),
                   Measurement(f"share of the bandwidth limit reached{where}", 100 * floor / m.value, "%", True,
                               model=m.model, group=LIMIT, details={**details, **found})]
    return out + limits


def probe_rates(model) -> Rates:
    """How fast ``model`` runs on this machine now: a prefill of PROBE_TOKENS tokens and PROBE_STEPS decode steps,
    once to warm up at that shape (a fresh model's first passes allocate and pick kernels: several times slower),
    then PROBE_RUNS times, the fastest of each (a busy machine's moments vary many-fold; a job of many passes
    sees their middle, so estimates lean long). What ``evaluation.measure.estimate`` divides a job's work by."""
    device = input_device(model)
    positions = getattr(model.config, "max_position_embeddings", None) or PROBE_TOKENS + PROBE_STEPS
    tokens = max(1, min(PROBE_TOKENS, positions - PROBE_STEPS - 2))  # a small model's learned positions end early
    ids = (torch.arange(tokens, device=device) % layer_config(model).vocab_size)[None]  # [1, T]
    _run_once(model, ids, PROBE_STEPS + 1)
    runs = [_run_once(model, ids, PROBE_STEPS + 1) for _ in range(PROBE_RUNS)]
    prefill_ms, decode_ms = (min(times) for times in zip(*runs))
    return Rates(tokens / max(prefill_ms / 1000, 1e-9), decode_ms / 1000 / PROBE_STEPS)


def _report(job: Job | None, fraction: float, message: str) -> None:
    if job is not None:
        job.update(fraction, message)


def _ordered(results: list[Measurement]) -> list[Measurement]:
    """Prefill first, then decode latency, throughput and utilisation, each by batch size (a stable
    sort: the models keep their order)."""
    kinds = ("prefill", "decode", "throughput", "GPU")
    return sorted(results, key=lambda m: (next(i for i, k in enumerate(kinds) if m.name.startswith(k)),
                                          m.details.get("batch", 0), m.details.get("new_tokens", 0)))


def with_ideal(original_model, pruned_model, original: list[Measurement],
               pruned: list[Measurement]) -> list[Measurement]:
    """Pruned measurements with ``ideal`` set: the value the bound of its work would give (a decode step: bytes read,
    :func:`_ideal_ratio`; prefill and whole requests: FLOPs), and ``ideal_by`` saying which."""
    by_name = {m.name: m for m in original}
    out = []
    for m in pruned:
        ref = by_name.get(m.name)
        ratio = _ideal_ratio(original_model, pruned_model, m.details)
        if ref is None or ratio is None:
            out.append(m)
            continue
        ratio, by = ratio
        ideal = ref.value * ratio if m.higher_is_better else ref.value / ratio
        out.append(replace(m, ideal=ideal, details={**m.details, "ideal_speedup": ratio, "ideal_by": by}))
    return out


def _ideal_ratio(original, pruned, details: dict) -> tuple[float, str] | None:
    """(ratio, what bounds it) for the work behind one measurement: one decode step reads every weight and the KV
    cache for a few FLOPs each, so its ratio is of bytes read (``evaluation.measure.bandwidth``; FLOPs for a model
    read from disk); a prefill or a whole request (its prefill's FLOPs and the decode steps') is of FLOPs."""
    prompt, count = details.get("prompt_len"), details.get("new_tokens")
    if prompt is None:
        return None
    if count is None:  # prefill: prompt tokens through the layers, logits for the last one
        work = [forward_flops(m, prompt, 0, head_tokens=1) for m in (original, pruned)]
    elif "context" in details:  # one decode step at the mean context
        read = [bandwidth.decode_bytes(m, details["context"], details.get("batch", 1)) for m in (original, pruned)]
        if None not in read:
            return read[0] / read[1], "bytes"
        work = [per_token_flops(m, int(details["context"])) for m in (original, pruned)]
    else:  # a whole request: the prefill then count − 1 decode steps
        work = [forward_flops(m, prompt, 0, 1) + forward_flops(m, count - 1, prompt) for m in (original, pruned)]
    return work[0] / work[1], "FLOPs"
