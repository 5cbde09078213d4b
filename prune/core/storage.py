"""The plain tensors that hold a model's data, and their bytes, for weights of any storage.

A quantized weight (torchao's ``Int8Tensor``, ``IntxUnpackedToInt8Tensor``, …) is a tensor subclass: its
``dtype`` and ``element_size()`` are the original float's, and its ``data_ptr()`` is 0 for every one of them. Its
data lives in the plain tensors ``__tensor_flatten__`` names (the int8 values, the scales). Whatever counts bytes,
tells shared tensors apart or moves data counts and moves those, through this module.
"""

from __future__ import annotations

import torch
from torch import nn


def parts(tensor: torch.Tensor) -> list[torch.Tensor]:
    """The plain tensors holding ``tensor``'s data: itself, or a tensor subclass's inner tensors (recursively)."""
    if not is_quantized(tensor):
        return [tensor]
    names, _ = tensor.__tensor_flatten__()
    return [plain for name in names if (inner := getattr(tensor, name)) is not None for plain in parts(inner)]


def nbytes(tensor: torch.Tensor) -> int:
    """The bytes ``tensor``'s data takes (a quantized weight's real bytes, its scales included)."""
    return sum(t.numel() * t.element_size() for t in parts(tensor))


def held(model: nn.Module) -> list[torch.Tensor]:
    """Every plain tensor behind ``model``'s parameters and buffers, a shared one once (by object)."""
    found: dict[int, torch.Tensor] = {}
    for tensor in (*model.parameters(), *model.buffers()):
        for plain in parts(tensor):
            found.setdefault(id(plain), plain)
    return list(found.values())


def is_quantized(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` stores its values in another form than its dtype (a quantized tensor subclass)."""
    return hasattr(tensor, "__tensor_flatten__")


def dense(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor``'s values as a plain float tensor (a quantized weight dequantized)."""
    return tensor.dequantize() if is_quantized(tensor) else tensor


def num_params(model) -> int:
    """Parameters, each shared (tied) tensor counted once."""
    return sum(p.numel() for p in model.parameters())


def weight_bytes(model) -> int:
    """Bytes of the model's parameters, counting each tensor in memory once (an offloaded one, on disk, too)."""
    seen: dict[int, int] = {}
    for p in model.parameters():
        for t in parts(p):  # a quantized weight's int8 values and scales
            seen[id(t) if t.device.type == "meta" else t.data_ptr()] = t.numel() * t.element_size()
    return sum(seen.values())
