"""The next-token loss without whole-sequence logits: the LM head applied to a chunk of positions at a time.

``model(input_ids, labels=…)`` materialises logits of [N, T, V] floats, then their log-softmax and, for a
backward pass, their gradient: for a 262k-token vocabulary (Gemma 3) that is several times the weights of a
small model. Here the model runs with ``logits_to_keep=1`` (its head on the last position only), the final
hidden states [N, T, D] are read at its final norm, and the head, the model's own logit transform (Gemma's
soft-capping, Granite's scaling) and the cross-entropy run on a chunk of positions at a time (64 MiB of
logits; all at once when the whole sequence's logits take at most 256 MiB, where chunks would only add
recomputation). With gradients, each chunk is checkpointed: the backward pass recomputes one chunk's logits
at a time.

The transform is checked, not assumed: the last position's logits computed here must equal the model's own,
else the whole-sequence computation is used (an architecture with a transform not known here).
"""

from __future__ import annotations

import inspect

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from prune.core.architectures import final_norm

CHUNK_BYTES = 64 * 2**20  # one chunk's float32 logits: 64 positions at V = 262k, 341 at 49k (a few such live at once)
WHOLE_BYTES = 256 * 2**20  # logits up to this size are computed in one pass: chunks would only add recomputation


def head_logits(model: nn.Module, hidden: torch.Tensor, head: nn.Module | None = None) -> torch.Tensor:
    """The model's logits for final hidden states: its head (or ``head``, a copy of it), then its own transform,
    in float32."""
    logits = (head or model.get_output_embeddings())(hidden).float()
    config = model.config
    if getattr(config, "logits_scaling", None):  # Granite
        logits = logits / config.logits_scaling
    if getattr(config, "final_logit_softcapping", None):  # Gemma 2 and 3
        cap = config.final_logit_softcapping
        logits = torch.tanh(logits / cap) * cap
    return logits


def _chunk_nll(model: nn.Module, hidden: torch.Tensor, targets: torch.Tensor, head: nn.Module | None = None):
    return nn.functional.cross_entropy(head_logits(model, hidden, head), targets, reduction="sum")


def summed_nll(model: nn.Module, input_ids: torch.Tensor, chunk: int | None = None) -> tuple[torch.Tensor, int]:
    """(Σ next-token NLL over the [N, T] windows, positions predicted); differentiable when grad is enabled.

    ``chunk`` positions at a time (None: all at once up to :data:`WHOLE_BYTES` of logits, else as many as
    :data:`CHUNK_BYTES` hold)."""
    final = final_hidden(model, input_ids)
    if final is None:  # an unknown logit transform: the plain way
        logits = model(input_ids=input_ids, use_cache=False).logits[:, :-1].float()
        targets = input_ids[:, 1:].flatten().to(logits.device)
        return nn.functional.cross_entropy(logits.flatten(0, 1), targets, reduction="sum"), targets.numel()
    return head_nll(model, final, input_ids, chunk)


def final_hidden(model: nn.Module, input_ids: torch.Tensor) -> torch.Tensor | None:
    """The final norm's output [N, T, D] for ``input_ids`` (the head run on the last position only), or None when the
    model's logit transform is not one :func:`head_logits` knows (then only whole-sequence logits are right)."""
    found: list[torch.Tensor] = []
    hook = final_norm(model).register_forward_hook(lambda _m, _a, out: found.append(out))
    try:
        own = model(input_ids=input_ids, use_cache=False, **last_logits_only(model)).logits[:, -1].float()
    finally:
        hook.remove()
    return found[-1] if transform_known(model, found[-1][:, -1], own) else None


def chunk_positions(positions: int, vocabulary: int, chunk: int | None = None) -> int:
    """Positions per chunk of logits: ``chunk``, or all of them up to :data:`WHOLE_BYTES`, else :data:`CHUNK_BYTES`."""
    if chunk is not None:
        return chunk
    return positions if positions * vocabulary * 4 <= WHOLE_BYTES else max(1, CHUNK_BYTES // (4 * vocabulary))


def last_logits_only(model: nn.Module) -> dict:
    """The forward argument that applies the head to the last position only, where the model takes it."""
    return {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(model.forward).parameters else {}


def transform_known(model: nn.Module, last: torch.Tensor, own: torch.Tensor, head: nn.Module | None = None) -> bool:
    """Whether the logits computed here for the last position's final hidden states equal the model's own."""
    with torch.no_grad():
        return torch.allclose(head_logits(model, last, head), own, rtol=1e-4, atol=1e-4)


def head_nll(model: nn.Module, final: torch.Tensor, input_ids: torch.Tensor, chunk: int | None = None,
             head: nn.Module | None = None) -> tuple[torch.Tensor, int]:
    """(Σ next-token NLL, positions) from the final norm's output ``final`` [N, T, D], the head on ``chunk``
    positions at a time (see :func:`summed_nll`); ``head``: a copy of the model's head to use instead."""
    hidden = final[:, :-1].flatten(0, 1)  # [N·(T−1), D]: every position that predicts a next token
    targets = input_ids[:, 1:].flatten().to(hidden.device)
    vocabulary = (head or model.get_output_embeddings()).out_features
    total = hidden.new_zeros((), dtype=torch.float32)
    chunk = chunk_positions(hidden.shape[0], vocabulary, chunk)
    for start in range(0, hidden.shape[0], chunk):
        part, wanted = hidden[start:start + chunk], targets[start:start + chunk]
        if torch.is_grad_enabled() and chunk < hidden.shape[0]:
            total = total + checkpoint(_chunk_nll, model, part, wanted, head, use_reentrant=False)
        else:
            total = total + _chunk_nll(model, part, wanted, head)
    return total, targets.numel()


def mean_loss(model: nn.Module, input_ids: torch.Tensor, chunk: int | None = None) -> torch.Tensor:
    """The mean next-token loss over ``input_ids`` [N, T], as ``model(input_ids, labels=input_ids).loss``."""
    total, count = summed_nll(model, input_ids, chunk)
    return total / count
