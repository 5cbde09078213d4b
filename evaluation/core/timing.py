"""Timing primitives every measurement shares: a block's wall time on any device, a model's rates here, and what
"here" is."""

from __future__ import annotations

import functools
import os
import platform
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from prune.core.devices import cpu_bfloat16_native


@dataclass(frozen=True)
class Rates:
    """What one model did on this machine (``evaluation.measure.speed.probe_rates``; what estimates divide by)."""

    forward_tokens_per_s: float  # prompt tokens through one forward pass (a prefill), per second
    decode_s_per_token: float  # one decode step (one new token after a cached prompt), seconds


class Timer:
    """Wall time of a block: CUDA events (then a synchronise) on CUDA, perf_counter on CPU."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.ms = 0.0

    def __enter__(self):
        if self.cuda:
            self._start, self._end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            self._start.record()
        else:
            self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        if self.cuda:
            self._end.record()
            torch.cuda.synchronize()
            self.ms = self._start.elapsed_time(self._end)
        else:
            self.ms = (time.perf_counter() - self._t0) * 1000
        return False


@functools.cache
def machine() -> str:
    """CPU cores, processor and the vector instructions PyTorch's CPU kernels use, e.g. '2 CPU cores, AMD EPYC, x86_64,
    AVX512 (bfloat16 native)': the same processor name covers machines whose quantized kernels run at different rates
    (read once: the rates' cache key asks often)."""
    name = platform.processor()
    try:
        name = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                     if line.startswith("model name")), name)
    except OSError:
        pass
    vector = torch.backends.cpu.get_cpu_capability()
    if cpu_bfloat16_native():
        vector += " (bfloat16 native)"
    return ", ".join(part for part in (f"{os.cpu_count()} CPU cores", name, platform.machine(), vector) if part)
