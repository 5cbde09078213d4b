"""Move a whole model off its device and back, in place: how models that are not computing make room for one that is.

A model in memory (a base model) is parked tensor by tensor, in place: each parameter and buffer object stays the same
and its data moves, so the depth cuts, drops and private copies that share those objects move with it. Beside a GPU
its data waits in CPU memory (copied the first time and kept: weights never change, so parking it again copies
nothing); on a CPU it waits in a file of its own, memory-mapped (written the first time), and the memory it took is
handed back to the system. A parked model still computes: on a CPU from the mapped file, page by page; beside a GPU,
on the CPU. :func:`bring` puts the data back on the GPU; on a CPU the mapped pages come back as they are read.

A variant built into files of its own (:mod:`prune.core.layer_files`) waits there from the start, under accelerate's
hooks that read each module's weights for its pass; :func:`bring_from_files` removes the hooks and reads every weight
onto the device, and :func:`park_in_files` re-attaches them (its files still hold every weight).
"""

from __future__ import annotations

import mmap
import os
import shutil
import tempfile
import weakref
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from prune.core.devices import accelerate_hooks
from prune.core.storage import held
from prune.core.layer_files import remove_orphans
from prune.core.paths import cache_root

FOLDER = "parked"  # under the cache: the file a model parked on a CPU waits in, one folder per model
_ALIGN = 64  # bytes: each tensor's offset in the parked file


@dataclass
class Stored:
    """Where a model in memory waits: each tensor's data by the tensor's id (CPU copies, or views of a mapped file)."""

    data: dict[int, torch.Tensor] = field(default_factory=dict)
    mapped: mmap.mmap | None = None  # the file's mapping on a CPU (None: CPU copies, beside a GPU)

    def release_pages(self) -> None:
        """Hand the mapped pages read so far back to the system (they are read from the file again when needed)."""
        if self.mapped is not None:
            self.mapped.madvise(mmap.MADV_DONTNEED)


@dataclass
class Hooked:
    """A variant from files, brought in: its hooks, re-attached to park it (their weights maps read its files)."""

    hooks: dict[str, object]  # module name → accelerate's hook
    device_map: dict


def tensors(model: nn.Module) -> list[torch.Tensor]:
    """Every plain tensor behind ``model``'s parameters and buffers (a quantized weight's parts), a shared one once."""
    return held(model)


def parked_bytes(model: nn.Module) -> int:
    """Bytes of every parameter and buffer (what parking a model in memory moves), a shared one once."""
    return sum(t.numel() * t.element_size() for t in tensors(model))


def waiting_bytes(model: nn.Module) -> int:
    """Bytes that bringing a variant from files puts on its device: its offloaded tensors, a tied one once."""
    later = _later(model)
    named = (*model.named_parameters(remove_duplicate=False), *model.named_buffers(remove_duplicate=False))
    found = {id(t): t.numel() * t.element_size() for name, t in named if t.device.type == "meta" and name not in later}
    return sum(found.values())


def in_files(model: nn.Module) -> bool:
    """Whether some of ``model``'s weights wait offloaded (placeholders on the meta device)."""
    return any(t.device.type == "meta" for t in (*model.parameters(), *model.buffers()))


def placed_bytes(models: Iterable[nn.Module], device: torch.device, skip: set[int] = frozenset()) -> int:
    """Bytes of the tensors ``models`` hold on ``device`` now, one they share once, those whose data is in ``skip``
    (pointers: a parked model's mapped file) left out."""
    seen: dict[int, int] = {}
    for model in models:
        for tensor in held(model):
            if _on(tensor, device) and tensor.data_ptr() not in skip:
                seen[tensor.data_ptr()] = tensor.numel() * tensor.element_size()
    return sum(seen.values())


def park(model: nn.Module, device: torch.device, stored: Stored | None = None) -> Stored:
    """Move the data of every tensor of ``model`` (whole on ``device``) off it, in place: beside a GPU to CPU memory,
    on a CPU to a memory-mapped file; ``stored``: where it waited the last time, which still holds it."""
    if stored is None:
        stored = _to_file(model) if device.type == "cpu" else _to_cpu(model)
    for tensor in tensors(model):
        if id(tensor) in stored.data:
            tensor.data = stored.data[id(tensor)]
    stored.release_pages()
    return stored


def bring(model: nn.Module, device: torch.device, stored: Stored) -> None:
    """Put the data of every tensor of a parked ``model`` back on ``device`` (on a CPU it is read from the mapped file
    as it is used: nothing to copy)."""
    if device.type == "cpu":
        return
    for tensor in tensors(model):
        if id(tensor) in stored.data:
            tensor.data = stored.data[id(tensor)].to(device)


def bring_from_files(model: nn.Module, device: torch.device) -> Hooked:
    """Put every weight of a variant read from its files on ``device`` and remove its hooks."""
    from accelerate.hooks import remove_hook_from_module
    from accelerate.utils import retie_parameters

    named = dict(model.named_modules())
    hooks = {name: module._hf_hook for name, module in named.items() if hasattr(module, "_hf_hook")}
    device_map = dict(getattr(model, "hf_device_map", None) or {"": "disk"})
    tied, later = _tied(model), _later(model)  # a tied target is read once, through its source: no second copy
    meta = torch.device("meta")
    for module_name in hooks:
        for one in accelerate_hooks(named[module_name]):
            if getattr(one, "offload", False):  # the device each tensor goes to when the hook comes off
                one.original_devices = {
                    name: meta if _full(module_name, name) in later else (device if was.type == "meta" else was)
                    for name, was in one.original_devices.items()}
    remove_hook_from_module(model, recurse=True)
    retie_parameters(model, tied)
    model.to(device)
    model.__dict__.pop("hf_device_map", None)
    return Hooked(hooks, device_map)


def park_in_files(model: nn.Module, hooked: Hooked) -> None:
    """Re-attach a brought variant's hooks: its weights wait in its files again."""
    from accelerate.hooks import add_hook_to_module
    from accelerate.utils import retie_parameters

    named = dict(model.named_modules())
    for name, hook in hooked.hooks.items():
        add_hook_to_module(named[name], hook)
    retie_parameters(model, _tied(model))
    model.hf_device_map = dict(hooked.device_map)


def _to_cpu(model: nn.Module) -> Stored:
    return Stored({id(t): t.detach().to("cpu", copy=True) for t in tensors(model) if t.numel()})


def _to_file(model: nn.Module) -> Stored:
    """Write every tensor of ``model`` into one file of its own, map it, and view each tensor in the mapping."""
    kept = [t for t in tensors(model) if t.numel()]
    offsets, end = [], 0
    for tensor in kept:
        offsets.append(end)
        end = -(-(end + tensor.numel() * tensor.element_size()) // _ALIGN) * _ALIGN
    path = _folder(model) / "weights.bin"
    with open(path, "wb") as out:
        out.truncate(max(end, 1))
        for tensor, offset in zip(kept, offsets):
            out.seek(offset)
            out.write(_raw(tensor))
    with open(path, "r+b") as file:
        mapped = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_COPY)  # private: nothing is written back
    data = {id(t): torch.frombuffer(mapped, dtype=torch.uint8, count=t.numel() * t.element_size(), offset=offset)
            .view(t.dtype).view(t.shape) for t, offset in zip(kept, offsets)}
    return Stored(data, mapped)


def _raw(tensor: torch.Tensor) -> memoryview:
    flat = tensor.detach().to("cpu").contiguous().reshape(-1)
    return memoryview(flat.view(torch.uint8).numpy()).cast("B")


def _tied(model: nn.Module) -> list[list[str]]:
    """``[source, target]`` for each tied pair, as transformers declares them (accelerate's search for shared
    parameters finds none on a model whose hooks ran: each pass leaves a placeholder of its own in each module)."""
    return [[source, target] for target, source in (getattr(model, "all_tied_weights_keys", None) or {}).items()]


def _later(model: nn.Module) -> set[str]:
    """The names of the tied targets: one tensor with their sources, counted and read through those."""
    return {target for _, target in _tied(model)}


def _full(module_name: str, name: str) -> str:
    return f"{module_name}.{name}" if module_name else name


def _on(tensor: torch.Tensor, device: torch.device) -> bool:
    return tensor.device.type == device.type and (tensor.device.index or 0) == (device.index or 0)


def _folder(model: nn.Module) -> Path:
    """A folder of this process for ``model``'s parked file, removed with the model (or, after a crash, by
    :func:`prune.core.layer_files.remove_orphans` of the next process)."""
    root = cache_root() / FOLDER
    root.mkdir(parents=True, exist_ok=True)
    remove_orphans(root)
    folder = Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=root))
    weakref.finalize(model, shutil.rmtree, str(folder), True)
    return folder
