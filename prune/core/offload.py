"""Models larger than the memory budget: loaded with accelerate's offloading, read from their files layer by layer.

:func:`placement` asks transformers for ``device_map="auto"`` within the budget: the modules that fit stay on
the device, the others stay in the checkpoint's safetensors files (read in place, nothing is copied) and
accelerate's hooks bring each one in for its forward pass and drop it after. Every forward-only path then
runs unchanged with one offloaded layer resident at a time: the analyses that read hidden states, depth cuts
and attention/MLP drops (views), perplexity, generation and benchmarks. Steps that build new weights do it one
:func:`materialized` layer at a time (:mod:`prune.core.layer_files`), Taylor+ backpropagates one layer at a time;
healing says plainly that it needs the model in memory (:func:`refuse`).
"""

from __future__ import annotations

import copy
import hashlib
from pathlib import Path

import torch
from torch import nn

from prune.core.devices import available_memory_bytes
from prune.core.errors import ModelTooLarge
from prune.core.paths import cache_root
from prune.core.storage import held


def placement(device: str, budget_bytes: int, source: str) -> dict:
    """``from_pretrained`` arguments that keep the weights on ``device`` within ``budget_bytes`` (on CUDA, the rest
    in CPU memory first) and read the rest from the checkpoint's files."""
    if str(device).startswith("cuda"):
        index = torch.device(device).index or 0
        max_memory = {index: budget_bytes, "cpu": available_memory_bytes("cpu")}
    else:
        max_memory = {"cpu": budget_bytes}
    folder = cache_root() / "offload" / hashlib.sha256(source.encode()).hexdigest()[:16]
    return {"device_map": "auto", "max_memory": max_memory, "offload_folder": str(folder)}


def check_offloadable(source: str, name: str, needed: int, budget: int) -> None:
    """Offloading reads safetensors in place; a checkpoint without them (a GGUF, .bin weights) must fit whole."""
    folder = Path(source)
    if folder.is_dir() and not any(folder.glob("*.safetensors")):
        raise ModelTooLarge(f"{name} needs about {needed / 2**30:.1f} GiB for its weights, {budget / 2**30:.1f} GiB "
                            "are free for them (the memory budget, or less where less is free), and its folder holds "
                            "no .safetensors files to read layer by layer: raise LAYERCUT_MEMORY_BUDGET, free memory, "
                            "or save the model as safetensors.")


def is_offloaded(model: nn.Module) -> bool:
    """Whether some of ``model``'s weights live off its execution device (on disk, or in CPU memory beside a GPU)."""
    places = set((getattr(model, "hf_device_map", None) or {}).values())
    return "disk" in places or ("cpu" in places and bool(places - {"cpu", "disk"}))


def resident_bytes(model: nn.Module) -> int:
    """Bytes of ``model``'s weights held in memory now (an offloaded tensor is a placeholder on the meta device)."""
    seen = {t.data_ptr(): t.numel() * t.element_size() for t in held(model) if t.device.type != "meta"}
    return sum(seen.values())


def cpu_held_bytes(model: nn.Module) -> int:
    """Bytes of ``model``'s offloaded weights that accelerate keeps in CPU memory (beside a GPU), not in files."""
    total, seen = 0, set()
    for module in model.modules():
        stored = _stored(module)
        dataset = getattr(stored, "dataset", None)  # dispatch_model's loader, or cpu_offload's plain state dict
        in_memory = dataset if isinstance(dataset, dict) else getattr(dataset, "state_dict", None) or {}
        prefix = getattr(stored, "prefix", "")
        for name, tensor in (*module._parameters.items(), *module._buffers.items()):
            value = in_memory.get(f"{prefix}{name}") if tensor is not None and tensor.device.type == "meta" else None
            if value is not None and value.data_ptr() not in seen:  # a tied tensor is kept once
                seen.add(value.data_ptr())
                total += value.numel() * value.element_size()
    return total


def _stored(module: nn.Module):
    """Where accelerate keeps ``module``'s offloaded tensors (by their names in the module), if it offloads them."""
    hook = getattr(module, "_hf_hook", None)
    for one in getattr(hook, "hooks", None) or [hook]:  # a SequentialHook holds several (a layer rebuilt into files)
        if getattr(one, "offload", False):
            return getattr(one, "weights_map", None)
    return None


def _read(tensor: torch.Tensor, stored, name: str) -> torch.Tensor:
    """``tensor`` itself, or, where it is an offloaded placeholder, its value from where accelerate keeps it."""
    return stored[name] if tensor.device.type == "meta" and stored is not None else tensor


def weight_of(module: nn.Module, name: str = "weight") -> torch.Tensor:
    """``module.weight`` (or its tensor ``name``), read from where accelerate keeps it when it is offloaded."""
    return _read(getattr(module, name), _stored(module), name)


def named_weights(model: nn.Module, once: bool = False):
    """``(name, tensor)`` for every entry of the state dict, an offloaded one read from where accelerate keeps it
    (one tensor at a time: for fingerprints and counts, never the whole model at once); ``once``: a tied tensor
    under its first name only, as a checkpoint stores it."""
    seen: set[int] = set()
    for module_name, module in model.named_modules():
        stored = _stored(module)
        for name, tensor in (*module._parameters.items(), *module._buffers.items()):
            if tensor is None or name in getattr(module, "_non_persistent_buffers_set", ()):
                continue
            if once and id(tensor) in seen:
                continue
            seen.add(id(tensor))
            yield (f"{module_name}.{name}" if module_name else name), _read(tensor, stored, name)


def parameters_read(model: nn.Module):
    """Each parameter once (a tied one once), an offloaded one read from where accelerate keeps it."""
    seen: set[int] = set()
    for module in model.modules():
        stored = _stored(module)
        for name, param in module._parameters.items():
            if param is None or id(param) in seen:
                continue
            seen.add(id(param))
            yield _read(param, stored, name)


def materialized(module: nn.Module, device: torch.device | str) -> nn.Module:
    """A hook-free copy of ``module`` (one decoder layer) with every tensor its own and real on ``device``: an offloaded
    one read from where accelerate keeps it. What a step that builds new weights layer by layer works on."""
    copies: dict[int, torch.Tensor] = {}

    def real(tensor: torch.Tensor, stored, name: str) -> torch.Tensor:
        if id(tensor) not in copies:
            value = _read(tensor, stored, name)
            copies[id(tensor)] = value.detach().to(device=device, dtype=tensor.dtype, copy=True)
        return copies[id(tensor)]

    def bare(original: nn.Module) -> nn.Module:
        clone = copy.copy(original)
        for name, value in vars(original).items():
            if isinstance(value, dict):
                clone.__dict__[name] = type(value)() if name.startswith("_") and "hooks" in name else value.copy()
        for name in ("_hf_hook", "forward", "_old_forward"):  # accelerate's hook, and the forward it wraps
            clone.__dict__.pop(name, None)
        stored = _stored(original)
        for name, param in original._parameters.items():
            if param is not None:
                clone._parameters[name] = nn.Parameter(real(param, stored, name), requires_grad=False)
        for name, buffer in original._buffers.items():
            if buffer is not None:
                clone._buffers[name] = real(buffer, stored, name)
        for name, child in original._modules.items():
            clone._modules[name] = None if child is None else bare(child)
        return clone

    return bare(module)


def refuse(what: str, model: nn.Module) -> None:
    """A one-line refusal for work that needs every weight in memory at once, on an offloaded model."""
    if is_offloaded(model):
        raise ModelTooLarge(f"{what} needs the whole model in memory, and this model is larger than the memory "
                            "budget (it is read from its files layer by layer): raise LAYERCUT_MEMORY_BUDGET, or "
                            "use the analyses, cuts, drops, sparsity, width and low rank, which run layer by layer.")
