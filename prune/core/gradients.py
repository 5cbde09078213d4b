"""The decoder layers' weight gradients for the mean next-token loss, one weight's gradient alive at a time.

Used by the first-order Taylor criteria: Taylor+ (a layer's Σ |W ⊙ ∂L/∂W|, :mod:`prune.depth.methods.taylor`)
and LLM-Pruner's element-wise Taylor on coupled groups (:mod:`prune.width.taylor`). The caller names the
weights it reads in each layer and gets each one's gradient handed to ``consume(index, name, weight, grad)``
the moment it is complete; the gradient is freed right after.

Peak memory stays near the weights: a decoder layer keeps only its input for the backward pass and
recomputes the rest there; nothing outside the decoder layers gets a gradient at all; the LM head's logits
exist for a chunk of positions at a time (:mod:`prune.core.chunked_loss`). A model read from disk (larger
than the memory budget) is differentiated one layer at a time, backwards, with the same gradients. The whole
batch goes through one backward pass, because |Σ g| is not Σ |g|: summing per-window scores would change
the methods, and summing per-window gradients would need a gradient-sized buffer per weight.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from prune.core.architectures import decoder_layers, final_norm
from prune.core.chunked_loss import head_nll, last_logits_only, mean_loss, transform_known
from prune.core.devices import input_device
from prune.core.hidden import _hidden_arg, _hidden_out, forwards_replaced
from prune.core.offload import is_offloaded, materialized, refuse
from prune.core.sequential import other_arguments

Names = Callable[[nn.Module], list[str]]  # the parameter names, within a decoder layer, whose gradients are read
Consume = Callable[[int, str, torch.Tensor, torch.Tensor], None]  # (layer index, name, weight, its gradient)


def layer_gradients(model: nn.Module, input_ids: torch.Tensor, names: Names, consume: Consume, *,
                    what: str = "A gradient criterion") -> None:
    """Hand ``consume`` the gradient of the mean LM loss on ``input_ids`` [N, T] for each named weight of each
    decoder layer, in memory or, for a model read from its files, layer by layer (``what`` names the method in
    a refusal)."""
    if is_offloaded(model):
        _from_disk(model, input_ids, names, consume, what)
    else:
        _in_memory(model, input_ids, names, consume)


def _in_memory(model: nn.Module, input_ids: torch.Tensor, names: Names, consume: Consume) -> None:
    layers = decoder_layers(model)
    owners: dict[nn.Parameter, list[tuple[int, str]]] = {}
    for index, layer in enumerate(layers):
        for name in names(layer):
            owners.setdefault(layer.get_parameter(name), []).append((index, name))

    def done(weight: torch.Tensor) -> None:
        """Hand the complete gradient over at once and free it: one gradient alive at a time."""
        for index, name in owners[weight]:
            consume(index, name, weight.detach(), weight.grad)
        weight.grad = None

    with _only_these_need_grad(model, owners), _recomputed(layers), torch.enable_grad():
        handles = [w.register_post_accumulate_grad_hook(done) for w in owners]
        try:
            mean_loss(model, input_ids).backward()  # the LM head's logits a chunk of positions at a time
        finally:
            for handle in handles:
                handle.remove()


def _from_disk(model: nn.Module, input_ids: torch.Tensor, names: Names, consume: Consume, what: str) -> None:
    """:func:`_in_memory` for a model read from its files, one decoder layer in memory at a time.

    A pass without gradients keeps each layer's input (and its masks and positions) and the final norm's;
    the loss's gradient at the last layer's output comes from the final norm and the head (copies, the head on
    a chunk of positions at a time); then, from the last layer to the first, each layer is read in alone,
    recomputes its pass from its kept input and backpropagates the gradient it receives, which gives its
    weights' gradients (handed over, then freed) and the gradient for the layer before. The same gradients as
    one backward pass through the whole model, by the chain rule, layer by layer.
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
            refuse(f"{what} on a head whose logit transform LayerCut does not know", model)
        total, count = head_nll(model, final, input_ids, head=head)
        (total / count).backward()
    grad = grad.grad
    for index in reversed(range(len(layers))):
        layer = materialized(layers[index], device)
        read = {name: layer.get_parameter(name) for name in names(layer)}
        for weight in read.values():
            weight.requires_grad_(True)
        hidden = inputs[index].requires_grad_(index > 0)
        args, kwargs = calls[index]
        with torch.enable_grad():
            torch.autograd.backward(_hidden_out(layer(hidden, *args, **kwargs)), grad)
        for name, weight in read.items():
            consume(index, name, weight.detach(), weight.grad)
        grad = hidden.grad
        del layer, read


@contextmanager
def _only_these_need_grad(model: nn.Module, weights) -> Iterator[None]:
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
    with forwards_replaced(layers, [partial(checkpoint, layer.forward, use_reentrant=False) for layer in layers]):
        yield
