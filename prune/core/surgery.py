"""The cut: a pruned model that shares the kept layers' weights with the original.

Index convention (the one place it is defined): layers are 0-based; a block is
``[start, end)`` — ``start`` inclusive, ``end`` exclusive — so ``cut(model, 20, 26)``
removes layers 20, 21, 22, 23, 24, 25 (six layers). The command line's seed-compatible
``--end_block`` is inclusive and is converted at the edge.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable

from torch import nn

from prune.core.architectures import (PER_LAYER_INDEX_FIELDS, Architecture, architecture_of, check_stacks_kept,
                                      decoder_layers, get_path, stack_spans)
from prune.core.errors import InvalidCut, quoted


def largest_cut(num_layers: int) -> int:
    """A cut removes at least one layer and keeps at least one: 1 … L − 1 layers (the one home of that rule)."""
    return num_layers - 1


def check_cut_size(n: int, num_layers: int) -> int:
    """``n`` layers to cut, or a one-line message when a model of ``num_layers`` cannot lose that many."""
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= largest_cut(num_layers):
        raise InvalidCut(f"A block must have 1…{largest_cut(num_layers)} layers, not {quoted(n)}.")
    return n


def check_block(num_layers: int, start: int, end: int) -> None:
    """Reject empty, inverted, out-of-range and everything-removing blocks."""
    if not (isinstance(start, int) and isinstance(end, int)):
        raise InvalidCut(f"Block bounds must be whole numbers, got start={quoted(start)}, end={quoted(end)}.")
    if start < 0 or end > num_layers:
        raise InvalidCut(
            f"Block [{start}, {end}) is outside the model's layers 0…{num_layers - 1} "
            f"(start inclusive, end exclusive)."
        )
    if end <= start:
        raise InvalidCut(
            f"Block [{start}, {end}) is empty or inverted: end must be greater than start "
            f"(start inclusive, end exclusive)."
        )
    if end - start > largest_cut(num_layers):
        raise InvalidCut(f"Cutting layers {start}…{end - 1} would remove all {num_layers} layers.")


def check_layers(num_layers: int, layers: Iterable[int]) -> list[int]:
    """Validate an arbitrary set of layers to remove; return it sorted."""
    removed = sorted(set(int(i) for i in layers))
    if not removed:
        raise InvalidCut("No layers were selected to remove.")
    bad = [i for i in removed if not 0 <= i < num_layers]
    if bad:
        raise InvalidCut(f"Layers {bad} do not exist: the model has layers 0…{num_layers - 1}.")
    if len(removed) > largest_cut(num_layers):
        raise InvalidCut(f"Removing {len(removed)} layers would remove all {num_layers} layers.")
    return removed


def cut(model: nn.Module, start: int, end: int) -> nn.Module:
    """Remove the contiguous block [start, end); the original model is left untouched."""
    check_block(len(decoder_layers(model)), start, end)
    return remove_layers(model, range(start, end))


def remove_layers(model: nn.Module, layers: Iterable[int]) -> nn.Module:
    """Remove any set of layers; kept layers share their parameters with ``model``. A model of two stacks (T5)
    numbers them on one line (:func:`~prune.core.architectures.stack_spans`) and keeps a layer in each."""
    count = len(decoder_layers(model))
    removed = check_layers(count, layers)
    check_stacks_kept(model, removed)
    kept = [i for i in range(count) if i not in removed]

    config = _pruned_config(model, kept)
    pruned = layer_view(model, kept, config)
    config.layercut_removed_layers = sorted(removed_layers_of(model) + _original_indices(model, removed))
    return pruned


def layer_view(model: nn.Module, kept: list[int], config) -> nn.Module:
    """A view of ``model`` with ``config`` whose layer list holds clones of the layers ``kept``, renumbered.

    Everything on the path to the layer list and every module of a kept layer is a new object
    (so the view's modules can be replaced or hooked freely); parameters stay shared.
    """
    if architecture_of(model).stacks:
        view = _stacks_view(model, kept, config)
    else:
        view = _one_stack_view(model, kept, config)
    if getattr(model, "generation_config", None) is not None:
        view.generation_config = copy.deepcopy(model.generation_config)
    return view


def _one_stack_view(model: nn.Module, kept: list[int], config) -> nn.Module:
    path = architecture_of(model).layers.split(".")
    original_layers = decoder_layers(model)
    view = _clone_along(model, path, config)
    parent = view
    for name in path[:-1]:
        parent = getattr(parent, name)
    parent._modules[path[-1]] = nn.ModuleList(_renumbered(original_layers[i], new) for new, i in enumerate(kept))
    return view


def _stacks_view(model: nn.Module, kept: list[int], config) -> nn.Module:
    """:func:`layer_view` of a model of two stacks: each stack module (T5's encoder, decoder) cloned with its own
    config copy, its layer count set, and its kept layers renumbered from 0."""
    arch = architecture_of(model)
    view = shallow_clone(model)
    view.config = config
    for path, (_name, start, end) in zip(arch.stacks, stack_spans(model)):
        owner_name, list_name = path.split(".")
        owner, original = shallow_clone(getattr(model, owner_name)), get_path(model, path)
        local = [i - start for i in kept if start <= i < end]
        owner.config = copy.deepcopy(owner.config)
        owner.config.num_hidden_layers = len(local)
        owner._modules[list_name] = nn.ModuleList(_renumbered(original[i], new) for new, i in enumerate(local))
        _hand_over_first(arch, original, owner._modules[list_name], local)
        view._modules[owner_name] = owner
    return view


def _hand_over_first(arch: Architecture, original: nn.ModuleList, layers: nn.ModuleList, local: list[int]) -> None:
    """When a cut removes a stack's first layer, the new first layer takes what the first one held for the whole
    stack (T5's relative position bias), shared, so the kept layers read the positions they were trained with."""
    if arch.first_layer_owns is None or local[0] == 0:
        return
    path, name, flag = arch.first_layer_owns
    source, target = get_path(original[0], path), get_path(layers[0], path)
    target._modules[name] = source._modules[name]
    setattr(target, flag, True)


def clone_layers(model: nn.Module) -> nn.Module:
    """A copy of ``model`` with every layer's module objects and the config its own, the parameters shared.

    What a step that replaces some weights starts from: assigning a new parameter to one of its
    modules never reaches ``model``.
    """
    return layer_view(model, list(range(len(decoder_layers(model)))), copy.deepcopy(model.config))


def private_copy(model: nn.Module) -> nn.Module:
    """A copy of every module object of ``model`` without any hooks, parameters and buffers shared.

    What code runs when it must not take the device lock: hooks another job registers on
    ``model`` (capturing states, stopping a forward pass, checking its own cancellation) never
    fire in the copy, and hooks registered on the copy never reach ``model``.
    """
    memo: dict[int, nn.Module] = {}

    def copy_of(module: nn.Module) -> nn.Module:
        if id(module) not in memo:
            clone = shallow_clone(module)
            for name, value in list(vars(clone).items()):
                if name.startswith("_") and "hooks" in name and isinstance(value, dict):
                    clone.__dict__[name] = type(value)()
            memo[id(module)] = clone
            clone.__dict__["_modules"] = {k: None if child is None else copy_of(child)
                                          for k, child in module._modules.items()}
        return memo[id(module)]

    return copy_of(model)


def removed_layers_of(model: nn.Module) -> list[int]:
    """Layers (in the original model's numbering) that earlier cuts removed, as its config records."""
    return list(getattr(model.config, "layercut_removed_layers", None) or [])


def index_runs(indices) -> list[tuple[int, int]]:
    """Layer indices as their maximal contiguous blocks ``[start, end)``, in order."""
    found: list[list[int]] = []
    for i in sorted(indices):
        if found and found[-1][1] == i:
            found[-1][1] += 1
        else:
            found.append([i, i + 1])
    return [(a, b) for a, b in found]


def removed_between(before: nn.Module, after: nn.Module) -> list[int]:
    """The layers of ``before`` (in its numbering) that ``after``, a cut of it, no longer has, from the removed
    layers each config records in the original numbering."""
    gone, now = set(removed_layers_of(before)), set(removed_layers_of(after))
    kept = [i for i in range(len(decoder_layers(before)) + len(gone)) if i not in gone]  # before's original indices
    return [index for index, original in enumerate(kept) if original in now]


def _original_indices(model: nn.Module, removed_now: list[int]) -> list[int]:
    """Map indices of an already-pruned model back to the original numbering."""
    earlier = sorted(removed_layers_of(model))
    original_kept = [i for i in range(len(decoder_layers(model)) + len(earlier)) if i not in earlier]
    return sorted(original_kept[i] for i in removed_now)


def _pruned_config(model: nn.Module, kept: list[int]):
    """A config copy with the layer count and every per-layer list sliced to ``kept`` (for a model of two stacks,
    each stack's count; for a vision-language model, its text config's)."""
    config, arch = model.config, architecture_of(model)
    new = copy.deepcopy(config)
    if arch.stacks:
        for field, (_name, start, end) in zip(arch.stack_fields, stack_spans(model)):
            setattr(new, field, sum(start <= i < end for i in kept))
        return new
    _slice_layer_fields(getattr(new, arch.config_path) if arch.config_path else new, kept)
    return new


def _slice_layer_fields(config, kept: list[int]) -> None:
    """Every per-layer field of ``config`` (a copy) sliced to ``kept``, in place: lists as long as the layer count
    (layer kinds, sliding windows), lists of layer indices (:data:`PER_LAYER_INDEX_FIELDS`), and the rules that say
    which layers hold experts, rewritten as the explicit list a reload reads (:func:`_expert_layers`)."""
    old_count = config.num_hidden_layers
    experts = _expert_layers(config, old_count)
    for name, value in vars(config).items():
        if isinstance(value, (list, tuple)) and len(value) == old_count and name not in PER_LAYER_INDEX_FIELDS:
            setattr(config, name, type(value)(value[i] for i in kept))
    for name in PER_LAYER_INDEX_FIELDS:
        indices = getattr(config, name, None)
        if isinstance(indices, (list, tuple)) and all(isinstance(i, int) for i in indices):
            if len(indices) == old_count and set(indices) <= {0, 1}:  # a 0/1 flag per layer
                setattr(config, name, [indices[i] for i in kept])
            else:  # a list of layer indices
                setattr(config, name, [kept.index(i) for i in indices if i in kept])
    if experts is not None:
        _set_expert_layers(config, [new for new, i in enumerate(kept) if i in experts], len(kept))
    config.num_hidden_layers = len(kept)


def _expert_layers(config, count: int) -> set[int] | None:
    """The layers that hold experts where a rule says so (DeepSeek's and GLM's first dense layers, Qwen-MoE's sparse
    step and MLP-only layers, Llama 4's interleave step), or None where no rule is read."""
    if getattr(config, "first_k_dense_replace", None) is not None:
        return set(range(config.first_k_dense_replace, count))
    if getattr(config, "decoder_sparse_step", None) is not None:
        dense = set(getattr(config, "mlp_only_layers", None) or ())
        step = config.decoder_sparse_step
        return {i for i in range(count) if i not in dense and step > 0 and (i + 1) % step == 0}
    return None


def _set_expert_layers(config, layers: list[int], count: int) -> None:
    """The rule of :func:`_expert_layers` rewritten so that exactly ``layers`` (of ``count``) hold experts."""
    if getattr(config, "first_k_dense_replace", None) is not None:
        if layers != list(range(count - len(layers), count)):
            raise InvalidCut("This cut would leave a layer of experts before a dense one, which the config's "
                             "first_k_dense_replace cannot say.")
        config.first_k_dense_replace = count - len(layers)
    else:
        config.decoder_sparse_step = 1
        config.mlp_only_layers = [i for i in range(count) if i not in layers]


def shallow_clone(module: nn.Module) -> nn.Module:
    """A new module object sharing parameters, with its own submodule/hook dicts."""
    clone = copy.copy(module)
    for name, value in vars(module).items():
        if isinstance(value, dict):
            clone.__dict__[name] = value.copy()
    if "_hf_hook" in vars(module):  # accelerate's dispatch hook binds forward to the old object
        from accelerate.hooks import add_hook_to_module

        hook = clone.__dict__.pop("_hf_hook")
        clone.__dict__.pop("forward", None)
        clone.__dict__.pop("_old_forward", None)
        add_hook_to_module(clone, hook)
    return clone


def _clone_along(root: nn.Module, path: list[str], config, old=None) -> nn.Module:
    """Clone every module on the path to the layer list, pointing them at the new config (a module that holds the
    old config's text config, a VLM's text decoder, at the new one's)."""
    old = root.config if old is None else old
    clone = shallow_clone(root)
    held = getattr(root, "config", None)
    if held is old:
        clone.config = config
    elif held is not None and held is getattr(old, "text_config", None):
        clone.config = config.text_config
    if len(path) > 1:
        clone._modules[path[0]] = _clone_along(getattr(root, path[0]), path[1:], config, old)
    return clone


def _renumbered(layer: nn.Module, new_idx: int) -> nn.Module:
    """A clone of ``layer`` (and of every submodule, so hooks and attributes set on the
    pruned model never reach the original) whose attention modules carry the new index,
    which is their KV-cache slot. Parameters stay shared."""
    clone = shallow_clone(layer)
    if "layer_idx" in vars(clone):
        clone.layer_idx = new_idx
    for name, child in layer._modules.items():
        if child is not None:
            clone._modules[name] = _renumbered(child, new_idx)
    return clone
