"""The memory budget that loading obeys: ``LAYERCUT_MEMORY_BUDGET`` (``20GiB``), ``--memory_budget`` on the CLI.

A model whose weights fit in the budget (with :data:`prune.core.loading.MEMORY_HEADROOM` to spare) is loaded
whole; a larger one is loaded with as many layers as fit on the device and the rest read from its safetensors
files layer by layer as each pass reaches them (:mod:`prune.core.offload`). Without a budget, the device's
free memory is the budget.
"""

from __future__ import annotations

import os
import re

from prune.core.devices import available_memory_bytes
from prune.core.errors import InvalidInput, quoted

ENV = "LAYERCUT_MEMORY_BUDGET"
_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "kib": 2**10, "m": 10**6, "mb": 10**6, "mib": 2**20,
          "g": 10**9, "gb": 10**9, "gib": 2**30, "t": 10**12, "tb": 10**12, "tib": 2**40}
_AMOUNT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_bytes(text: str) -> int:
    """``"20GiB"``, ``"512 MB"`` or a plain number of bytes → bytes; a one-line message otherwise."""
    found = amount(text)
    if found is None:
        raise InvalidInput(f"Memory budget {quoted(text)} is not an amount: write it like 20GiB, 512MiB or 8GB.")
    return found


def amount(text: str) -> int | None:
    """``"20GiB"``, ``"512 MB"`` or a plain number of bytes → bytes; None where ``text`` is no positive amount."""
    match = _AMOUNT.match(str(text))
    unit = match and _UNITS.get(match.group(2).lower())
    return None if not match or unit is None or float(match.group(1)) <= 0 else int(float(match.group(1)) * unit)


def configured_budget(given: str | int | None = None) -> int | None:
    """The budget someone set, in bytes: ``given`` (the CLI's), else ``LAYERCUT_MEMORY_BUDGET``; None if neither."""
    if isinstance(given, int):
        return given
    text = given if given not in (None, "") else os.environ.get(ENV, "").strip()
    return parse_bytes(text) if text else None


def memory_budget(device: str, given: str | int | None = None) -> int:
    """The budget in bytes: the one set (:func:`configured_budget`), else the device's free memory."""
    found = configured_budget(given)
    return found if found is not None else available_memory_bytes(device)
