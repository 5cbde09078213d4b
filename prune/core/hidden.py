"""Read the residual stream between decoder layers, and resume a forward pass from it.

``residual_streams`` returns h_0 … h_L for each stack of layers: h_l is the input of layer l and h_L the output of
the last layer, *before* the final norm (``output_hidden_states`` would give the normed
one for the last entry on many architectures). ``norm_last_tokens`` returns what the zigzag
authors read instead: each layer's pre-feed-forward norm output, then the final norm's.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

from prune.core.devices import input_device
from prune.core.architectures import (SEQ2SEQ, architecture_of, decoder_layers, final_norm, get_path, kind_of,
                                      layer_stacks)
from prune.core.errors import InvalidInput, UnsupportedArchitecture, quoted


class StopForward(Exception):
    """Raised by a hook to end a forward pass once what it needs has been seen."""


def run_until_stopped(model: nn.Module, **inputs) -> None:
    """``model(**inputs)``, where a hook raising StopForward ends the pass early (its output is not needed)."""
    try:
        model(**inputs)
    except StopForward:
        pass


@contextmanager
def forwards_replaced(layers, forwards) -> Iterator[None]:
    """While open, each of ``layers`` runs the matching one of ``forwards`` as its forward (an instance attribute, so
    its hooks still run); the forward an instance had before (accelerate's dispatch sets one) is put back after."""
    layers = list(layers)
    before = [layer.__dict__.get("forward") for layer in layers]
    for layer, forward in zip(layers, forwards):
        layer.forward = forward
    try:
        yield
    finally:
        for layer, forward in zip(layers, before):
            if forward is None:
                del layer.forward
            else:
                layer.forward = forward


def _hidden_arg(args, kwargs):
    return args[0] if args else kwargs["hidden_states"]


def _hidden_out(output):
    return output[0] if isinstance(output, tuple) else output


def forward_inputs(model: nn.Module, input_ids: torch.Tensor) -> dict[str, torch.Tensor]:
    """What a forward pass over ``input_ids`` is given: an encoder-decoder's decoder reads them too, shifted right as
    its training targets are, so that every token reaches both stacks."""
    if kind_of(model) == SEQ2SEQ:
        return {"input_ids": input_ids,
                "decoder_input_ids": model.prepare_decoder_input_ids_from_labels(labels=input_ids)}
    return {"input_ids": input_ids}


def stop_forward(*_) -> None:
    """A hook that ends the forward pass it is called in (:func:`run_until_stopped`)."""
    raise StopForward


@torch.no_grad()
def residual_streams(model: nn.Module, input_ids: torch.Tensor, batch_size: int = 8,
                     last_token_only: bool = False) -> list[torch.Tensor]:
    """One stream per stack of layers (one; T5's encoder and decoder), each [L+1, N, T, D] (or [L+1, N, D] for the
    last token) float32 states on the CPU: the stack's input, then each of its layers' outputs."""
    stacks = layer_stacks(model)
    chunks: list[list[torch.Tensor]] = [[] for _ in stacks]
    keep = (lambda h: h[:, -1]) if last_token_only else (lambda h: h)
    for batch in input_ids.split(batch_size):
        states: list[list[torch.Tensor]] = [[] for _ in stacks]
        hooks = []
        for found, layers in zip(states, stacks):
            hooks.append(layers[0].register_forward_pre_hook(
                lambda _m, args, kwargs, found=found: found.append(keep(_hidden_arg(args, kwargs)).float().cpu()),
                with_kwargs=True))
            hooks += [layer.register_forward_hook(
                lambda _m, _a, out, found=found: found.append(keep(_hidden_out(out)).float().cpu()))
                for layer in layers]
        hooks.append(stacks[-1][-1].register_forward_hook(stop_forward))  # after the last state: no LM head's logits
        try:
            run_until_stopped(model, **forward_inputs(model, batch.to(input_device(model))), use_cache=False)
        finally:
            for hook in hooks:
                hook.remove()
        for chunk, found in zip(chunks, states):
            chunk.append(torch.stack(found))  # [L+1, B, (T,) D]
    return [torch.cat(chunk, dim=1) for chunk in chunks]


@torch.no_grad()
def norm_last_tokens(model: nn.Module, texts: list[list[int]], tokens_per_batch: int = 4096) -> torch.Tensor:
    """[L+1, N, D] float32: each text's last token after every layer's pre-feed-forward norm, then the final norm.

    The zigzag authors' representations: one point per whole text. Texts of similar length are
    batched with right padding (causal attention keeps real tokens blind to it).
    """
    arch = architecture_of(model)
    if arch.ffn_norm is None:
        raise UnsupportedArchitecture(f"Model type {quoted(model.config.model_type)} has no norm before its "
                                      "feed-forward block, which zigzag persistence reads.")
    if not texts or min(len(t) for t in texts) < 1:
        raise InvalidInput("Zigzag persistence needs texts of at least one token.")
    norms = [get_path(layer, arch.ffn_norm) for layer in decoder_layers(model)] + [final_norm(model)]
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    chunks: list[list[torch.Tensor]] = [[] for _ in norms]
    device = input_device(model)
    for batch in _length_batches([len(texts[i]) for i in order], tokens_per_batch):
        rows = [texts[order[j]] for j in batch]
        lengths = torch.tensor([len(t) for t in rows])
        ids = torch.zeros(len(rows), int(lengths.max()), dtype=torch.long)  # right padding
        for row, tokens in enumerate(rows):
            ids[row, : len(tokens)] = torch.tensor(tokens)
        mask = (torch.arange(ids.shape[1])[None, :] < lengths[:, None]).long()
        last = (torch.arange(len(rows)), lengths - 1)

        def keep(position, shape=ids.shape, last=last):
            def hook(_module, _args, output):  # OPT's per-layer norm sees [B*T, D]: reshape
                chunks[position].append(output.reshape(*shape, -1)[last].float().cpu())
                if position == len(norms) - 1:
                    raise StopForward  # the LM head's logits are not needed
            return hook

        hooks = [norm.register_forward_hook(keep(p)) for p, norm in enumerate(norms)]
        try:
            run_until_stopped(model, input_ids=ids.to(device), attention_mask=mask.to(device), use_cache=False)
        finally:
            for hook in hooks:
                hook.remove()
    states = torch.stack([torch.cat(c) for c in chunks])  # [L+1, N, D] in length order
    return states[:, torch.argsort(torch.tensor(order))]


def _length_batches(lengths: list[int], tokens_per_batch: int) -> list[range]:
    """Consecutive index ranges over ascending ``lengths`` whose padded size fits the budget."""
    batches, start = [], 0
    while start < len(lengths):
        stop = start + 1
        while stop < len(lengths) and (stop + 1 - start) * lengths[stop] <= tokens_per_batch:
            stop += 1
        batches.append(range(start, stop))
        start = stop
    return batches


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
    return head(norm(hidden.to(input_device(model), head.weight.dtype)))  # offloaded: read in by its hook


@torch.no_grad()
def logits_after(model: nn.Module, input_ids: torch.Tensor, hidden: torch.Tensor | None) -> torch.Tensor:
    """Logits of ``model`` run on ``input_ids`` but with its first layer fed ``hidden``.

    ``model`` is usually a pruned view holding only the layers after a cut, so the prefix
    computed once by the original is reused instead of recomputed.
    """
    if hidden is None:
        return model(input_ids=input_ids.to(input_device(model)), use_cache=False).logits
    with inject_hidden(model, hidden):
        return model(input_ids=input_ids.to(input_device(model)), use_cache=False).logits


def output_embeddings_input(model: nn.Module, **inputs) -> torch.Tensor:
    """What ``model(**inputs)`` hands its output embeddings (the vocabulary projection) [B, T, D]; the pass stops
    there."""
    captured = {}

    def grab(_module, args):
        captured["hidden"] = args[0]
        raise StopForward

    handle = model.get_output_embeddings().register_forward_pre_hook(grab)
    try:
        with torch.no_grad():
            run_until_stopped(model, **inputs)
    finally:
        handle.remove()
    return captured["hidden"]
