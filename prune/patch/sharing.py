"""One calibration pass for many linear patches of the same model: the frontier's patched cuts at every size.

A least-squares patch fits on the sums XᵀX, XᵀY, ΣY² of its blocks, read on the uncut model's activations by one
forward pass of the calibration up to the block's end (:func:`prune.patch.replaceme.collect`). Within
:func:`sharing`, the first such patch of ``model`` reads in its pass the sums of every block planned there (the pass
runs to the deepest block's end) and keeps them, on the CPU, for the others, which then read nothing. Each block's
sums are computed exactly as in a pass of its own (the same batches, in the same order; the layers before a block
do not depend on where the pass stops), so each patch is the same. A cosine patch reads every token's rows, not
sums, and is never shared. What is kept costs 2·D² float64 numbers a block (5 MiB on the default model, 256 MiB at
4,096 wide), for the blocks of the sharing's plan only, until it closes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

import torch
from torch import nn

from prune.core.calibration import Calibration
from prune.core.surgery import index_runs

Block = tuple[int, int]
_LOCK = threading.Lock()
_PLANNED: dict[int, list[set[Block]]] = {}  # id(model) → the blocks each open sharing planned
_KEPT: dict[tuple, dict[Block, dict]] = {}  # (id(model), id(tokenizer), calibration) → block → sums


@contextmanager
def sharing(model: nn.Module, cuts: Iterable[Iterable[int]]) -> Iterator[None]:
    """While open, the patches of ``model`` share one calibration pass over the blocks of every cut in ``cuts``
    (each the layers it removes, in ``model``'s numbering); the sums kept go when the last sharing of it closes."""
    planned = {block for layers in cuts for block in index_runs(layers) if block[0] > 0}  # s = 0 cannot be patched
    with _LOCK:
        _PLANNED.setdefault(id(model), []).append(planned)
    try:
        yield
    finally:
        with _LOCK:
            _PLANNED[id(model)].remove(planned)
            if not _PLANNED[id(model)]:
                del _PLANNED[id(model)]
                for key in [k for k in _KEPT if k[0] == id(model)]:
                    del _KEPT[key]


def sums(model: nn.Module, tokenizer, blocks: list[Block], calibration: Calibration,
         read: Callable[[list[Block]], dict]) -> dict:
    """{block: sums} for ``blocks``: ``read(blocks)`` outside a sharing of ``model``; within one, the sums kept, and
    for any not kept yet one ``read`` of them and of every planned block not kept (kept in turn)."""
    with _LOCK:
        planned = set().union(*_PLANNED.get(id(model), ()))
        kept = _KEPT.setdefault((id(model), id(tokenizer), calibration), {}) if planned else None
        missing = None if kept is None else [b for b in blocks if b not in kept]
    if kept is None:
        return read(blocks)
    if missing:
        found = read(sorted(set(missing) | planned - kept.keys()))
        with _LOCK:
            kept.update({block: {k: v.cpu() if torch.is_tensor(v) else v for k, v in part.items()}
                         for block, part in found.items()})
    return {block: kept[block] for block in blocks}
