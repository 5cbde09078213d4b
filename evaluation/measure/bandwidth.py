"""The memory-bandwidth limit of a decoded token: how fast this device reads memory, and how many bytes a token reads.

Decoding one token at batch 1 reads every stored matrix once (and the KV cache), while its arithmetic is a few FLOPs
per weight: memory, not compute, bounds it. So the **floor** of a decode step is the bytes it must read divided by
the bandwidth, and a measured step's **share of the limit** is floor ÷ measured. Prefill and large batches do many
FLOPs per byte: their ideal stays a FLOPs ratio (``evaluation.measure.speed``).

* **Bandwidth** (:func:`bandwidth`): on a CPU, the sum of a 1 GiB float32 tensor with the threads torch uses (far
  beyond any cache), the best of a few runs after one to warm up; on CUDA the same sum timed with events. Measured
  once per process and device, then reused.
* **Bytes per decoded token** (:func:`decode_bytes`): every tensor the model holds as it stores it (parameters and
  buffers; a quantized weight's integers and scales, a 2:4 kernel form's kept half and metadata), each storage once, but
  the input embedding, of which a token reads one row per sequence (an int8 one: its int8 row and scale; a head tied to
  it is read whole: counted once, rows included); plus the KV cache at that context: keys and values of every layer that
  has attention, per sequence. A model whose weights are read from disk layer by layer has no such floor (its reads are
  the disk's).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import torch

from prune.core.experts import expert_read_shares
from prune.core.architectures import layer_config
from prune.core.offload import is_offloaded
from prune.core.storage import nbytes, parts
from prune.drop.sublayers import attention_layers

PROBE_BYTES = 2**30
PROBE_RUNS = 5


@dataclass(frozen=True)
class Bandwidth:
    """Bytes per second this device reads, and how that was measured."""

    bytes_per_s: float
    how: str

    def floor_ms(self, read_bytes: int) -> float:
        return 1000 * read_bytes / self.bytes_per_s


_FOUND: dict[str, Bandwidth] = {}
_LOCK = threading.Lock()


def bandwidth(device: torch.device) -> Bandwidth:
    """This process's measurement of ``device``'s read bandwidth (taken at the first call, then reused)."""
    key = str(device)
    with _LOCK:
        if key not in _FOUND:
            _FOUND[key] = _probe(torch.device(device))
        return _FOUND[key]


@torch.inference_mode()
def _probe(device: torch.device) -> Bandwidth:
    data = torch.ones(PROBE_BYTES // 4, dtype=torch.float32, device=device)
    cuda = device.type == "cuda"
    best = float("inf")
    for run in range(PROBE_RUNS + 1):  # the first warms up
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            data.sum()
            end.record()
            torch.cuda.synchronize(device)
            seconds = start.elapsed_time(end) / 1000
        else:
            started = time.perf_counter()
            data.sum()
            seconds = time.perf_counter() - started
        if run:
            best = min(best, seconds)
    del data
    threads = "CUDA events" if cuda else f"{torch.get_num_threads()} threads"
    return Bandwidth(PROBE_BYTES / best, f"the sum of 1 GiB of float32, best of {PROBE_RUNS} ({threads})")


def weights_read(model) -> int:
    """Bytes of weights one decoded token reads: all the model holds, each storage once, but the input embedding's
    rows (see :func:`decode_bytes`) and, in a mixture of experts, the experts a token is not routed to (it reads k of
    each layer's E: :func:`prune.core.experts.expert_read_shares`)."""
    embedding = model.get_input_embeddings().weight
    skipped = set() if _tied(model) else {t.data_ptr() for t in parts(embedding)}
    shares = expert_read_shares(model)
    seen: dict[int, float] = {}
    for tensor in [*model.parameters(), *model.buffers()]:
        for part in parts(tensor):
            if part.device.type != "meta" and part.data_ptr() not in skipped:
                seen[part.data_ptr()] = part.numel() * part.element_size() * shares.get(part.data_ptr(), 1.0)
    return round(sum(seen.values()))


def kv_bytes(model, context: int, batch: int = 1) -> int:
    """Keys and values of ``context`` positions for ``batch`` sequences, in every layer that has attention."""
    config = layer_config(model)
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    element = model.get_input_embeddings().weight.element_size()
    return 2 * attention_layers(model) * kv_heads * head_dim * int(context) * element * batch


def decode_bytes(model, context: int, batch: int = 1) -> int | None:
    """Bytes one decode step reads for ``batch`` sequences at ``context`` positions; None for a model read from
    disk layer by layer (its floor is the disk's)."""
    if is_offloaded(model):
        return None
    embedding = model.get_input_embeddings().weight
    rows = 0 if _tied(model) else batch * (nbytes(embedding) // embedding.shape[0])  # an int8 row with its scale
    return weights_read(model) + rows + kv_bytes(model, context, batch)


def _tied(model) -> bool:
    """Whether the LM head is the input embedding's matrix (read whole for the logits, so its rows come free)."""
    head = model.get_output_embeddings()
    embedding = {t.data_ptr() for t in parts(model.get_input_embeddings().weight)}  # an int8 one: values and scales
    return head is not None and any(p.data_ptr() in embedding for p in parts(head.weight))
