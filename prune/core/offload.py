"""Models larger than the memory budget: loaded with accelerate's offloading, read from their files layer by layer.

:func:`placement` asks transformers for ``device_map="auto"`` within the budget: the modules that fit stay on
the device, the others stay in the checkpoint's safetensors files (read in place, nothing is copied) and
accelerate's hooks bring each one in for its forward pass and drop it after. Every forward-only path then
runs unchanged with one offloaded layer resident at a time: the analyses that read hidden states, depth cuts
and attention/MLP drops (views), perplexity, generation and benchmarks. Steps that build new weights and the
methods that need gradients say plainly that they need the model in memory.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import torch
from torch import nn

from prune.core.devices import available_memory_bytes
from prune.core.errors import ModelTooLarge
from prune.core.paths import cache_root

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
                            "are free for them (the memory budget, or less where less is free), and its folder holds no "
                            ".safetensors files to read layer by layer: raise LAYERCUT_MEMORY_BUDGET, free memory, "
                            "or save the model as safetensors.")


def is_offloaded(model: nn.Module) -> bool:
    """Whether some of ``model``'s weights live off its execution device (on disk, or in CPU memory beside a GPU)."""
    places = set((getattr(model, "hf_device_map", None) or {}).values())
    return "disk" in places or ("cpu" in places and bool(places - {"cpu", "disk"}))


def resident_bytes(model: nn.Module) -> int:
    """Bytes of ``model``'s weights held in memory now (an offloaded tensor is a placeholder on the meta device)."""
    seen = {t.data_ptr(): t.numel() * t.element_size()
            for t in (*model.parameters(), *model.buffers()) if t.device.type != "meta"}
    return sum(seen.values())


def _stored(module: nn.Module):
    """Where accelerate keeps ``module``'s offloaded tensors (by their names in the module), if it offloads them."""
    hook = getattr(module, "_hf_hook", None)
    return getattr(hook, "weights_map", None) if getattr(hook, "offload", False) else None


def weight_of(module: nn.Module) -> torch.Tensor:
    """``module.weight``, read from where accelerate keeps it when it is offloaded."""
    stored = _stored(module)
    return stored["weight"] if module.weight.device.type == "meta" and stored is not None else module.weight


def named_weights(model: nn.Module):
    """``(name, tensor)`` for every entry of the state dict, an offloaded one read from where accelerate keeps it
    (one tensor at a time: for fingerprints and counts, never the whole model at once)."""
    for module_name, module in model.named_modules():
        stored = _stored(module)
        for name, tensor in (*module._parameters.items(), *module._buffers.items()):
            if tensor is None or name in getattr(module, "_non_persistent_buffers_set", ()):
                continue
            if tensor.device.type == "meta" and stored is not None:
                tensor = stored[name]
            yield (f"{module_name}.{name}" if module_name else name), tensor


def parameters_read(model: nn.Module):
    """Each parameter once (a tied one once), an offloaded one read from where accelerate keeps it."""
    seen: set[int] = set()
    for module in model.modules():
        stored = _stored(module)
        for name, param in module._parameters.items():
            if param is None or id(param) in seen:
                continue
            seen.add(id(param))
            yield stored[name] if param.device.type == "meta" and stored is not None else param


def refuse(what: str, model: nn.Module) -> None:
    """A one-line refusal for work that needs every weight in memory at once, on an offloaded model."""
    if is_offloaded(model):
        raise ModelTooLarge(f"{what} needs the whole model in memory, and this model is larger than the memory "
                            "budget (it is read from its files layer by layer): raise LAYERCUT_MEMORY_BUDGET, or "
                            "use the analyses, depth cuts and attention/MLP drops, which run layer by layer.")
