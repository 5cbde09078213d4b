"""Failures from deep inside torch, transformers or safetensors, turned into one-line user messages.

Out of memory, a truncated or missing weight file, a folder without a tokenizer: each has
a cause the user can act on, and a traceback hides it. Only failures recognised here are
converted; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

from prune.core.errors import BrokenModel, LayerCutError, OutOfMemory

log = logging.getLogger(__name__)

_LESS_MEMORY = ("Try a smaller model or a lower precision (bfloat16), fewer calibration samples or shorter windows, "
                "or stop other jobs using the memory.")
_SAVE_AGAIN = "Download or save the model again."


def user_error(err: BaseException, doing: str) -> LayerCutError | None:
    """The one-line error to show for ``err`` raised during ``doing`` (a noun phrase), or None if not recognised."""
    if isinstance(err, LayerCutError):
        return err
    text = str(err)
    reason = _first_line(err)
    if _out_of_memory(err, text):
        return OutOfMemory(f"Out of memory during {doing}{_tried(text)}. {_LESS_MEMORY}")
    if "unable to mmap" in text:
        return BrokenModel(f"During {doing}, a weight file could not be mapped into memory ({reason}): it may be "
                           f"incomplete or still being written. {_SAVE_AGAIN}")
    if type(err).__name__ == "SafetensorError" or "PytorchStreamReader failed" in text:
        return BrokenModel(f"During {doing}, a weight file turned out damaged or incomplete ({reason}). {_SAVE_AGAIN}")
    if "Couldn't instantiate the backend tokenizer" in text:
        return BrokenModel(f"During {doing}, no usable tokenizer was found: the folder needs its tokenizer files "
                           "(tokenizer.json and tokenizer_config.json) next to config.json. "
                           "Save the tokenizer there too.")
    if isinstance(err, OSError) and "no file named" in text:
        return BrokenModel(f"During {doing}, no weight file was found ({reason}). {_SAVE_AGAIN}")
    return None


@contextmanager
def as_user_errors(doing: str,
                   recognise: Callable[[Exception], LayerCutError | None] | None = None) -> Iterator[None]:
    """Re-raise recognised failures as their one-line error, without the chained traceback (logged at debug level);
    ``recognise``: the caller's own failures (a GGUF transformers cannot read), tried before the shared ones."""
    try:
        yield
    except LayerCutError:
        raise
    except Exception as err:  # MemoryError and torch.OutOfMemoryError are Exceptions; Ctrl-C passes through
        converted = (recognise(err) if recognise else None) or user_error(err, doing)
        if converted is None:
            raise
        log.debug("%s: %s", type(converted).__name__, doing, exc_info=err)
        raise converted from None


def _out_of_memory(err: BaseException, text: str) -> bool:
    """CPU allocators say "can't allocate memory" / "not enough memory"; CUDA and MPS say "out of memory"."""
    if isinstance(err, (MemoryError, torch.OutOfMemoryError)):
        return True
    return isinstance(err, RuntimeError) and bool(
        re.search(r"DefaultCPUAllocator|out of memory|Cannot allocate memory", text))


def _tried(text: str) -> str:
    """' (it tried to allocate 16.0 GiB)' when the message says how much, else ''."""
    if found := re.search(r"tried to allocate (\d+) bytes", text, re.IGNORECASE):
        return f" (it tried to allocate {int(found.group(1)) / 2**30:.1f} GiB)"
    if found := re.search(r"tried to allocate ([\d.]+ ?[KMGT]i?B)", text, re.IGNORECASE):
        return f" (it tried to allocate {found.group(1)})"
    return ""


def _first_line(err: BaseException) -> str:
    lines = str(err).strip().splitlines()
    return lines[0].strip().rstrip(".") if lines else type(err).__name__
