"""Taylor+ (Shortened LLaMA, Kim et al. 2024): first-order weight saliency per layer.

As in the authors' code, a layer scores Σ |W ⊙ ∂L/∂W| over its weights (matrices and norm
scales, no biases) for the mean loss of one batch of calibration windows, in float32.

Peak memory stays near the weights: a decoder layer keeps only its input for the backward
pass and recomputes the rest there; each weight's gradient becomes its score the moment it is
accumulated and is then freed; nothing outside the decoder layers gets a gradient at all; the
LM head's logits exist for a chunk of positions at a time (``prune.core.chunked_loss``), so a
large vocabulary costs one chunk's logits, not the whole batch's. A model read from disk (larger than the
memory budget) is scored one layer at a time, backwards (:func:`saliency_from_disk`), with the same gradients.
The whole batch goes through one backward pass, because |Σ g| is not Σ |g|: summing
per-window scores would change the method, and summing per-window gradients would need a
gradient-sized buffer per weight.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial

import numpy as np
import torch
from torch.utils.checkpoint import checkpoint

from prune.core.architectures import decoder_layers, final_norm
from prune.core.chunked_loss import head_nll, last_logits_only, mean_loss, transform_known
from prune.core.devices import input_device
from prune.core.hidden import _hidden_arg, _hidden_out
from prune.core.offload import is_offloaded, materialized, refuse
from prune.core.sequential import other_arguments
from prune.depth.result import ImportanceResult, blocks_from_layers
from prune.depth.methods import WINDOWS, register

KEEP_FIRST, KEEP_LAST = 4, 2  # the "+" heuristic: never remove these layers


@register("taylor", "Taylor+ (Shortened LLaMA)", allowed={"max_samples": WINDOWS})
def taylor(ctx, *, plus: bool = True, max_samples: int = 8) -> ImportanceResult:
    """Σ |W ⊙ ∂L/∂W| over each layer's weights from one backward pass; "+" protects the first 4 and last 2."""
    input_ids = ctx.input_ids[:max_samples].to(input_device(ctx.model))
    saliency = saliency_from_disk if is_offloaded(ctx.model) else layer_saliency
    scores = saliency(ctx.model, input_ids)
    count = len(scores)
    protected = set(range(min(KEEP_FIRST, count))) | set(range(max(count - KEEP_LAST, 0), count)) if plus else set()
    if len(protected) >= count:
        protected = set()
    return ImportanceResult(
        "taylor", blocks_from_layers(scores, protected), "Σ |W · ∂L/∂W|", layer_scores=scores,
        params={"plus": plus, "max_samples": max_samples, "protected": sorted(protected)},
    )


def scored_weights(layer: torch.nn.Module) -> list[torch.nn.Parameter]:
    """The tensors Taylor+ scores in a layer: every parameter named ``weight`` (no biases), as the authors do."""
    return [p for name, p in layer.named_parameters() if "weight" in name.rsplit(".", 1)[-1]]


def layer_saliency(model: torch.nn.Module, input_ids: torch.Tensor) -> np.ndarray:
    """[L] Σ |W ⊙ ∂L/∂W| per decoder layer for the mean LM loss on ``input_ids`` [N, T]."""
    layers = decoder_layers(model)
    owners: dict[torch.nn.Parameter, list[int]] = {}
    for index, layer in enumerate(layers):
        for weight in scored_weights(layer):
            owners.setdefault(weight, []).append(index)
    totals = np.zeros(len(layers))

    def consume(weight: torch.Tensor) -> None:
        """Turn the gradient into its score at once and free it: one gradient alive at a time."""
        saliency = torch.mul(weight.detach().float(), weight.grad.float()).abs_().sum(dtype=torch.float32).item()
        for index in owners[weight]:
            totals[index] += saliency
        weight.grad = None

    with _only_these_need_grad(model, owners), _recomputed(layers), torch.enable_grad():
        handles = [w.register_post_accumulate_grad_hook(consume) for w in owners]
        try:
            mean_loss(model, input_ids).backward()  # the LM head's logits a chunk of positions at a time
        finally:
            for handle in handles:
                handle.remove()
    return totals


def saliency_from_disk(model: torch.nn.Module, input_ids: torch.Tensor) -> np.ndarray:
    """:func:`layer_saliency` for a model read from its files, one decoder layer in memory at a time.

    A pass without gradients keeps each layer's input (and its masks and positions) and the final norm's;
    the loss's gradient at the last layer's output comes from the final norm and the head (copies, the head on
    a chunk of positions at a time); then, from the last layer to the first, each layer is read in alone,
    recomputes its pass from its kept input and backpropagates the gradient it receives, which gives its
    weights' gradients (scored, then freed) and the gradient for the layer before. The same gradients as one
    backward pass through the whole model, by the chain rule, layer by layer.
    """
    layers, device = decoder_layers(model), input_device(model)
    inputs: list[torch.Tensor] = []
    calls: list[tuple] = []
    last: list[torch.Tensor] = []

    def keep(_module, args, kwargs):
        inputs.append(_hidden_arg(args, kwargs).detach())
        calls.append(other_arguments(args, kwargs))

    handles = [layer.register_forward_pre_hook(keep, with_kwargs=True) for layer in layers]
    handles.append(final_norm(model).register_forward_hook(lambda _m, args, _out: last.append(args[0].detach())))
    try:
        with torch.no_grad():
            own = model(input_ids=input_ids, use_cache=False, **last_logits_only(model)).logits[:, -1].float()
    finally:
        for handle in handles:
            handle.remove()
    norm, head = materialized(final_norm(model), device), materialized(model.get_output_embeddings(), device)
    grad = last[0].requires_grad_(True)
    with torch.enable_grad():
        final = norm(grad)
        if not transform_known(model, final[:, -1].detach(), own, head):
            refuse("Taylor+ on a head whose logit transform LayerCut does not know", model)
        total, count = head_nll(model, final, input_ids, head=head)
        (total / count).backward()
    grad, totals = grad.grad, np.zeros(len(layers))
    for index in reversed(range(len(layers))):
        layer = materialized(layers[index], device)
        weights = scored_weights(layer)
        for weight in weights:
            weight.requires_grad_(True)
        hidden = inputs[index].requires_grad_(index > 0)
        args, kwargs = calls[index]
        with torch.enable_grad():
            torch.autograd.backward(_hidden_out(layer(hidden, *args, **kwargs)), grad)
        totals[index] = sum(torch.mul(w.detach().float(), w.grad.float()).abs_().sum(dtype=torch.float32).item()
                            for w in weights)
        grad = hidden.grad
        del layer, weights
    return totals


@contextmanager
def _only_these_need_grad(model: torch.nn.Module, weights) -> Iterator[None]:
    """Gradients for ``weights`` only; leave every (possibly shared) parameter as we found it."""
    params = list(model.parameters())
    saved = [(p.requires_grad, p.grad) for p in params]
    for p in params:
        p.grad = None
        p.requires_grad_(p in weights)
    try:
        yield
    finally:
        for p, (needs_grad, grad) in zip(params, saved):
            p.requires_grad_(needs_grad)
            p.grad = grad


@contextmanager
def _recomputed(layers) -> Iterator[None]:
    """Each layer keeps only its inputs for backward and recomputes its activations there.

    The model stays in eval mode (no dropout), so the recomputation is exact; the wrapper is an
    instance attribute that shadows ``forward`` and is removed again afterwards.
    """
    before = [layer.__dict__.get("forward") for layer in layers]  # accelerate's hooks live here
    for layer in layers:
        layer.forward = partial(checkpoint, layer.forward, use_reentrant=False)
    try:
        yield
    finally:
        for layer, forward in zip(layers, before):
            if forward is None:
                del layer.forward
            else:
                layer.forward = forward
