"""A compiled decode mode for timing: a static KV cache and ``torch.compile``, as a GPU deployment runs a model.

The prefill runs eagerly into a transformers ``StaticCache`` sized for the whole run (the prompt and the most new
tokens asked), the way transformers' guide to static caches and ``torch.compile`` does it (a prefill's length varies:
compiling it would recompile per prompt). The decode steps compile by region (PyTorch's recipe "Reducing torch.compile
cold start compilation time with regional compilation"): each decoder layer is called through ``torch.compile`` of its
own call, while the embedding, the mask, the final norm and the head run eagerly. Every layer runs the same code
(``nn.Module._call_impl``) and is handed its own layer of the KV cache (:class:`OwnCacheLayer`: the layer's index
is never read), and dynamo takes the weights as graph inputs: one graph serves every layer of a shape and weight type,
so the compile no longer grows with the depth as a whole-model graph's does. On CUDA the layers compile in
``mode="reduce-overhead"``: CUDA graph trees record one graph per layer (the same code, other weights: "static inputs"
at other addresses) in a chain and replay the chain, with no launch cost per kernel; elsewhere inductor's default mode
(a C++ compiler builds the kernels). The first run at a shape compiles (on CUDA it also records the graphs): its wall
time is reported apart, as the compile time, and the timed runs come after it. The greedy tokens are the eager loop's
(``evaluation.measure.speed._run_once``).
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import replace

import torch
from transformers import StaticCache

from prune.core.architectures import CAUSAL, decoder_layers, kind_of
from prune.core.chunked_loss import last_logits_only
from prune.core.devices import input_device
from prune.core.errors import InvalidInput
from prune.core.kv import cache_swapped, with_cache
from prune.core.offload import is_offloaded

from evaluation.core.timing import Timer
from evaluation.measure.measurement import Measurement

COMPILE_STEPS = 3  # decode steps of the compiling run: dynamo compiles on the first; CUDA graphs warm up, then record
# on the second and replay from the third
RECOMPILE_LIMIT = 256  # dynamo's entries for a layer's call: one per shape and weight type (per layer too, for a cache
# passed whole); fail_on_recompile_limit_hit makes reaching it an error, never a slow eager row
SUFFIX = " (compiled)"
COMPILE_ALLOWANCE_S = 60  # what a ZeroGPU job asks per model and batch size for the compile: an allowance, not
# measured (benchmarks/gpu_check.py's decode step reports the compile seconds on a GPU)


def _decode_step(model, token: torch.Tensor, cache_kwargs: dict) -> torch.Tensor:
    """One greedy decode step: the next token [B, 1] after ``token`` [B, 1], the cache updated in place."""
    out = model(input_ids=token, use_cache=True, **cache_kwargs)
    return out.logits[:, -1].argmax(dim=-1, keepdim=True)


def compile_mode(device: torch.device) -> str:
    """CUDA graphs where a CUDA device replays them; inductor's default mode elsewhere."""
    return "reduce-overhead" if device.type == "cuda" else "default"


class OwnCacheLayer:
    """The one layer of a transformers ``Cache`` that a compiled decoder layer writes: ``update`` ignores the layer
    index the attention passes, so dynamo does not specialize on it and one graph serves every layer. Anything else
    a layer asks of its cache is the whole cache's (then read by index, as without this)."""

    def __init__(self, cache, layer):
        self.cache, self.layer = cache, layer

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs):
        return self.layer.update(key_states, value_states, *args, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self.cache, name)


def _with_own_layer(call, own: OwnCacheLayer, *args, **kwargs):
    return call(*args, **cache_swapped(kwargs, own))


@contextlib.contextmanager
def regionally_compiled(model, device: torch.device, cache: StaticCache):
    """The decode step, with ``model``'s decoder layers compiled within the block (each layer's own
    ``_compiled_call_impl``, the hook ``nn.Module.compile`` sets) and eager again after it: the eager rows and the
    prefill never meet a compiled layer. A cut's layers are its own shallow copies, so the original's are untouched.
    A cache whose layers do not match the model's one to one (none here: a static cache has a layer per decoder layer)
    is passed whole, and dynamo then compiles a graph per layer."""
    layers = list(decoder_layers(model))
    before = [layer._compiled_call_impl for layer in layers]
    own = list(getattr(cache, "layers", ()))
    mode = compile_mode(device)
    for index, layer in enumerate(layers):  # fullgraph: a graph break fails, not runs part of a layer eagerly
        call = torch.compile(layer._call_impl, mode=mode, fullgraph=True, dynamic=False)
        layer._compiled_call_impl = functools.partial(_with_own_layer, call, OwnCacheLayer(cache, own[index])) \
            if len(own) == len(layers) else call
    try:
        with _limits():
            yield _decode_step
    finally:
        for layer, call in zip(layers, before):
            layer._compiled_call_impl = call


@contextlib.contextmanager
def wholly_compiled(model, device: torch.device, cache: StaticCache):
    """The decode step compiled whole, every layer in one graph: what regional compilation replaced (its compile
    grows with the depth), kept for ``benchmarks/regional_compile.py`` to compare."""
    with _limits():
        yield torch.compile(_decode_step, mode=compile_mode(device), fullgraph=True, dynamic=False)


def _limits():
    return torch._dynamo.config.patch(recompile_limit=RECOMPILE_LIMIT, accumulated_recompile_limit=RECOMPILE_LIMIT,
                                      fail_on_recompile_limit_hit=True)


def check_compilable(model) -> None:
    """Only a decoder held whole on its device has a decode step to compile."""
    if kind_of(model) != CAUSAL:
        raise InvalidInput("The compiled mode times decoding: this model generates nothing (an encoder or an "
                           "encoder-decoder).")
    if is_offloaded(model):
        raise InvalidInput("The compiled mode needs the weights held on the device; this model reads them layer by "
                           "layer for each pass.")


class CompiledRuns:
    """Compiled greedy runs of several models at one cache length (prompt + ``most_new_tokens``, at least the compiling
    run's): each model keeps its cache between runs (CUDA graphs replay on the same addresses), and the wall time of its
    first run at each batch is kept apart, in ``compile_ms``."""

    def __init__(self, most_new_tokens: int):
        self.extra = max(int(most_new_tokens), COMPILE_STEPS + 1)
        self._caches: dict[int, tuple[tuple, StaticCache]] = {}  # id(model) → (ids' shape, its cache)
        self.compile_ms: dict[tuple[int, int], float] = {}  # (id(model), batch) → ms

    def __call__(self, model, input_ids: torch.Tensor, new_tokens: int) -> tuple[float, float]:
        """(prefill ms, decode ms), as ``speed._run_once`` returns them; a first run's compile goes to compile_ms."""
        prefill_ms, decode_ms, compile_ms = self.run(model, input_ids, new_tokens)
        if compile_ms:
            self.compile_ms[(id(model), input_ids.shape[0])] = compile_ms
        return prefill_ms, decode_ms

    def run(self, model, input_ids: torch.Tensor, new_tokens: int) -> tuple[float, float, float]:
        """(prefill ms, decode ms, compile ms): compile ms is the wall time of a first, compiling run (COMPILE_STEPS
        decode steps) when this model meets this shape first, else 0."""
        check_compilable(model)
        if new_tokens > self.extra:
            raise InvalidInput(f"{new_tokens} new tokens do not fit the static cache's {self.extra}.")
        cache, fresh = self._cache(model, input_ids)
        compile_ms = 0.0
        if fresh:
            try:
                prefill_ms, decode_ms, _ = generate(model, input_ids, COMPILE_STEPS + 1, cache)
            except Exception as error:  # dynamo or inductor refusing a layout (a quantized or sparse weight…)
                reason = (str(error).strip().splitlines() or [type(error).__name__])[0][:200]
                raise InvalidInput(f"torch.compile could not compile this model's decode step ({reason}); "
                                   "time it eagerly.") from error
            compile_ms = prefill_ms + decode_ms
        prefill_ms, decode_ms, _ = generate(model, input_ids, new_tokens, cache)
        return prefill_ms, decode_ms, compile_ms

    def _cache(self, model, input_ids: torch.Tensor) -> tuple[StaticCache, bool]:
        """This model's cache for this shape (the same tensors each run, so CUDA graphs stay valid), or a new one."""
        shape, cache = self._caches.get(id(model), (None, None))
        if shape == tuple(input_ids.shape):
            return cache, False
        cache = StaticCache(config=model.config, max_cache_len=input_ids.shape[1] + self.extra)
        self._caches[id(model)] = (tuple(input_ids.shape), cache)  # the previous shape's cache is freed
        return cache, True

    def labelled(self, results: list[Measurement], models: dict) -> list[Measurement]:
        """The rows named with SUFFIX and marked compiled (with_ideal pairs compiled rows by name), and each model's
        compile time per batch as a row of its own."""
        rows = [replace(m, name=m.name + SUFFIX, details={**m.details, "mode": "compiled"}) for m in results]
        for label, model in models.items():
            for (key, batch), ms in sorted(self.compile_ms.items(), key=lambda item: item[0][1]):
                if key == id(model):
                    rows.append(Measurement(f"compile time (batch {batch})", ms / 1000, "s", False, None, None, label,
                                            "speed", details={"batch": batch, "mode": "compiled",
                                                              "includes": f"one run of {COMPILE_STEPS} decode steps"}))
        return rows


def release() -> None:
    """Drop every compiled step and its CUDA graphs: they hold the timed models' weights (graph inputs) and memory
    pools past the job, and a server's models come and go."""
    torch._dynamo.reset()


def eager_labelled(results: list[Measurement]) -> list[Measurement]:
    """Eager rows keep their names and say how they ran."""
    return [replace(m, details={**m.details, "mode": "eager"}) for m in results]


@torch.inference_mode()
def generate(model, input_ids: torch.Tensor, new_tokens: int, cache: StaticCache, compiling=regionally_compiled):
    """(prefill ms, decode ms, the new tokens [B, new_tokens]): an eager prefill into ``cache`` (emptied first, in
    place), then decode steps compiled as ``compiling`` compiles them."""
    device = input_device(model)
    kwargs = with_cache(model, cache)
    cache.reset()
    with Timer(device) as prefill:
        out = model(input_ids=input_ids, use_cache=True, **kwargs, **last_logits_only(model))
        tokens = [out.logits[:, -1].argmax(dim=-1, keepdim=True)]
    with compiling(model, device, cache) as step, Timer(device) as decode:
        for _ in range(new_tokens - 1):  # the prefill produced the first token
            if device.type == "cuda":
                torch.compiler.cudagraph_mark_step_begin()  # each call is a new step: earlier outputs may go
            tokens.append(step(model, tokens[-1], kwargs).clone())  # kept apart from any graph's output
    return prefill.ms, decode.ms, torch.cat(tokens, dim=1)
