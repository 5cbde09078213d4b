"""Sparsity: zero a fraction of every linear weight inside the decoder layers, by magnitude, Wanda or SparseGPT.

What is pruned, as in both papers' code: every ``nn.Linear`` (GPT-2's ``Conv1D``, whose weight is
stored [in, out], read transposed) inside each decoder layer; never the embeddings, norms or LM
head. In a mixture of experts, every expert's matrices too (:mod:`prune.core.experts`), each as a matrix of its own,
Wanda's and SparseGPT's statistics from the calibration tokens the router sent to that expert (an expert no token
reached reads every token of its layer); the routers stay as they are. The comparison group, in which exactly
⌊size · sparsity⌋ weights are zeroed:

* ``magnitude`` — |W|, over the whole matrix (the baseline in the Wanda and SparseGPT repos: one
  threshold per layer's matrix, not per row); reads no data.
* ``wanda`` (Sun et al. 2023, arXiv 2306.11695) — |W_ij| · ‖X_j‖₂, within each output row.
* ``sparsegpt`` (Frantar & Alistarh 2023, arXiv 2301.00774) — see :mod:`prune.sparsity.sparsegpt`:
  within each block of 128 columns (all rows together), and the kept weights are updated.
* ``N:M`` patterns (``"2:4"``, ``"4:8"``) — in every row, in every group of M consecutive input
  weights, the N lowest by the method's score are zero (2:4: two of every four).

Wanda and SparseGPT prune sequentially, as the papers do: the calibration inputs of layer i are
the outputs of layers 0…i−1 already pruned; within a layer every matrix's statistics are read in
one pass of the unpruned layer (the papers' default; SparseGPT's ``--true-sequential`` is not
done). The derived model shares every tensor it does not change with the original, and owns the
pruned matrices, stored densely: zeros save no memory and no time with dense kernels.
"""

from __future__ import annotations

import copy
import itertools
import re
from collections.abc import Callable

import torch
from torch import nn
from transformers.pytorch_utils import Conv1D

from prune.core import offload
from prune.core.experts import expert_stacks, refuse_experts, routers
from prune.core.devices import input_device
from prune.core.offload import weight_of
from prune.core.architectures import CAUSAL, architecture_of, decoder_layers, kind_of, layer_stacks
from prune.core.calibration import Calibration, token_windows
from prune.core.layer_files import Rebuild
from prune.core.errors import InvalidInput, UnknownMethod, quoted
from prune.core.storage import dense
from prune.core.sequential import gram, input_statistics, layer_calls, matrices, rows_of, run_layer
from prune.core.surgery import private_copy
from prune.sparsity.sparsegpt import count, lowest, sparsegpt

METHODS = ("magnitude", "wanda", "sparsegpt")
PATTERNS = ("unstructured", "2:4", "4:8")  # offered; any N:M with 0 < N < M is accepted
MAX_SPARSITY = 0.99
_NM = re.compile(r"(\d+):(\d+)")

Progress = Callable[[float, str], object]


def check_request(method: str, sparsity: float | None, pattern: str = "unstructured") -> tuple[str, float, str]:
    """(method, sparsity, pattern) checked; an N:M pattern implies its sparsity, N / M."""
    if method not in METHODS:
        raise UnknownMethod(f"Unknown sparsity method {quoted(method)}. Choose one of: {', '.join(METHODS)}.")
    nm = parse_pattern(pattern)
    if nm is not None:
        implied = nm[0] / nm[1]
        if sparsity is not None and abs(float(sparsity) - implied) > 1e-9:
            raise InvalidInput(f"The {pattern} pattern zeroes {nm[0]} of every {nm[1]} weights, a sparsity of "
                               f"{implied:.0%}; the sparsity {float(sparsity):.0%} conflicts with it: leave it out.")
        return method, implied, pattern
    if sparsity is None or isinstance(sparsity, bool) or not 0.0 <= float(sparsity) <= MAX_SPARSITY:
        raise InvalidInput(f"Sparsity is a fraction from 0 to {MAX_SPARSITY} (0.5: half the weights zero), "
                           f"not {quoted(sparsity)}.")
    return method, float(sparsity), "unstructured"


def parse_pattern(pattern: str) -> tuple[int, int] | None:
    """None for unstructured, else (N, M): N of every M consecutive input weights of a row are zero."""
    if pattern == "unstructured":
        return None
    found = _NM.fullmatch(str(pattern))
    if not found or not 0 < int(found[1]) < int(found[2]):
        raise InvalidInput(f"Unknown sparsity pattern {quoted(pattern)}. Choose unstructured or N:M with 0 < N < M "
                           f"({', '.join(PATTERNS[1:])}: N of every M consecutive weights of a row are zero).")
    return int(found[1]), int(found[2])


def sparsify(model: nn.Module, tokenizer, method: str, sparsity: float | None, *, pattern: str = "unstructured",
             calibration: Calibration | None = None, progress: Progress | None = None,
             batch_size: int = 8) -> nn.Module:
    """A copy of ``model`` whose layers' linear weights are ``sparsity`` zero (every stack of an encoder-decoder's);
    ``model`` is untouched.

    ``calibration`` (None: the built-in text) feeds Wanda and SparseGPT; magnitude reads no data.
    ``progress(fraction, message)`` is called after each layer (raising there cancels).
    """
    method, sparsity, pattern = check_request(method, sparsity, pattern)
    refuse_experts(model, "Sparsity", reaches=True)
    nm = parse_pattern(pattern)
    _check_shapes(model, nm)
    if method != "magnitude" and tokenizer is None:
        raise InvalidInput(f"{method} reads calibration activations: it needs the model's tokenizer.")
    windows = None if method == "magnitude" else _windows(model, tokenizer, calibration)
    report = progress or (lambda _fraction, _message: None)
    if architecture_of(model).stacks:
        return _sparsify_stacks(model, method, sparsity, nm, windows, report, batch_size)
    rebuild = Rebuild(model, sparse_copy_bytes(model))  # a clone's layers, or one at a time into files
    count_layers = len(decoder_layers(model))
    hidden, calls = None, []
    if windows is not None:
        hidden, calls = layer_calls(rebuild.source, windows.to(rebuild.device), batch_size)
        report(0.0, f"{method}: calibration inputs of the first layer read ({len(windows)} windows)")
    for index, layer in rebuild.layers():
        hidden = _prune_layer(layer, method, sparsity, nm, hidden, [c[index] for c in calls])
        rebuild.done(index, layer)
        report((index + 1) / count_layers, _layer_done(method, index + 1, count_layers))
    return rebuild.model()


def _sparsify_stacks(model: nn.Module, method: str, sparsity: float, nm, windows: torch.Tensor | None, report,
                     batch_size: int) -> nn.Module:
    """An encoder-decoder's stacks (T5), in memory: the encoder's layers first, then the decoder's, whose calibration
    inputs are read afresh through the pruned encoder (its output is what the decoder's cross-attention reads)."""
    if offload.is_offloaded(model):
        raise InvalidInput("An encoder-decoder read from disk layer by layer cannot be sparsified yet: raise the "
                           "memory budget so that it loads whole.")
    variant = private_copy(model)  # every module object its own, the parameters shared until replaced
    variant.config = copy.deepcopy(model.config)
    stacks = layer_stacks(variant)
    total, done = sum(len(stack) for stack in stacks), 0
    for stack in stacks:
        hidden, calls = None, []
        if windows is not None:
            hidden, calls = layer_calls(variant, windows.to(input_device(model)), batch_size, layers=stack)
        for index, layer in enumerate(stack):
            hidden = _prune_layer(layer, method, sparsity, nm, hidden, [c[index] for c in calls])
            done += 1
            report(done / total, _layer_done(method, done, total))
    return variant


def _layer_done(method: str, done: int, total: int) -> str:
    if method == "magnitude":
        return f"Magnitude pruning: layer {done} of {total}"
    return f"{method}: layer {done} of {total} pruned"


def _windows(model: nn.Module, tokenizer, calibration: Calibration | None) -> torch.Tensor:
    """The calibration windows [N, T]; longer than an encoder's learned positions refuses in one line."""
    windows = token_windows(tokenizer, calibration or Calibration())
    positions = getattr(model.config, "max_position_embeddings", None)  # an encoder's learned positions end there
    if kind_of(model) != CAUSAL and positions and windows.shape[1] > positions:
        raise InvalidInput(f"Calibration windows of {windows.shape[1]} tokens exceed this model's {positions} "
                           "positions: choose a shorter calibration length.")
    return windows


def _prune_layer(layer: nn.Module, method: str, sparsity: float, nm, hidden: list[torch.Tensor] | None,
                 calls: list[tuple]) -> list[torch.Tensor] | None:
    """Zero ``sparsity`` of each matrix of one layer (its own modules), every expert's of a mixture of experts too, by
    ``method``; Wanda and SparseGPT read the layer's inputs ``hidden`` with its other arguments ``calls`` (one per
    batch), each expert the tokens routed to it. Returns the pruned layer's outputs, the next layer's inputs (None for
    magnitude, which reads no data)."""
    found = {} if hidden is None else _statistics(layer, hidden, calls, method)
    for name, module in _matrices(layer).items():
        _set_rows(module, _pruned(rows_of(module), method, sparsity, nm, found.get(name)))
    for stack in expert_stacks(layer):
        stack.set_rows(torch.stack([_pruned(rows, method, sparsity, nm, found.get(stack.expert_path(e)))
                                    for e, rows in enumerate(stack.rows())]))
    del found
    return None if hidden is None else run_layer(layer, hidden, calls)  # the next layer reads the pruned outputs


def _pruned(rows: torch.Tensor, method: str, sparsity: float, nm, statistic: torch.Tensor | None) -> torch.Tensor:
    """One [outputs, inputs] matrix with ``sparsity`` of it zero by ``method``, from its inputs' ``statistic``; a
    matrix no calibration token reached: Wanda falls back to |W| per row, SparseGPT to H = I."""
    if method == "magnitude":
        return _zeroed(rows, _magnitude_mask(rows, sparsity, nm))
    if method == "wanda":
        squares = torch.ones(rows.shape[1], device=rows.device) if statistic is None else statistic
        return _zeroed(rows, _wanda_mask(rows, squares, sparsity, nm))
    return sparsegpt(rows, torch.eye(rows.shape[1], device=rows.device) if statistic is None else statistic,
                     sparsity, nm)


# ---------------------------------------------------------------- the matrices


def _matrices(layer: nn.Module) -> dict[str, nn.Module]:
    """The layer's linear maps that are pruned: all but a mixture of experts' routers (llm-compressor's MoE recipes
    leave ``mlp.gate`` alone: it chooses the experts)."""
    kept = routers(layer)
    return {name: m for name, m in matrices(layer).items() if id(m) not in kept}


def _set_rows(module: nn.Module, rows: torch.Tensor) -> None:
    """Give ``module`` (a clone's own) a new weight parameter from [outputs, inputs] values."""
    old = module.weight
    value = rows.t() if isinstance(module, Conv1D) else rows
    module.weight = nn.Parameter(value.to(old.dtype).contiguous(), requires_grad=old.requires_grad)


def _zeroed(rows: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return rows.masked_fill(mask, 0)


def zero_fraction(model: nn.Module) -> float:
    """The fraction of the layers' linear weights that are exactly zero, counted."""
    zeros = total = 0
    for layer in decoder_layers(model):
        weights = itertools.chain((dense(weight_of(m)) for m in _matrices(layer).values()),  # read from its files if
                                  (stack.rows() for stack in expert_stacks(layer)))  # offloaded, one at a time
        for weight in weights:
            zeros += weight.numel() - int(torch.count_nonzero(weight))  # no bool/int64 copy
            total += weight.numel()
    return zeros / total if total else 0.0


def sparse_copy_bytes(model: nn.Module) -> int:
    """Bytes of the matrices :func:`sparsify` copies (every expert's too): what a sparse variant owns, zeros stored
    densely."""
    return sum(w.numel() * w.element_size() for layer in decoder_layers(model)
               for w in [*(m.weight for m in _matrices(layer).values()), *(s.weight for s in expert_stacks(layer))])


def _check_shapes(model: nn.Module, nm: tuple[int, int] | None) -> None:
    if nm is None:
        return
    widths = {name: rows_of(m).shape[1] for layer in decoder_layers(model) for name, m in _matrices(layer).items()}
    widths |= {stack.path: stack.shape[1] for layer in decoder_layers(model) for stack in expert_stacks(layer)}
    odd = sorted(f"{name} ({inputs} inputs)" for name, inputs in widths.items() if inputs % nm[1])
    if odd:
        raise InvalidInput(f"{nm[0]}:{nm[1]} sparsity needs input sizes divisible by {nm[1]}: {', '.join(odd)}.")


# ---------------------------------------------------------------- masks (True: set to zero)


def _magnitude_mask(rows: torch.Tensor, sparsity: float, nm: tuple[int, int] | None) -> torch.Tensor:
    """The lowest |W| of the whole matrix (or of each N:M group)."""
    score = rows.float().abs()
    if nm is not None:
        return _nm_mask(score, nm)
    return lowest(score.flatten(), count(score.numel(), sparsity)).view_as(score)


def _wanda_mask(rows: torch.Tensor, squares: torch.Tensor, sparsity: float, nm: tuple[int, int] | None) -> torch.Tensor:
    """The lowest |W_ij| · ‖X_j‖₂ of each row (or of each N:M group); ``squares`` is Σ_tokens X_j², [inputs]."""
    score = rows.float().abs() * squares.sqrt()[None, :]
    if nm is not None:
        return _nm_mask(score, nm)
    return lowest(score, count(score.shape[1], sparsity))


def _nm_mask(score: torch.Tensor, nm: tuple[int, int]) -> torch.Tensor:
    """The N lowest of every M consecutive scores of each row."""
    n, m = nm
    return lowest(score.view(score.shape[0], -1, m), n).view_as(score)


# ---------------------------------------------------------------- statistics


def _statistics(layer: nn.Module, hidden: list[torch.Tensor], calls: list[tuple], method: str) -> dict:
    """Per matrix of one layer (and per expert's matrix, from the tokens routed to it), from its inputs on the
    calibration: Σ X_j² [inputs] (Wanda) or XᵀX (SparseGPT)."""
    return input_statistics(layer, _matrices(layer), hidden, calls, _squares if method == "wanda" else gram,
                            experts=True)


def _squares(x: torch.Tensor) -> torch.Tensor:
    """Σ X_j² over the tokens [inputs]: Wanda's input norms, squared."""
    return (x * x).sum(0)
