"""Sequential calibration: run the calibration windows through the decoder layers one layer at a time.

A method that changes layer i reads its calibration inputs from layers 0…i−1 as already changed
(Wanda, SparseGPT, feature-space decomposition): :func:`layer_calls` captures, per batch, the first
layer's input and every layer's other arguments (masks, position embeddings), and :func:`run_layer`
runs one layer on given inputs to give the next layer's.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext

import torch
from torch import nn
from transformers.pytorch_utils import Conv1D

from prune.core.architectures import decoder_layers
from prune.core.experts import routed_inputs, unreached
from prune.core.hidden import (StopForward, _hidden_arg, _hidden_out, forward_inputs, forwards_replaced,
                               run_until_stopped)


def matrices(layer: nn.Module) -> dict[str, nn.Module]:
    """The linear maps of one decoder layer, by path in the layer (``nn.Linear`` and GPT-2's ``Conv1D``)."""
    return {name: m for name, m in layer.named_modules() if isinstance(m, (nn.Linear, Conv1D))}


def rows_of(module: nn.Module) -> torch.Tensor:
    """The weight as [outputs, inputs] (Conv1D stores it transposed)."""
    return module.weight.detach().t() if isinstance(module, Conv1D) else module.weight.detach()


def other_arguments(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """A decoder layer's call without its hidden states: (the other args, the other kwargs), to call it again on
    other hidden states (masks and position embeddings depend only on the tokens)."""
    return args[1:], {k: v for k, v in kwargs.items() if k != "hidden_states"}


@torch.no_grad()
def layer_calls(model: nn.Module, input_ids: torch.Tensor, batch_size: int, layers: nn.ModuleList | None = None):
    """Per batch: the first layer's input [B, T, D], and every layer's other (args, kwargs).

    Masks and position embeddings depend only on the tokens, and can differ between layers
    (sliding-window layers), so each layer's own are kept and reused on the changed inputs.
    ``layers``: another stack than the decoder layers (T5's decoder, whose calls hold the encoder's output as it is
    now); an encoder-decoder's decoder reads the window shifted right, as its training targets are.

    Where every layer returns its hidden states as a plain tensor (today's decoders), the layers are called as the
    model's forward pass calls them but not computed: each hands its input on (its hooks still run). What is kept
    depends only on the tokens, so it is what a real pass gives, for the cost of the embeddings. One probe window run
    through the real layers shows their outputs first (an offloaded layer is read for it once, not once a batch);
    where a layer returns a tuple (T5's blocks hand position biases from layer to layer), every layer is computed,
    as before.
    """
    layers = decoder_layers(model) if layers is None else layers
    plain = _plain_outputs(model, input_ids[:1], layers)
    hidden: list[torch.Tensor] = []
    calls: list[list[tuple]] = []

    def capture(index):
        def hook(_module, args, kwargs):
            if index == 0:
                hidden.append(_hidden_arg(args, kwargs))
            calls[-1].append(other_arguments(args, kwargs))
            if index == len(layers) - 1:
                raise StopForward  # once the last layer's arguments are read
        return hook

    handles = [layer.register_forward_pre_hook(capture(i), with_kwargs=True) for i, layer in enumerate(layers)]
    try:
        with forwards_replaced(layers[:-1], [_hand_on] * (len(layers) - 1)) if plain else nullcontext():
            for batch in input_ids.split(batch_size):
                calls.append([])
                run_until_stopped(model, use_cache=False, **forward_inputs(model, batch))
    finally:
        for handle in handles:
            handle.remove()
    return hidden, calls


def _plain_outputs(model: nn.Module, input_ids: torch.Tensor, layers: nn.ModuleList) -> bool:
    """Whether every layer but the last (whose output is never needed) returns a plain tensor, from one real pass."""
    kinds: list[bool] = []

    def note(_module, _args, output):
        kinds.append(torch.is_tensor(output))
        if len(kinds) == len(layers) - 1:
            raise StopForward

    handles = [layer.register_forward_hook(note) for layer in layers[:-1]]
    try:
        if handles:
            run_until_stopped(model, use_cache=False, **forward_inputs(model, input_ids))
    finally:
        for handle in handles:
            handle.remove()
    return all(kinds)


def _hand_on(*args, **kwargs) -> torch.Tensor:
    """A layer's stand-in while the capture runs: its hidden input."""
    return _hidden_arg(args, kwargs)


@torch.no_grad()
def run_layer(layer: nn.Module, hidden: list[torch.Tensor], calls: list[tuple]) -> list[torch.Tensor]:
    """The layer's outputs for each batch's input and arguments (``calls``: this layer's, one per batch)."""
    return [_hidden_out(layer(h, *args, **kwargs)) for h, (args, kwargs) in zip(hidden, calls)]


def gram(x: torch.Tensor) -> torch.Tensor:
    """XᵀX [inputs, inputs] of inputs [tokens, inputs]: SparseGPT's and GPTQ's Hessian, their 2/n left out."""
    return x.T @ x


class OncePerInput:
    """``reduce`` of a module's input [tokens, inputs] in float32, computed once for modules that read one tensor in
    turn (q, k and v; an MLP's gate and up); :meth:`forget` lets go of the last input and its value."""

    def __init__(self, reduce: Callable[[torch.Tensor], object]):
        self.reduce, self.last = reduce, (None, None)

    def __call__(self, x: torch.Tensor):
        if self.last[0] is not x:
            self.last = x, self.reduce(x.detach().reshape(-1, x.shape[-1]).float())
        return self.last[1]

    def forget(self) -> None:
        self.last = (None, None)


@torch.no_grad()
def input_statistics(layer: nn.Module, modules: dict[str, nn.Module], hidden: list[torch.Tensor], calls: list[tuple],
                     reduce: Callable[[torch.Tensor], torch.Tensor] = gram,
                     experts: bool = False) -> dict[str, torch.Tensor]:
    """Per module of one layer (by name), ``reduce`` of its inputs [tokens, inputs] in float32, summed over one pass of
    the layer on ``hidden`` with its ``calls``; a module no token reached is absent.

    ``experts``: also per expert matrix ('mlp.experts.down_proj[3]'), of the tokens the router sent to that expert.
    An expert no calibration token reached reads every token that reached its layer, as if routed to it (a second
    pass, for those experts only): llm-compressor's ``moe_calibrate_all_experts`` calibrates every expert so."""
    found: dict[str, torch.Tensor] = {}
    reduced = OncePerInput(reduce)

    def collect(name):
        def hook(_module, args, _output):
            value = reduced(args[0])
            found[name] = found[name] + value if name in found else value
        return hook

    _hooked_pass(layer, hidden, calls, [m.register_forward_hook(collect(name)) for name, m in modules.items()]
                 + (routed_inputs(layer, reduce, found) if experts else []))
    reduced.forget()
    if experts and (missing := unreached(layer, found)):
        _hooked_pass(layer, hidden, calls, routed_inputs(layer, reduce, found, every=missing))
    return found


def _hooked_pass(layer: nn.Module, hidden: list[torch.Tensor], calls: list[tuple], handles: list) -> None:
    """One pass of the layer, then its hooks (``handles``) removed."""
    try:
        run_layer(layer, hidden, calls)
    finally:
        for handle in handles:
            handle.remove()
