"""Memory: parameters, weight bytes, peak memory while generating, and the checkpoint size on disk.

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

import ctypes
import shutil
import tempfile
import threading
from pathlib import Path

import psutil
import torch

from prune.errors import InvalidInput
from prune.paths import cache_root

from .measurement import Measurement

GROUP = "memory"
_MIB = 2**20


def num_params(model) -> int:
    """Parameters, each shared (tied) tensor counted once."""
    return sum(p.numel() for p in model.parameters())


def weight_bytes(model) -> int:
    """Bytes of the model's parameters, counting each tensor in memory once."""
    seen: dict[int, int] = {}
    for p in model.parameters():
        seen[p.data_ptr()] = p.numel() * p.element_size()
    return sum(seen.values())


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


@torch.no_grad()
def _generate(model, input_ids: torch.Tensor, new_tokens: int) -> None:
    pad = getattr(model.generation_config, "pad_token_id", None) or getattr(model.generation_config, "eos_token_id", 0)
    model.generate(input_ids, attention_mask=torch.ones_like(input_ids), max_new_tokens=new_tokens,
                   min_new_tokens=new_tokens, do_sample=False, pad_token_id=pad)


def peak_generation_bytes(model, input_ids: torch.Tensor, new_tokens: int = 64) -> tuple[int, dict]:
    """(weights + peak extra memory while greedily generating ``new_tokens``, how it was measured)."""
    device = next(model.parameters()).device
    input_ids = input_ids.to(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        _generate(model, input_ids, new_tokens)
        torch.cuda.synchronize(device)
        extra = torch.cuda.max_memory_allocated(device) - base
        how = "cuda max_memory_allocated"
    elif _reset_peak_rss():
        base = _proc_status("VmRSS")
        _generate(model, input_ids, new_tokens)
        extra = _proc_status("VmHWM") - base
        how = "VmHWM after clear_refs"
    else:
        base = psutil.Process().memory_info().rss
        with _RssSampler() as sampler:
            _generate(model, input_ids, new_tokens)
        extra = sampler.peak - base
        how = "RSS sampled every 1 ms"
    extra = max(int(extra), 0)
    return weight_bytes(model) + extra, {"extra_bytes": extra, "method": how, "device": str(device),
                                          "prompt_tokens": int(input_ids.shape[-1]), "new_tokens": new_tokens}


def save_checkpoint(model, tokenizer, folder: Path) -> Path:
    """Save a normal Hugging Face folder (safetensors + config, and the tokenizer if given)."""
    try:
        model.save_pretrained(folder)
        if tokenizer is not None:
            tokenizer.save_pretrained(folder)
    except (ValueError, NotImplementedError, RuntimeError) as err:  # e.g. quantized weights
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise InvalidInput(f"This model cannot be saved as a checkpoint: {first}") from None
    return Path(folder)


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file())


def checkpoint_bytes(model) -> int:
    """Size on disk of the model saved with ``save_pretrained`` (weights and config), measured by saving it."""
    scratch = cache_root() / "tmp"
    scratch.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(dir=scratch, prefix="checkpoint-"))
    try:
        return folder_bytes(save_checkpoint(model, None, folder))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def measure_memory(model, input_ids: torch.Tensor, *, label: str, new_tokens: int = 64,
                   saved_bytes: int | None = None) -> list[Measurement]:
    """The memory figures of one model; ``saved_bytes`` skips re-saving an exported checkpoint."""
    peak, how = peak_generation_bytes(model, input_ids, new_tokens)
    disk = saved_bytes if saved_bytes is not None else checkpoint_bytes(model)
    return [
        Measurement("parameters", float(num_params(model)), "", False, model=label, group=GROUP),
        Measurement("weight memory", weight_bytes(model) / _MIB, "MiB", False, model=label, group=GROUP),
        Measurement(f"peak memory while generating ({new_tokens} tokens)", peak / _MIB, "MiB", False, model=label,
                    group=GROUP, details=how),
        Measurement("checkpoint size on disk", disk / _MIB, "MiB", False, model=label, group=GROUP),
    ]
