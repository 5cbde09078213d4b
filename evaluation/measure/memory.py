"""Memory: parameters, weight bytes, peak memory and KV cache while generating, and the checkpoint size on disk.

Zeros cost what any weight costs: a sparse variant stores its pruned matrices densely, so its
weight memory and checkpoint are the dense model's. The weight-memory figure's details count
the zeros (:func:`zero_weights`) and say so (:func:`dense_zeros_note`).

The checkpoint size is computed from the tensors' shapes and dtypes, exactly as save_pretrained
would write it, instead of writing gigabytes to measure them. The KV cache is read from the cache
the generation built (keys and values of every layer; a dropped attention holds none).

Peak memory while generating is reported as what the model would need on its own: its
weight bytes plus the largest growth over the memory in use just before the generation
(activations, KV cache, temporaries), because the original and the pruned model share
their weights in one process.

* CUDA: ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats``.
* CPU: the kernel's own high-water mark of the process's resident set (``VmHWM`` in
  /proc/self/status), reset to the current RSS just before generating by writing 5 to
  /proc/self/clear_refs, after ``malloc_trim`` returned freed heap to the system. This
  is exact, not sampled. Where the reset is not permitted, RSS is sampled every
  millisecond in a thread instead (the details say which).
"""

from __future__ import annotations

import copy
import ctypes
import inspect
import json
import threading
from pathlib import Path

import psutil
import torch

from prune.core.architectures import CAUSAL, kind_of
from prune.core.devices import input_device
from prune.core.errors import InvalidInput
from prune.core.kv import cache_returned
from prune.core.offload import is_offloaded, parameters_read, resident_bytes
from prune.core.storage import dense, num_params, weight_bytes
from prune.lowrank.decomposition import factored_view, merged
from prune.drop.sublayers import attention_layers, savable
from prune.sparsity.masks import zero_fraction

from evaluation.measure.measurement import Measurement
from evaluation.measure.speed import one_pass, per_token_flops

GROUP = "memory"
MACS_CONTEXT = 128
_MIB = 2**20


def zero_weights(model) -> tuple[int, int]:
    """(entries exactly zero, all entries) of the model's parameters, each shared tensor counted once."""
    zeros = total = 0
    for p in parameters_read(model):  # each once; an offloaded one read from its files, one tensor at a time
        zeros += p.numel() - int(torch.count_nonzero(dense(p)))  # no bool or int64 copy; a quantized one's values
        total += p.numel()
    return zeros, total


def dense_zeros_note(model) -> str | None:
    """What zeros stored densely save (nothing), for a model with pruned matrices; None when it has none to speak of.

    '50 % of the decoder layers' linear weights are zero (36 % of all weights), stored densely: no memory saving.'
    """
    matrices = zero_fraction(model)
    if matrices < 0.01:
        return None
    zeros, total = zero_weights(model)
    return (f"{100 * matrices:.0f} % of the decoder layers' linear weights are zero ({100 * zeros / total:.0f} % of "
            "all weights), "
            "stored densely: no memory saving, and no speedup with dense kernels.")


def _proc_status(field: str) -> int | None:
    """A 'kB' field of /proc/self/status, in bytes."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _reset_peak_rss() -> bool:
    """Make VmHWM start again from the current RSS (Linux ≥ 4.0)."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return _proc_status("VmHWM") is not None


class _RssSampler:
    """Fallback: the largest RSS seen by a thread polling every millisecond."""

    def __enter__(self):
        self.peak, self._stop = psutil.Process().memory_info().rss, threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()
        return self

    def _poll(self):
        process = psutil.Process()
        while not self._stop.is_set():
            self.peak = max(self.peak, process.memory_info().rss)
            self._stop.wait(0.001)

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        return False


@torch.inference_mode()
def _generate(model, input_ids: torch.Tensor, new_tokens: int):
    """Greedy generation; returns the KV cache it built (an encoder, which generates nothing: one pass, no cache)."""
    if kind_of(model) != CAUSAL:
        one_pass(model, input_ids)
        return None
    pad = getattr(model.generation_config, "pad_token_id", None) or getattr(model.generation_config, "eos_token_id", 0)
    return cache_returned(model.generate(input_ids, attention_mask=torch.ones_like(input_ids),
                                         max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                                         pad_token_id=pad, return_dict_in_generate=True))


def kv_cache_bytes(cache) -> int:
    """Bytes of the keys and values a transformers cache holds, over every layer (a dropped attention's is empty)."""
    cache = getattr(cache, "self_attention_cache", cache)
    tensors = [getattr(layer, name, None) for layer in getattr(cache, "layers", ()) for name in ("keys", "values")]
    return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))


def peak_generation_bytes(model, input_ids: torch.Tensor, new_tokens: int = 64) -> tuple[int, dict]:
    """(weights in memory + peak extra memory while greedily generating ``new_tokens``, how it was measured); a
    model read layer by layer from disk counts the weights it holds, and the layers read in show in the extra."""
    device = input_device(model)
    input_ids = input_ids.to(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        cache = _generate(model, input_ids, new_tokens)
        torch.cuda.synchronize(device)
        extra = torch.cuda.max_memory_allocated(device) - base
        how = "cuda max_memory_allocated"
    else:
        # one token first: weights mapped from their files are paged in by the first pass, so that the baseline
        # holds them and they count once (as weights in memory), not a second time as extra
        _generate(model, input_ids, 1)
        if _reset_peak_rss():
            base = _proc_status("VmRSS")
            cache = _generate(model, input_ids, new_tokens)
            extra = _proc_status("VmHWM") - base
            how = "VmHWM after clear_refs"
        else:
            base = psutil.Process().memory_info().rss
            with _RssSampler() as sampler:
                cache = _generate(model, input_ids, new_tokens)
            extra = sampler.peak - base
            how = "RSS sampled every 1 ms"
    extra = max(int(extra), 0)
    return resident_bytes(model) + extra, {"extra_bytes": extra, "method": how, "device": str(device),
                                          "prompt_tokens": int(input_ids.shape[-1]), "new_tokens": new_tokens,
                                          "kv_cache_bytes": kv_cache_bytes(cache)}


def save_checkpoint(model, tokenizer, folder: Path, *, factored: bool = False) -> Path:
    """Save a normal Hugging Face folder (safetensors + config, and the tokenizer if given).

    Dropped attention/MLP blocks are written as zeros and recorded in the config (``prune.drop.sublayers``);
    factored projections as their dense product, the ranks recorded in the config (``prune.lowrank.decomposition``),
    or, with ``factored``, as their two factors (smaller; only ``prune.load_model`` reads that form).
    """
    # a model read from disk is saved a 2 GB shard at a time: each shard's weights are gathered in memory
    shards = {"max_shard_size": "2GB"} if is_offloaded(model) else {}
    try:
        (factored_view(savable(model)) if factored else merged(savable(model))).save_pretrained(folder, **shards)
        if tokenizer is not None:
            tokenizer.save_pretrained(folder)
    except (ValueError, NotImplementedError, RuntimeError) as err:  # e.g. quantized weights
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise InvalidInput(f"This model cannot be saved as a checkpoint: {first}") from None
    return Path(folder)


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file())


# safetensors' dtype names in the order of its Rust ``Dtype`` enum: a file holds its tensors by
# descending dtype, then by name (checked against the library by tests/evaluation/measure/test_checkpoint_size.py).
_SAFETENSORS_DTYPES = {
    torch.bool: "BOOL", torch.uint8: "U8", torch.int8: "I8", torch.float8_e5m2: "F8_E5M2",
    torch.float8_e4m3fn: "F8_E4M3", torch.float8_e8m0fnu: "F8_E8M0", torch.float8_e4m3fnuz: "F8_E4M3FNUZ",
    torch.float8_e5m2fnuz: "F8_E5M2FNUZ", torch.int16: "I16", torch.uint16: "U16", torch.float16: "F16",
    torch.bfloat16: "BF16", torch.int32: "I32", torch.uint32: "U32", torch.float32: "F32",
    torch.complex64: "C64", torch.float64: "F64", torch.int64: "I64", torch.uint64: "U64",
}
_DTYPE_RANK = {dtype: rank for rank, dtype in enumerate(_SAFETENSORS_DTYPES)}


def safetensors_bytes(tensors: dict[str, torch.Tensor], metadata: dict[str, str] | None = None) -> int:
    """Size of the file ``safetensors.torch.save_file(tensors, metadata=metadata)`` writes, without writing it.

    The format is 8 bytes of header length, the JSON header (compact, padded with spaces to a
    multiple of 8) and the raw tensor bytes; only shapes and dtypes are read, never the data.
    """
    header: dict = {} if metadata is None else {"__metadata__": metadata}
    offset = 0
    for name in sorted(tensors, key=lambda n: (-_DTYPE_RANK[tensors[n].dtype], n)):
        tensor = tensors[name]
        size = tensor.numel() * tensor.element_size()
        header[name] = {"dtype": _SAFETENSORS_DTYPES[tensor.dtype], "shape": list(tensor.shape),
                        "data_offsets": [offset, offset + size]}
        offset += size
    length = len(json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode())
    return 8 + length + (-length) % 8 + offset


def checkpoint_files(model, max_shard_size: int | str | None = None) -> dict[str, int]:
    """File name → bytes of what ``model.save_pretrained(folder)`` writes, computed from the tensors.

    Follows save_pretrained step by step: the state dict without ignored keys and tied
    duplicates, in its original naming; shards by ``max_shard_size`` (None: save_pretrained's
    own default) with their index; config.json and generation_config.json. Not counted: the
    tokenizer, and the code files of remote-code models.
    """
    from huggingface_hub import split_torch_state_dict_into_shards
    from transformers.core_model_loading import revert_weight_conversion
    from transformers.modeling_utils import remove_tied_weights_from_state_dict
    from transformers.utils import SAFE_WEIGHTS_INDEX_NAME, SAFE_WEIGHTS_NAME

    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None and not quantizer.is_serializable():
        raise InvalidInput("This model cannot be saved as a checkpoint: its quantized weights are not serializable.")
    state_dict, metadata = quantizer.get_state_dict_and_metadata(model) if quantizer else (model.state_dict(), {})
    metadata = {**metadata, "format": "pt"}
    for key in model._keys_to_ignore_on_save or ():
        state_dict.pop(key, None)
    state_dict = revert_weight_conversion(model, remove_tied_weights_from_state_dict(state_dict, model))
    if max_shard_size is None:
        max_shard_size = inspect.signature(model.save_pretrained).parameters["max_shard_size"].default
    pattern = SAFE_WEIGHTS_NAME.replace(".safetensors", "{suffix}.safetensors")
    split = split_torch_state_dict_into_shards(state_dict, filename_pattern=pattern, max_shard_size=max_shard_size)
    files = {name: safetensors_bytes({key: state_dict[key] for key in keys}, metadata)
             for name, keys in split.filename_to_tensors.items()}
    if split.is_sharded:
        index = {"metadata": {"total_parameters": model.num_parameters(), **split.metadata},
                 "weight_map": split.tensor_to_filename}
        files[SAFE_WEIGHTS_INDEX_NAME] = len((json.dumps(index, indent=2, sort_keys=True) + "\n").encode())
    return {**files, **config_files(model)}


def config_files(model) -> dict[str, int]:
    """Bytes of config.json and generation_config.json as save_pretrained writes them (it stamps dtype and class)."""
    from transformers.utils import CONFIG_NAME, GENERATION_CONFIG_NAME

    config = copy.deepcopy(model.config)
    config.dtype = str(model.dtype).split(".")[1]
    config.architectures = [type(model).__name__.removeprefix("FSDP")]
    if "transformers_weights" in config:
        delattr(config, "transformers_weights")
    files = {CONFIG_NAME: len(config.to_json_string(use_diff=True).encode())}
    if model.can_generate():
        text = model.generation_config.to_json_string(use_diff=True, keys_to_pop=["compile_config"])
        files[GENERATION_CONFIG_NAME] = len(text.encode())
    return files


def checkpoint_bytes(model) -> int:
    """Size on disk of the model as LayerCut saves it (weights and config), computed: nothing is written.

    Dropped attention/MLP blocks are saved as zeros (``prune.drop.sublayers.savable``), factored projections as
    dense matrices (``prune.lowrank.decomposition.merged``), so they count as such.
    """
    return sum(checkpoint_files(merged(savable(model, allocate=False), allocate=False)).values())


def measure_memory(model, input_ids: torch.Tensor, *, label: str, new_tokens: int = 64,
                   saved_bytes: int | None = None) -> list[Measurement]:
    """The memory figures of one model; ``saved_bytes`` skips re-saving an exported checkpoint."""
    peak, how = peak_generation_bytes(model, input_ids, new_tokens)
    disk = saved_bytes if saved_bytes is not None else checkpoint_bytes(model)
    zeros, total = zero_weights(model)
    sparse = {"zero_weights": zeros, "zero_fraction": zeros / total, "zero_fraction_of_layer_matrices":
              zero_fraction(model), "note": dense_zeros_note(model)}  # counted, so the tab can say what zeros cost
    generates = kind_of(model) == CAUSAL  # an encoder (-decoder): one pass over the prompt, no decoding, no KV cache
    rows = [Measurement("parameters", float(num_params(model)), "", False, model=label, group=GROUP)]
    if generates:
        counted = "every layer matrix, attention scores and values, the LM head (evaluation.measure.speed)"
        rows.append(Measurement(f"multiply-adds per token (decoding at {MACS_CONTEXT} tokens of context)",
                                per_token_flops(model, MACS_CONTEXT) / 2, "", False, model=label, group=GROUP,
                                details={"context": MACS_CONTEXT, "counted": counted}))
    rows.append(Measurement("weight memory", weight_bytes(model) / _MIB, "MiB", False, model=label, group=GROUP,
                            details=sparse))
    rows.append(Measurement(f"peak memory while generating ({new_tokens} tokens)" if generates
                            else f"peak memory of one pass ({input_ids.shape[-1]} tokens)", peak / _MIB, "MiB", False,
                            model=label, group=GROUP, details=how))
    if generates:
        rows.append(Measurement(f"KV cache after generating ({new_tokens} tokens)", how["kv_cache_bytes"] / _MIB,
                                "MiB", False, model=label, group=GROUP,
                                details={"bytes": how["kv_cache_bytes"], "attention_layers": attention_layers(model)}))
    rows.append(Measurement("checkpoint size on disk", disk / _MIB, "MiB", False, model=label, group=GROUP))
    return rows
