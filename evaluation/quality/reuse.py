"""Score pruned models from the original's residual stream instead of from scratch.

A model cut at [s, e) computes exactly what the original computes up to layer s. So the
original is run once on a set of packed batches (evaluation.quality.fast_lm) while hooks keep its
residual h_s (the input of layer s) for the starts needed; each cut then runs only
layers e…L-1 and the head, fed h_s. Kept states are bounded by a byte budget: past it, a
cut's batch is recomputed (the pair path) or the original's prefix is rerun for the
starts that did not fit (the many-cuts path).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial

import torch
from torch import nn

from prune.core.devices import input_device
from prune.core.architectures import CAUSAL, decoder_layers, kind_of, layer_config
from prune.core.hidden import StopForward, inject_hidden, run_until_stopped
from prune.core.surgery import check_block, cut, remove_layers

from evaluation.quality.fast_lm import Answer, FastLM, PackedBatch, head_input, score_batch

DEFAULT_BUDGET_BYTES = 512 * 2**20
Cut = tuple[int, int]  # [start, end), end exclusive
Answers = list[Answer]  # per pair of a batch, in batch.pairs order


class HiddenStore:
    """Residual states per (batch key, layer), refusing what would exceed ``budget_bytes``."""

    def __init__(self, budget_bytes: int = DEFAULT_BUDGET_BYTES):
        self.budget_bytes = budget_bytes
        self.used_bytes = 0
        self.refused = 0  # states not kept (their batches get recomputed)
        self._states: dict[tuple[bytes, int], torch.Tensor] = {}

    def put(self, key: bytes, layer: int, hidden: torch.Tensor) -> bool:
        size = hidden.numel() * hidden.element_size()
        if self.used_bytes + size > self.budget_bytes:
            self.refused += 1
            return False
        self._states[(key, layer)] = hidden
        self.used_bytes += size
        return True

    def pop(self, key: bytes, layer: int) -> torch.Tensor | None:
        hidden = self._states.pop((key, layer), None)
        if hidden is not None:
            self.used_bytes -= hidden.numel() * hidden.element_size()
        return hidden

    def clear(self) -> None:
        self._states.clear()
        self.used_bytes = 0


# ---------------------------------------------------------------- hooks and views


@contextmanager
def capture_inputs(model: nn.Module, layers: Iterable[int], sink: Callable[[int, torch.Tensor], None],
                   stop_after: int | None = None):
    """Hand the input of each listed layer (h_l, [B, T, D]) to ``sink``; optionally stop the pass there."""
    modules = decoder_layers(model)

    def hook_for(layer: int):
        def hook(_module, args, kwargs):
            sink(layer, (args[0] if args else kwargs["hidden_states"]).detach().clone())
            if layer == stop_after:
                raise StopForward

        return hook

    handles = [modules[layer].register_forward_pre_hook(hook_for(layer), with_kwargs=True) for layer in set(layers)]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def suffix_view(model: nn.Module, end: int) -> nn.Module:
    """A weight-sharing view that resumes after layer ``end - 1``: layers end…L-1, norm and head.

    When the cut reaches the last layer nothing is left to run, so the view keeps the last
    layer and `resume_head_input` overrides its output instead of feeding its input.
    """
    count = len(decoder_layers(model))
    view = remove_layers(model, range(min(end, count - 1)))
    view.layercut_resume_replaces_output = end >= count
    return view


def resume_head_input(view: nn.Module, batch: PackedBatch, hidden: torch.Tensor) -> torch.Tensor:
    """The head input of the cut model for ``batch``, its pre-cut residual ``hidden`` given."""
    if not getattr(view, "layercut_resume_replaces_output", False):
        with inject_hidden(view, hidden):
            return head_input(view, batch)

    def replace(_module, _args, output):
        value = hidden.to(output[0].device if isinstance(output, tuple) else output.device)
        return (value, *output[1:]) if isinstance(output, tuple) else value

    handle = decoder_layers(view)[0].register_forward_hook(replace)
    try:
        return head_input(view, batch)
    finally:
        handle.remove()


# ---------------------------------------------------------------- the pair path (lm-eval)


def capture_runner(model: nn.Module, start: int, store: HiddenStore):
    """A FastLM runner for the original that also keeps h_start of every batch it scores."""

    def run(batch: PackedBatch) -> torch.Tensor:
        key = batch.key()
        with capture_inputs(model, [start], lambda _layer, h: store.put(key, start, h)):
            return head_input(model, batch)

    return run


def resume_runner(model: nn.Module, start: int, end: int, store: HiddenStore, pruned: nn.Module):
    """A FastLM runner for the cut [start, end): resumes from a kept h_start, else runs ``pruned``."""
    view = suffix_view(model, end)

    def run(batch: PackedBatch) -> torch.Tensor:
        hidden = store.pop(batch.key(), start)
        return head_input(pruned, batch) if hidden is None else resume_head_input(view, batch, hidden)

    return run


def make_fast_pair(model: nn.Module, tokenizer, start: int, end: int, batch_size: int = 16,
                   memory_budget_bytes: int = DEFAULT_BUDGET_BYTES) -> tuple[FastLM, FastLM]:
    """Two scorers for lm-eval: the original, then the cut [start, end) resuming from it.

    Evaluate the first, then the second on the same tasks and limit; the second runs only
    layers end…L-1 for each batch the first kept (within the budget) and all of the cut
    model otherwise. Results equal a plain evaluation of ``prune.cut(model, start, end)``.
    """
    check_block(len(decoder_layers(model)), start, end)
    store = HiddenStore(memory_budget_bytes)
    pruned = cut(model, start, end)
    original = FastLM(model, tokenizer, batch_size, runner=capture_runner(model, start, store))
    resumed = FastLM(pruned, tokenizer, batch_size, runner=resume_runner(model, start, end, store, pruned))
    resumed.hidden_store = original.hidden_store = store
    return original, resumed


def paired_scorers(model: nn.Module, tokenizer, sides, missing: dict[str, tuple], scorer: str, batch_size: int) -> dict:
    """Scorers for the original (``sides[0]``) and the first side that is one contiguous cut, sharing the prefix."""
    if scorer != "fast" or not missing[sides[0].label] or kind_of(model) != CAUSAL:  # an encoder: MaskedLM, no reuse
        return {}
    for side in sides[1:]:
        cut = side.recipe.depth_cut
        if (len(side.recipe.steps) == 1 and cut is not None and cut.span
                and missing[side.label] == missing[sides[0].label]):
            original, pruned = make_fast_pair(model, tokenizer, *cut.span, batch_size)
            return {sides[0].label: original, side.label: pruned}
    return {}


# ---------------------------------------------------------------- many cuts (the sweep)


def score_cuts(model: nn.Module, batches: Sequence[PackedBatch], cuts: Sequence[Cut], *,
               memory_budget_bytes: int = DEFAULT_BUDGET_BYTES, softmax_dtype=None,
               progress: Callable[[float, str], None] | None = None) -> tuple[list[Answers], dict[Cut, list[Answers]]]:
    """Answers of the original and of every cut, per batch, running the original's prefix once
    (:func:`scoring_cuts`, all at once)."""
    found = dict(scoring_cuts(model, batches, cuts, memory_budget_bytes=memory_budget_bytes,
                              softmax_dtype=softmax_dtype, progress=progress))
    return found[None], {c: found[c] for c in cuts}


def scoring_cuts(model: nn.Module, batches: Sequence[PackedBatch], cuts: Sequence[Cut], *,
                 memory_budget_bytes: int = DEFAULT_BUDGET_BYTES, softmax_dtype=None,
                 progress: Callable[[float, str], None] | None = None) -> Iterator[tuple[Cut | None, list[Answers]]]:
    """(None, the original's answers per batch), then (cut, its answers) as each cut's last batch is scored.

    Batches are taken in chunks whose kept states fit the budget; within a chunk the
    original runs once (capturing every needed h_s) and each cut resumes from its h_s. A
    batch too big for all starts at once reruns the original's prefix per group of starts.
    With one chunk (a small task) the cuts finish one after another; with more, in the last.
    """
    count = len(decoder_layers(model))
    for start, end in cuts:
        check_block(count, start, end)
    starts = sorted({s for s, _ in cuts})
    views = {c: suffix_view(model, c[1]) for c in cuts}
    width = layer_config(model).hidden_size * next(model.parameters()).element_size()
    answers: dict[Cut | None, list[Answers | None]] = {c: [None] * len(batches) for c in [None, *cuts]}
    left = {c: len(batches) for c in answers}  # batches each still needs
    if not batches:
        yield from ((c, []) for c in answers)
        return
    total, done = len(batches) * (1 + len(cuts)), 0
    for chunk in _chunks(batches, len(starts) * width, memory_budget_bytes):
        fit = max(1, memory_budget_bytes // (max(batches[i].num_tokens for i in chunk) * width))
        for g in range(0, len(starts), fit):
            group = starts[g: g + fit]
            kept: dict[tuple[int, int], torch.Tensor] = {}
            for i in chunk:
                sink = partial(_keep, kept, i)
                if g == 0:  # the full pass also scores the original
                    with capture_inputs(model, group, sink):
                        answers[None][i] = score_batch(model, batches[i], head_input(model, batches[i]),
                                                       softmax_dtype)
                    done += 1
                else:  # over budget: rerun only the prefix up to the last start of this group
                    with capture_inputs(model, group, sink, stop_after=group[-1]):
                        _run_prefix(model, batches[i])
            if g == 0:
                left[None] -= len(chunk)
                if not left[None]:
                    yield None, answers[None]
            for c in (c for c in cuts if c[0] in group):
                for i in chunk:
                    hidden = kept[(i, c[0])]
                    answers[c][i] = score_batch(model, batches[i], resume_head_input(views[c], batches[i], hidden),
                                                softmax_dtype)
                    done += 1
                if progress:
                    progress(done / total, f"cut [{c[0]}, {c[1]})")
                left[c] -= len(chunk)
                if not left[c]:
                    yield c, answers[c]
            kept.clear()


def _keep(kept: dict, batch: int, layer: int, hidden: torch.Tensor) -> None:
    kept[(batch, layer)] = hidden


def _run_prefix(model: nn.Module, batch: PackedBatch) -> None:
    """Run the model until a hook raises StopForward."""
    with torch.no_grad():
        run_until_stopped(model, **batch.model_inputs(model.dtype, input_device(model)))


def _chunks(batches: Sequence[PackedBatch], bytes_per_token: int, budget: int):
    """Consecutive batch indices whose states at every start fit the budget (at least one)."""
    chunk, used = [], 0
    for i, batch in enumerate(batches):
        size = batch.num_tokens * bytes_per_token
        if chunk and used + size > budget:
            yield chunk
            chunk, used = [], 0
        chunk.append(i)
        used += size
    if chunk:
        yield chunk
