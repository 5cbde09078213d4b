"""A recipe: how a compared model is derived from the original, as one frozen, hashable value.

A recipe is a tuple of steps applied in order (cut, drop attention or MLP blocks, sparsify, shrink
the width, decompose into low-rank factors, then heal, …). Each kind of step belongs to a family
(``prune/<family>/step.py``) and follows the protocol of :class:`~prune.core.step.Step`; a step is
checked once, when it is made for the model it applies to, and trusted afterwards. The recipe's
:attr:`Recipe.key` names every cache of what it derives, and :meth:`Recipe.apply` records the recipe
in the derived model's config (``config.layercut``), so a saved checkpoint says what was done to it.
The empty recipe is the original model. Steps that change the parameter count say how by arithmetic
(``resize``), so :meth:`Recipe.size` counts a variant's parameters without building it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field

from torch import nn

from prune.core.errors import InvalidInput
from prune.core.offload import refuse
from prune.core.paths import digest
from prune.core.sizes import Size
from prune.core.step import STEPS, Earlier, Progress, Step, from_json as step_from_json, to_json as step_to_json

CONFIG_FIELD = "layercut"  # the derived model's config records its recipe here


@dataclass(frozen=True)
class Recipe:
    """Steps applied in order to the original; ``origin`` says how it was chosen (not part of the key)."""

    steps: tuple = ()
    origin: str = field(default="", compare=False)

    def __post_init__(self):
        if self.steps and getattr(self.steps[0], "follows", False):
            raise InvalidInput(f"A {self.steps[0].kind} step follows a cut, a sparsification or a decomposition; "
                               f"it cannot come first.")
        for earlier, later in zip(self.steps, self.steps[1:]):
            if later.after is not None and earlier.kind != later.after:
                raise InvalidInput(f"A {later.kind} step follows a {later.after} step directly; here it follows "
                                   f"{earlier.short()}.")
        if self.steps and self.steps[0].after is not None:
            raise InvalidInput(f"A {self.steps[0].kind} step follows a {self.steps[0].after} step; it cannot come "
                               f"first.")
        for earlier in self.steps[:-1]:
            if earlier.last:
                raise InvalidInput(f"{earlier.describe().capitalize()} is the last step of a recipe: nothing may "
                                   f"follow it.")
        for index, earlier in enumerate(self.steps):
            for later in self.steps[index + 1:]:
                if earlier.kind in later.refuses_after:
                    raise InvalidInput(later.refuses_after[earlier.kind])

    @classmethod
    def cut(cls, num_layers: int, layers: Iterable[int], origin: str = "") -> Recipe:
        """The one-step recipe that removes ``layers`` (checked)."""
        return cls((STEPS["cut"].of(num_layers, layers),), origin)

    @classmethod
    def block(cls, num_layers: int, start: int, end: int, origin: str = "") -> Recipe:
        """The one-step recipe that removes the block ``[start, end)`` (checked)."""
        return cls((STEPS["cut"].block(num_layers, start, end),), origin)

    @classmethod
    def drop(cls, num_layers: int, attention: Iterable[int] = (), mlp: Iterable[int] = (), origin: str = "") -> Recipe:
        """The one-step recipe that drops the attention of layers ``attention`` and the MLP of ``mlp`` (checked)."""
        return cls((STEPS["drop"].of(num_layers, attention, mlp),), origin)

    @property
    def is_original(self) -> bool:
        return not self.steps

    @property
    def key(self) -> str:
        """A short stable digest of the steps: what names this recipe in every cache."""
        return digest([step_to_json(s) for s in self.steps])

    @property
    def num_layers(self) -> int | None:
        """The depth of the model the recipe was made for, where a step records it (cuts and drops do; no step
        before the first of them changes the depth)."""
        return next((s.num_layers for s in self.steps if hasattr(s, "num_layers")), None)

    def first(self, kind: str) -> Step | None:
        """The first step of ``kind`` ("cut", "drop", …), if any."""
        return next((s for s in self.steps if s.kind == kind), None)

    def last(self, kind: str) -> Step | None:
        """The last step of ``kind``, if any."""
        return next((s for s in reversed(self.steps) if s.kind == kind), None)

    @property
    def depth_cut(self) -> Step | None:
        """The first depth cut, which decides the layers the UI shows as removed."""
        return self.first("cut")

    @property
    def sparsity(self) -> Step | None:
        """The last sparsify step, which decides the zeros the variant holds."""
        return self.last("sparsify")

    @property
    def sublayer_drop(self) -> Step | None:
        """The first attention/MLP drop, which decides the blocks the UI shows as dropped."""
        return self.first("drop")

    def size(self, size: Size) -> Size:
        """The parameter count of the variant of a model of ``size``, by arithmetic (each step's ``resize``)."""
        for item in self.steps:
            size = item.resize(size)
        return size

    def stored_bytes(self, size: Size, element: int) -> int:
        """The weight bytes the variant of a model of ``size`` (``element`` bytes a dense parameter) holds as stored,
        by arithmetic: its parameters dense, then each step's storage (``Step.stored``: quantized matrices)."""
        after = self.size(size)
        stored = after.total * element
        for item in self.steps:
            stored = item.stored(after, element, stored)
        return stored

    def then(self, item) -> Recipe:
        """This recipe followed by one more step."""
        return Recipe((*self.steps, item), self.origin)

    def apply(self, model: nn.Module, tokenizer=None, progress: Progress | None = None) -> nn.Module:
        """The derived model (the original itself for the empty recipe; the original is never altered).

        ``tokenizer`` is the model's, for steps that calibrate; ``progress`` spans all the steps.
        """
        derived, before = model, None
        for index, item in enumerate(self.steps):
            if not (item.view or item.layerwise):
                refuse(f"Building {item.short()}", model)
            more = {"earlier": Earlier(model, before)} if item.reads_earlier else {}
            before, derived = derived, item.apply(derived, tokenizer, _span(progress, index, len(self.steps)), **more)
        if derived is not model:
            if derived.config is model.config:
                raise RuntimeError(f"A recipe step shared the original's config: {self.describe()}")
            stamp(derived, self)
        return derived

    def describe(self) -> str:
        return " → ".join(s.describe() for s in self.steps) if self.steps else "the original model"

    def short(self) -> str:
        return " ".join(s.short() for s in self.steps) if self.steps else "original"

    def to_json(self) -> dict:
        return {"steps": [step_to_json(s) for s in self.steps], "origin": self.origin}

    @classmethod
    def from_json(cls, data: dict | str) -> Recipe:
        """The recipe a JSON record holds; a one-line message when it holds none."""
        if isinstance(data, str):
            try:
                data = json.loads(data)
            except ValueError:
                raise InvalidInput("This recipe is not JSON.") from None
        steps = data.get("steps", []) if isinstance(data, dict) else None
        if not isinstance(steps, list):
            raise InvalidInput("A recipe is a JSON object with a list of steps.")
        return cls(tuple(step_from_json(s) for s in steps), str(data.get("origin", "")))


def _span(progress: Progress | None, index: int, steps: int) -> Progress | None:
    """Step ``index`` of ``steps``'s share of the whole recipe's progress."""
    if progress is None:
        return None
    return lambda fraction, message: progress((index + fraction) / steps, message)


def stamp(model: nn.Module, recipe: Recipe) -> None:
    """Record ``recipe`` in ``model``'s config (its own config, never the original's)."""
    setattr(model.config, CONFIG_FIELD, recipe.to_json())


def recipe_of(model: nn.Module) -> Recipe | None:
    """The recipe recorded in a derived (or reloaded) model's config, if any."""
    data = getattr(model.config, CONFIG_FIELD, None)
    return Recipe.from_json(data) if isinstance(data, dict) else None
