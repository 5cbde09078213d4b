"""The sequential calibration's capture (:func:`prune.core.sequential.layer_calls`) hands each layer's input on
instead of computing the layer: what it keeps (the first layer's input, every layer's masks, position embeddings and
other arguments) equals what a real pass through the layers gives, on every architecture LayerCut reads (dense,
sliding windows, experts, hybrids, GPT-2, OPT, a vision-language checkpoint); no layer is computed past one probe
window where every layer returns a plain tensor (else every layer is computed, as T5's blocks need); a forward set
on a layer instance (accelerate's) is put back."""

from __future__ import annotations

import pytest
import torch

from conftest import tiny_model
from tiny_architectures import ARCHITECTURES, tiny
from prune.core.architectures import decoder_layers
from prune.core.hidden import _hidden_arg, forward_inputs
from prune.core.sequential import layer_calls, other_arguments

WINDOWS = torch.arange(3 * 4 * 12).reshape(12, 12) % 300 + 3  # 12 windows of 12 tokens, 3 batches of 4


def real_pass(model, windows, batch_size):
    """The reference: the layers computed, each call's arguments read by a hook."""
    layers = decoder_layers(model)
    hidden, calls = [], []

    def capture(index):
        def hook(_module, args, kwargs):
            if index == 0:
                hidden.append(_hidden_arg(args, kwargs))
            calls[-1].append(other_arguments(args, kwargs))
        return hook

    handles = [layer.register_forward_pre_hook(capture(i), with_kwargs=True) for i, layer in enumerate(layers)]
    try:
        with torch.no_grad():
            for batch in windows.split(batch_size):
                calls.append([])
                model(use_cache=False, **forward_inputs(model, batch))
    finally:
        for handle in handles:
            handle.remove()
    return hidden, calls


def same(a, b) -> bool:
    if torch.is_tensor(a) or torch.is_tensor(b):
        return torch.is_tensor(a) and torch.is_tensor(b) and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return a is b or a == b


@pytest.mark.parametrize("model_type", [*ARCHITECTURES, "gemma2", "gpt2", "opt", "gpt_neox"])
def test_the_capture_keeps_what_a_real_pass_gives_and_computes_no_layer(model_type):
    model = tiny(model_type) if model_type in ARCHITECTURES else tiny_model(model_type)
    layers = decoder_layers(model)
    computed, outputs = [], []  # calls of layer 1's parts (made only when the layer is computed); layer outputs
    for part in layers[1].children():
        part.register_forward_hook(lambda *_: computed.append(1))
    for layer in layers:
        layer.register_forward_hook(lambda _m, _a, out: outputs.append(torch.is_tensor(out)))
    accelerate_like = layers[2].forward  # a forward set on the instance, as accelerate's dispatch sets one
    layers[2].forward = accelerate_like
    with torch.no_grad():
        before = model(input_ids=WINDOWS[:2]).logits
    one_pass = len(computed)
    hidden, calls = layer_calls(model, WINDOWS, 4)
    if all(outputs[:len(layers)]):  # plain tensors: layer 1 ran on the probe window only
        assert len(computed) == 2 * one_pass > 0
    else:  # a layer hands more than its hidden states on: every layer computed, on the probe and the 3 batches
        assert len(computed) == 5 * one_pass > 0
    reference = real_pass(model, WINDOWS, 4)
    assert same(hidden, reference[0])
    assert len(calls) == 3 and all(len(batch) == len(layers) for batch in calls)
    for got, wanted in zip(calls, reference[1]):
        for index, (args, kwargs) in enumerate(got):
            assert same(args, wanted[index][0]) and same(kwargs, wanted[index][1]), (model_type, index)
    assert layers[2].__dict__["forward"] is accelerate_like and "forward" not in layers[1].__dict__
    with torch.no_grad():
        assert torch.equal(model(input_ids=WINDOWS[:2]).logits, before)
