"""Steps that build new weights, layer by layer: in memory, or into files of their own for a model read from disk.

:class:`Rebuild` gives a step the decoder layers to change, one at a time, and the model those changes make.
In memory, the layers are a clone's (:func:`prune.core.surgery.clone_layers`: the original is never altered). For a
model larger than the memory budget (read from its files by accelerate's offloading), each layer is read into
memory alone (:func:`prune.core.offload.materialized`), changed, written to its own safetensors file and dropped;
the rest of the model (embeddings, final norm, head) is then copied tensor by tensor, and the variant is loaded
from its folder as a model read from disk too. The same happens to a model in memory when the weights the variant
would own do not fit beside it (:func:`streams`: the memory budget, or the device's free memory, less what is
resident). A variant built from disk is read layer by layer: none of its weights stay in memory (on a GPU a sparse
or width-pruned one waits in CPU memory, a factored one in its files), so building it beside the original takes
about one layer more. The folder lives in the cache as long
as the variant does; a folder a crashed process left is removed by the next build.
"""

from __future__ import annotations

import copy
import gc
import json
import os
import shutil
import tempfile
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path

from torch import nn

from prune.core import offload
from prune.core.architectures import architecture_of, decoder_layers
from prune.core.budget import configured_budget
from prune.core.devices import free_on, input_device
from prune.core.loading import MEMORY_HEADROOM, auto_class
from prune.core.paths import cache_root
from prune.core.surgery import clone_layers

FOLDER = "variants"  # under the cache: one folder per variant built from disk, named "<pid>-…"
INDEX = "model.safetensors.index.json"
_MARK = "layercut_files"  # on a variant built into files: its folder
COLLECT_FROM_BYTES = 32 * 2**20  # a layer's weights from which its build is followed by a full garbage collection


def own_files(model: nn.Module) -> bool:
    """Whether ``model`` is a variant built into files of its own (its weights wait there when it is not brought in)."""
    return getattr(model, _MARK, None) is not None


def streams(model: nn.Module, owned_bytes: int, room: int | None = None) -> bool:
    """Whether a variant of ``model`` owning ``owned_bytes`` of new weights is built into files layer by layer: when
    ``model`` is read from disk, or those weights would not fit in memory beside it. ``room``: what will be free beside
    it, for a model waiting off the device that its build brings back (:mod:`prune.core.parking`)."""
    if room is not None:
        return owned_bytes * MEMORY_HEADROOM > room
    if offload.is_offloaded(model):
        return True
    device = input_device(model)
    room = free_on(device)
    budget = configured_budget()
    if budget is not None:
        room = min(room, budget - offload.resident_bytes(model))
    return owned_bytes * MEMORY_HEADROOM > room


class Rebuild:
    """The layers a step changes (``layers()``, then ``done(index, layer)`` after each) and the model they make;
    ``owned_bytes``: what the variant will own, which decides where it is built (:func:`streams`)."""

    def __init__(self, model: nn.Module, owned_bytes: int, reshape: Callable[[nn.Module], nn.Module] | None = None):
        """``reshape``: for a step whose layers are not a standard config's (factored low-rank projections), how a
        model built from the variant's config takes their shapes, so its files can be read into it."""
        self.streamed = streams(model, owned_bytes)
        self.source = model if self.streamed else clone_layers(model)  # what calibration runs through
        self.config = copy.deepcopy(model.config) if self.streamed else self.source.config  # the variant's own
        self.device = input_device(model)
        self._files = _LayerFiles(model, reshape) if self.streamed else None

    def layers(self) -> Iterator[tuple[int, nn.Module]]:
        """``(index, layer)``: the clone's own layer in memory; a materialized copy of an offloaded one."""
        for index, layer in enumerate(decoder_layers(self.source)):
            yield index, offload.materialized(layer, self.device) if self.streamed else layer

    def done(self, index: int, layer: nn.Module) -> None:
        """Layer ``index`` is final (the one given, or a new one built from it): written to the variant's folder
        when it is built into files, else put in the clone."""
        if self._files is not None:
            layer_bytes = offload.resident_bytes(layer)
            self._files.write(index, layer)
            # what a layer's work leaves in reference cycles goes now, not layers later (on an 8B-shaped model the
            # build's anonymous memory peaked at 8.29 GiB without this, 2.38 GiB with it); a full collection costs
            # about half a second in a process holding torch and transformers, which a small layer does not repay
            if layer_bytes >= COLLECT_FROM_BYTES:
                gc.collect()
        else:
            decoder_layers(self.source)[index] = layer

    def model(self) -> nn.Module:
        """The variant (of :attr:`config`): the clone, or the model loaded from the folder its layers were written
        to."""
        return self._files.finish(self.config) if self._files is not None else self.source


class _LayerFiles:
    def __init__(self, model: nn.Module, reshape):
        self.reshape = reshape
        root = cache_root() / FOLDER
        root.mkdir(exist_ok=True)
        remove_orphans(root)
        self.model = model
        self.folder = Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=root))
        self.prefix = architecture_of(model).layers
        self.weight_map: dict[str, str] = {}

    def write(self, index: int, layer: nn.Module) -> None:
        from safetensors.torch import save_file

        file = f"layer-{index:05d}.safetensors"
        tensors = {f"{self.prefix}.{index}.{name}": tensor.detach().contiguous()
                   for name, tensor in layer.state_dict().items()}
        save_file(tensors, str(self.folder / file), metadata={"format": "pt"})
        self.weight_map.update(dict.fromkeys(tensors, file))

    def finish(self, config) -> nn.Module:
        from safetensors.torch import save_file

        rest = ((name, tensor) for name, tensor in offload.named_weights(self.model, once=True)
                if not name.startswith(self.prefix + "."))
        for number, (name, tensor) in enumerate(rest):  # one file each: one large embedding in memory at a time
            file = f"rest-{number:05d}.safetensors"
            save_file({name: tensor.detach().contiguous()}, str(self.folder / file), metadata={"format": "pt"})
            self.weight_map[name] = file
        (self.folder / INDEX).write_text(json.dumps({"metadata": {}, "weight_map": self.weight_map}))
        config.save_pretrained(self.folder)
        variant = self._dispatched(config).eval()
        if getattr(self.model, "generation_config", None) is not None:
            variant.generation_config = copy.deepcopy(self.model.generation_config)
        weakref.finalize(variant, shutil.rmtree, str(self.folder), True)
        setattr(variant, _MARK, str(self.folder))
        return variant

    def _dispatched(self, config) -> nn.Module:
        """The variant built empty (and reshaped, for factored weights), each module's weights then read from the
        files for its pass, computing on the original's device (as accelerate's offloading reads a checkpoint's: one
        hook per module that holds tensors). ``from_pretrained`` with a device map would put a variant with nothing
        in GPU memory on the CPU, to compute there."""
        from accelerate import dispatch_model, init_empty_weights
        from accelerate.utils import find_tied_parameters

        with init_empty_weights():
            variant = auto_class(config).from_config(config, dtype=self.model.dtype)
        variant.tie_weights()  # neither from_config nor tie_weights ties inside init_empty_weights (transformers 5.24)
        variant = self.reshape(variant) if self.reshape is not None else variant
        index = {name: {"safetensors_file": str(self.folder / file), "weight_name": name}
                 for name, file in self.weight_map.items()}
        for group in find_tied_parameters(variant):  # a tied tensor was written under one of its names
            stored = next(index[name] for name in group if name in index)
            index.update({name: stored for name in group if name not in index})
        holders = {name: "disk" for name, module in variant.named_modules()
                   if module._parameters or module._buffers}  # each module holding tensors: read for its pass
        return dispatch_model(variant, holders, main_device=str(input_device(self.model)),
                              offload_dir=str(self.folder), offload_index=index)


def remove_orphans(root: Path) -> None:
    """Remove the variant folders of processes that ended (a crash, a kill) without removing their own."""
    for folder in root.iterdir():
        pid = folder.name.split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        pass
    return True
