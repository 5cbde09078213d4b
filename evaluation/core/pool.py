"""The base models a server holds: loaded once, shared by every visitor, kept within a memory budget.

A visitor names a model by a :class:`ModelSpec`; :meth:`ModelPool.get` returns the loaded
model for it, loading it on first use. Loading never unloads another model unless the new
one needs the room (least recently used first), and a load that fails leaves every loaded
model in place. An evicted model is loaded again when a visitor next uses it.
"""

from __future__ import annotations

import gc
import hashlib
import hmac
import secrets
import threading
from collections import OrderedDict
from dataclasses import dataclass, field

import torch

import prune
from prune.core.family import refusals
from prune.core.architectures import CAUSAL, architecture_of, block_in, decoder_layers, kind_of
from prune.core.devices import available_memory_bytes, input_device, parse_dtype
from prune.core.loading import MEMORY_HEADROOM, check_model, is_default, weight_bytes_needed
from prune.core.offload import cpu_held_bytes, resident_bytes
from prune.core.paths import local_path
from prune.depth.scoring import model_fingerprint
from prune.drop.sublayers import ATTENTION, MLP
from prune.core.sizes import Size, size_of
from prune.core.storage import num_params, weight_bytes

from evaluation.core.timing import Rates


_ACCESS_KEY = secrets.token_bytes(32)  # per process: an access digest means nothing outside it


@dataclass(frozen=True)
class ModelSpec:
    """Which base model, and how to load it.

    A Hub model is keyed by the token that opened it (``access``, a keyed digest, never the token),
    so a gated model one visitor opened is never handed to a visitor without that token; the token
    itself is no part of the identity and never shown. The embedded model and local folders need no
    token (nor local .gguf files), so every visitor shares them.
    """

    name: str = prune.DEFAULT_MODEL
    dtype: str = "auto"
    trust_remote_code: bool = False
    revision: str | None = None
    token: str | None = field(default=None, compare=False, repr=False)
    access: str | None = field(default=None, init=False, repr=False)

    def __post_init__(self):
        local = local_path(self.name)  # a folder or a .gguf file on this machine: no token opens it
        needs_token = self.token and not is_default(self.name) and local is None
        digest = hmac.new(_ACCESS_KEY, self.token.encode(), hashlib.sha256).hexdigest()[:32] if needs_token else None
        object.__setattr__(self, "access", digest)

    @property
    def label(self) -> str:
        return prune.DEFAULT_MODEL if is_default(self.name) else self.name


@dataclass(frozen=True)
class ModelInfo:
    name: str
    num_layers: int
    num_params: int
    device: str
    dtype: str
    weight_bytes: int
    resident_bytes: int  # of the weights, held in memory (less than weight_bytes when read from disk layer by layer)
    size: Size  # what recipes change: each layer's parameters, the rest, the width structures
    cpu_held_bytes: int = 0  # of the weights not resident, those kept in CPU memory beside a GPU (the rest: in files)
    # parameters of each layer's attention and MLP block (0 where a block cannot be dropped)
    block_params: dict[str, tuple[int, ...]] = field(default_factory=dict, compare=False, hash=False)
    kind: str = CAUSAL  # or MASKED: an encoder, which fills blanks and generates nothing
    # {family label: the one line it refuses this model with} (prune.core.family.refusals): the picker says so
    refusals: dict[str, str] = field(default_factory=dict, compare=False, hash=False)
    # how fast it ran here when loaded (the page's estimates), carried with the info so it reaches every process
    rates: Rates | None = field(default=None, compare=False, hash=False)

    @property
    def layer_params(self) -> tuple[int, ...]:
        """Parameters of each decoder layer."""
        return self.size.layers

    def removed_params(self, recipe) -> int:
        """Parameters a recipe's variant has fewer, by arithmetic: depth cuts and width pruning through the
        steps' ``resize``, attention and MLP drops by their blocks' counts in the original (zeros still count)."""
        removed = self.num_params - recipe.size(self.size).total
        for layer, kinds in removed_blocks(recipe, self.num_layers).items():
            if "layer" not in kinds:  # whole layers are in the size already
                removed += sum(self.block_params.get(kind, (0,) * self.num_layers)[layer] for kind in kinds)
        return removed

    def describe_cut(self, recipe) -> str:
        """'layers 20–25 (6 of 30) = block [20, 26) — 16.9 M parameters (12.6 %)'."""
        removed = self.removed_params(recipe)
        return f"{recipe.describe()} — {removed / 1e6:.1f} M parameters ({100 * removed / self.num_params:.1f} %)"


@dataclass(frozen=True)
class Loaded:
    """A loaded base model: never altered; compared models derive from it by recipes."""

    spec: ModelSpec
    model: torch.nn.Module
    tokenizer: object
    info: ModelInfo
    fingerprint: str


def removed_blocks(recipe, num_layers: int) -> dict[int, set[str]]:
    """Base layer → what the recipe removes of it: {"layer"}, or some of {"attention", "mlp"} (each step says)."""
    base = list(range(num_layers))  # the base index of each current layer
    gone: dict[int, set[str]] = {}
    for step in recipe.steps:
        base = step.removed_blocks(base, gone)
    return gone


def describe(model, name: str) -> ModelInfo:
    """The facts the UI and the tables show about a model."""
    layers = decoder_layers(model)  # fails clearly for an architecture we cannot cut
    return ModelInfo(name=name, num_layers=len(layers), num_params=num_params(model),
                     device=str(input_device(model)), dtype=str(next(model.parameters()).dtype).removeprefix("torch."),
                     weight_bytes=weight_bytes(model), resident_bytes=resident_bytes(model), size=size_of(model),
                     cpu_held_bytes=cpu_held_bytes(model),
                     block_params=_block_params(model), kind=kind_of(model), refusals=refusals(model))


def _block_params(model) -> dict[str, tuple[int, ...]]:
    sub = architecture_of(model).sublayers
    names = {ATTENTION: sub.attention, MLP: sub.mlp}
    return {kind: tuple(sum(p.numel() for p in block.parameters()) if (block := block_in(layer, name)) else 0
                        for layer in decoder_layers(model)) for kind, name in names.items()}


class ModelPool:
    """Loaded base models by spec, least recently used first out when a new one needs room."""

    def __init__(self, device: str, budget_bytes: int | None = None):
        self.device = device
        self.budget_bytes = budget_bytes  # for the weights held, all models together; None: whatever is free
        self._loaded: OrderedDict[ModelSpec, Loaded] = OrderedDict()
        self._guard = threading.Lock()

    def peek(self, spec: ModelSpec) -> Loaded | None:
        """The loaded model for ``spec`` if it is loaded, without loading it."""
        with self._guard:
            found = self._loaded.get(spec)
            if found is not None:
                self._loaded.move_to_end(spec)
            return found

    def get(self, spec: ModelSpec) -> Loaded:
        """The loaded model for ``spec``, loading it now if needed (callers hold the device)."""
        found = self.peek(spec)
        if found is not None:
            return found
        config = check_model(spec.name, token=spec.token, revision=spec.revision,
                             trust_remote_code=spec.trust_remote_code)  # cheap: fails before anything is unloaded
        needed = weight_bytes_needed(config, parse_dtype(spec.dtype, self.device))
        if self.budget_bytes is not None:  # a model over the budget is read layer by layer, holding at most the budget
            needed = min(needed, int(self.budget_bytes / MEMORY_HEADROOM))
        self._make_room_for(needed)
        model, tokenizer = prune.load_model(spec.name, device=self.device, dtype=spec.dtype, token=spec.token,
                                            revision=spec.revision, trust_remote_code=spec.trust_remote_code,
                                            budget=self._room())
        return self.adopt(spec, model, tokenizer)

    def adopt(self, spec: ModelSpec, model, tokenizer) -> Loaded:
        """Serve a loaded model under ``spec`` (a fresh load, or one from ``prune.load_model`` in a notebook)."""
        loaded = Loaded(spec, model, tokenizer, describe(model, spec.label), model_fingerprint(model))
        with self._guard:
            self._loaded[spec] = loaded
        return loaded

    def models(self) -> list[torch.nn.Module]:
        with self._guard:
            return [item.model for item in self._loaded.values()]

    def loaded(self) -> list[ModelSpec]:
        with self._guard:
            return list(self._loaded)

    def _room(self) -> int | None:
        """What a new model's weights may take of the budget: what the loaded models leave of it."""
        if self.budget_bytes is None:
            return None
        with self._guard:
            return max(0, self.budget_bytes - sum(item.info.resident_bytes for item in self._loaded.values()))

    def _make_room_for(self, needed: int) -> None:
        """Unload least recently used models until ``needed`` more bytes of weights fit."""
        while True:
            with self._guard:
                held = sum(item.info.resident_bytes for item in self._loaded.values())
                over_budget = self.budget_bytes is not None and held + needed > self.budget_bytes
                short = needed * MEMORY_HEADROOM > available_memory_bytes(self.device)
                if not self._loaded or not (over_budget or short):
                    return
                self._loaded.popitem(last=False)
            gc.collect()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()

