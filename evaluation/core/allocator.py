"""Keep a shared server's memory near what it holds: bound glibc's arenas, hand freed memory back after each job.

Model weights, variants and activations are CPU tensors that glibc's ``malloc`` serves. Two of
its defaults let a server's resident memory grow far past what it holds (a variant cache kept
within budget, yet several times that resident after a few rounds of visitors):

* One arena per thread, up to 8 per core. Gradio runs each event in one of its worker threads,
  so each visitor's builds come from its own arena; what an evicted variant frees stays in the
  arena that served it, where other threads' builds cannot reuse it.
* A dynamic mmap threshold: a large block is mmapped (and unmapped when freed) only until the
  first such free, which raises the threshold to that block's size (up to 32 MiB). After that,
  the matrices of a small model come from arena heaps, whose freed middles glibc keeps.

What LayerCut does:

* :func:`release` after every job (``JobRunner.run``): ``malloc_trim(0)`` hands the free pages
  of every arena back to the system. This is what brings a server back to its baseline plus
  what its caches hold. It takes the time to unmap what the job freed (tens of milliseconds
  for a variant of the default model, next to nothing when a job freed nothing); the next
  build faults its pages in afresh, a small part of its time.
* ``M_ARENA_MAX = 2``, once per process (:func:`configure`): jobs run one at a time per device
  (``jobs.py``), so one arena serves the running job and one the rest (the event loop, streams);
  memory freed between trims is found again by the next job instead of waiting in one of
  dozens of arenas, and a trim has few to walk.
* The mmap threshold is left dynamic. Fixed low (256 KiB) it bounds memory without any trim,
  but every block that large then costs fresh page faults: builds and forward passes slow down
  markedly. Fixed at 4 MiB it still slowed builds (their temporaries are that large) and bounded
  nothing for the default model, whose matrices are smaller. Blocks over 32 MiB (a 1B model's
  matrices) are mmapped either way. ``python -m benchmarks.server_memory --mmap-kib 256 4096`` measures it.

An operator's own ``MALLOC_ARENA_MAX`` is left as it is. Where the C library is not glibc (macOS,
Windows, musl) :func:`configure` and :func:`release` do nothing.
"""

from __future__ import annotations

import ctypes
import functools
import os
import platform
import sys

ARENA_MAX = 2
_M_ARENA_MAX = -8  # mallopt's parameter number (malloc.h)


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    """glibc, where the process runs on it (mallopt and malloc_trim are its own)."""
    if not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc":
        return None
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None


@functools.cache  # once per process: a second Backend changes nothing
def configure() -> bool:
    """Bound glibc's arenas (see the module docstring) before worker threads start; whether glibc took it."""
    libc = _glibc()
    if libc is None or "MALLOC_ARENA_MAX" in os.environ:
        return False
    return libc.mallopt(_M_ARENA_MAX, ARENA_MAX) == 1


def release() -> None:
    """Return the free pages of every malloc arena to the system (after a job freed what it built)."""
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)
