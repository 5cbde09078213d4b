"""Read the residual stream between decoder layers, and resume a forward pass from it.

``residual_stream`` returns h_0 … h_L: h_l is the input of layer l and h_L the output of
the last layer, *before* the final norm (``output_hidden_states`` would give the normed
one for the last entry on many architectures).
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
from torch import nn

from .architectures import decoder_layers, final_norm


def _hidden_arg(args, kwargs):
    return args[0] if args else kwargs["hidden_states"]


def _hidden_out(output):
    return output[0] if isinstance(output, tuple) else output


@torch.no_grad()
def residual_stream(model: nn.Module, input_ids: torch.Tensor, batch_size: int = 8, last_token_only: bool = False):
    """[L+1, N, T, D] (or [L+1, N, D] for the last token) float32 states on the CPU."""
    layers = decoder_layers(model)
    chunks = []
    for batch in input_ids.split(batch_size):
        states: list[torch.Tensor] = []
        keep = (lambda h: h[:, -1]) if last_token_only else (lambda h: h)
        hooks = [layers[0].register_forward_pre_hook(
            lambda _m, args, kwargs: states.append(keep(_hidden_arg(args, kwargs)).float().cpu()), with_kwargs=True)]
        hooks += [layer.register_forward_hook(lambda _m, _a, out: states.append(keep(_hidden_out(out)).float().cpu()))
                  for layer in layers]
        try:
            model(input_ids=batch.to(model.device), use_cache=False)
        finally:
            for hook in hooks:
                hook.remove()
        chunks.append(torch.stack(states))  # [L+1, B, (T,) D]
    return torch.cat(chunks, dim=1)


@contextmanager
def inject_hidden(model: nn.Module, hidden: torch.Tensor):
    """Make the model's first layer read ``hidden`` instead of the embeddings' output."""
    layers = decoder_layers(model)

    def replace(_module, args, kwargs):
        value = hidden.to(device=_hidden_arg(args, kwargs).device, dtype=_hidden_arg(args, kwargs).dtype)
        if args:
            return (value, *args[1:]), kwargs
        return args, {**kwargs, "hidden_states": value}

    hook = layers[0].register_forward_pre_hook(replace, with_kwargs=True)
    try:
        yield
    finally:
        hook.remove()


@torch.no_grad()
def logits_from_hidden(model: nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    """LM-head logits for a last residual state (final norm applied here)."""
    head = model.get_output_embeddings()
    norm = final_norm(model)
    return head(norm(hidden.to(head.weight.device, head.weight.dtype)))


@torch.no_grad()
def logits_after(model: nn.Module, input_ids: torch.Tensor, hidden: torch.Tensor | None) -> torch.Tensor:
    """Logits of ``model`` run on ``input_ids`` but with its first layer fed ``hidden``.

    ``model`` is usually a pruned view holding only the layers after a cut, so the prefix
    computed once by the original is reused instead of recomputed.
    """
    if hidden is None:
        return model(input_ids=input_ids.to(model.device), use_cache=False).logits
    with inject_hidden(model, hidden):
        return model(input_ids=input_ids.to(model.device), use_cache=False).logits
