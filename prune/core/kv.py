"""Where the KV cache travels: transformers 5.24 renamed ``past_key_values`` to ``cache`` (arguments and outputs).

Both names are read here, so a cut model and the measurements work on either side of the rename.
"""

from __future__ import annotations

import dataclasses
import inspect

# how a decoder layer hands the cache to its attention block: 5.24's name, the older one, GPT-NeoX's own
_BLOCK_KEYWORDS = ("cache", "past_key_values", "layer_past")


def cache_passed(kwargs: dict):
    """The KV cache an attention block was called with, under whichever name this transformers uses; else None."""
    for name in _BLOCK_KEYWORDS:
        if kwargs.get(name) is not None:
            return kwargs[name]
    return None


def cache_swapped(kwargs: dict, cache) -> dict:
    """``kwargs`` with the KV cache they pass to a block (under whichever name) replaced by ``cache``."""
    return {name: cache if name in _BLOCK_KEYWORDS and value is not None else value for name, value in kwargs.items()}


def with_cache(model, cache) -> dict:
    """The keyword argument that passes ``cache`` to ``model``'s forward."""
    name = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    return {name: cache}


def cache_returned(output):
    """The KV cache a forward or ``generate`` returned (``cache`` from 5.24, ``past_key_values`` before)."""
    names = {field.name for field in dataclasses.fields(output)} if dataclasses.is_dataclass(output) else set()
    return getattr(output, "cache" if "cache" in names else "past_key_values", None)
