"""GPTQ over a whole model: each decoder layer's projections rounded by :func:`prune.quantize.gptq.gptq` on the
calibration inputs that reach that layer through the layers before it, already quantized (the authors' order).

As the authors' ``llama.py`` runs it without ``--true-sequential``: one pass of the unquantized layer gives every
projection's H = XᵀX, each projection is then solved (those that read one input, as q, k and v do, share its H and
are solved as one matrix: GPTQ rounds each row on its own given H, so the integers are the same), and the quantized
layer's outputs are the next layer's inputs (the calibration pipeline Wanda and SparseGPT use,
:mod:`prune.core.sequential`). The layer computes those outputs as
the variant will, through the kernels. A projection no calibration token reached is rounded to nearest (H = I).
The stored form is round-to-nearest's: the same integer grid, scales, packing, bytes and exports; only the integers
(and, in groups, the scales, read from the updated weights) differ.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from prune.core.experts import refuse_experts
from prune.core.architectures import CAUSAL, architecture_of, decoder_layers, kind_of
from prune.core.calibration import Calibration, token_windows
from prune.core.devices import input_device
from prune.core.errors import InvalidInput
from prune.core.sequential import input_statistics, layer_calls, run_layer
from prune.core.surgery import clone_layers
from prune.quantize.gptq import Grid, gptq
from prune.quantize.weights import chosen_linears, finished, refuse_quantized

Progress = Callable[[float, str], object]


def quantize_gptq(model: nn.Module, tokenizer, bits: int, group: int | None, head: bool = False, *,
                  embedding: bool = False, calibration: Calibration | None = None, actorder: bool = False,
                  progress: Progress | None = None, batch_size: int = 8) -> nn.Module:
    """A variant of ``model`` whose decoder layers' linear weights are ``bits``-bit, chosen by GPTQ on
    ``calibration`` (None: the built-in text); with ``head`` or ``embedding``, its LM head or input embedding int8
    (rounded to nearest). ``model`` is
    untouched; ``progress(fraction, message)`` is called after each layer (raising there cancels)."""
    from prune.quantize.experts import PackedExperts, quantize_layer_experts, run_packed  # torchao: 1.6 s to import

    refuse_quantized(model)
    refuse_experts(model, f"int{bits} quantization by GPTQ", reaches=True)
    if architecture_of(model).stacks or kind_of(model) != CAUSAL:
        raise InvalidInput("GPTQ calibrates a causal language model's decoder layers in order: quantize this model "
                           "by round-to-nearest (method rtn).")
    if tokenizer is None:
        raise InvalidInput("GPTQ reads calibration activations: it needs the model's tokenizer.")
    variant = run_packed(clone_layers(model))  # its experts multiply as they are: float, then quantized
    linears, chosen = chosen_linears(variant, bits, group)
    windows = token_windows(tokenizer, calibration or Calibration())
    hidden, calls = layer_calls(variant, windows.to(input_device(model)), batch_size)
    report = progress or (lambda _fraction, _message: None)
    layers, stacks = decoder_layers(variant), (0, 0)
    for index, layer in enumerate(layers):
        mine = {name: m for name, m in layer.named_modules() if id(m) in chosen}
        own_calls = [c[index] for c in calls]
        hessians = input_statistics(layer, mine, hidden, own_calls, experts=True)  # XᵀX per projection and expert
        for names in _same_inputs(mine, hessians):  # q, k, v read one input: their rows solved as one matrix
            weights = [mine[name].weight for name in names]
            for name, solved in zip(names, _solved(weights, hessians.get(names[0]), bits, group, actorder)):
                mine[name].weight = nn.Parameter(solved, requires_grad=False)
        done = quantize_layer_experts(layer, bits, group, lambda stack: PackedExperts.of(
            [_solved([rows], hessians.get(stack.expert_path(e)), bits, group, actorder)[0]
             for e, rows in enumerate(stack.rows())], stack.transposed))
        stacks = (stacks[0] + done[0], stacks[1] + done[1])
        hidden = run_layer(layer, hidden, own_calls)  # the next layer reads the quantized layer's outputs
        report((index + 1) / len(layers), f"GPTQ: layer {index + 1} of {len(layers)} quantized")
    return finished(variant, bits, group, head, (len(chosen), len(linears) - len(chosen), *stacks), "gptq",
                    embedding)


def _same_inputs(modules: dict[str, nn.Module], hessians: dict[str, torch.Tensor]) -> list[list[str]]:
    """The modules' names in groups of equal H (one input read by each, as q, k and v read the same normed hidden
    states) and equal input width; a module no token reached is alone."""
    groups: list[list[str]] = []
    for name in modules:
        h = hessians.get(name)
        same = next((g for g in groups if h is not None and (other := hessians.get(g[0])) is not None
                     and other.shape == h.shape and torch.equal(other, h)), None)
        if same is None:
            groups.append([name])
        else:
            same.append(name)
    return groups


def _solved(weights: list[torch.Tensor], hessian: torch.Tensor | None, bits: int, group: int | None,
            actorder: bool) -> list[torch.Tensor]:
    """Projections' GPTQ weights in kernel form (the form round-to-nearest's weights take), from one H: GPTQ rounds
    each row on its own given H, so their rows are solved as one matrix, then split."""
    from prune.quantize.packed import Int4Groups, Int8Rows

    dtype = weights[0].dtype
    grid = Grid(bits, group, torch.bfloat16 if bits == 4 else dtype)
    hessian = torch.eye(weights[0].shape[1], device=weights[0].device) if hessian is None else hessian
    integers, scales = gptq(weights[0] if len(weights) == 1 else torch.cat(weights), hessian, grid, actorder=actorder)
    rows = [w.shape[0] for w in weights]
    if bits == 8:
        return [Int8Rows(q.clone(), s[:, 0].to(dtype), dtype)  # its own storage: the kernel reads it aligned
                for q, s in zip(integers.split(rows), scales.split(rows))]
    return [Int4Groups.of(q, s, group, dtype) for q, s in zip(integers.split(rows), scales.split(rows))]
