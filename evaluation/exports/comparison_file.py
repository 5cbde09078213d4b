"""A comparison saved as a small JSON file: the model, the recipe of each compared slot and the results shown, so
the page can open the same comparison again (``ui.page.share``).

What travels is only what rebuilds the comparison: the model's name and precision, each slot's recipe
(``Recipe.to_json``) and the measurements (``Measurement.to_dict``). No access token and no permission to run a
model's own code travel with it: whoever opens the file gives those themselves. Reading checks everything once
and refuses anything else with one line.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from evaluation.measure.measurement import ORIGINAL, Measurement
from prune.core.errors import InvalidInput, LayerCutError, quoted
from prune.core.recipe import Recipe
from prune.core.step import kept_by_digest

FORMAT = "layercut-comparison"
VERSION = 1
MAX_BYTES = 2**20  # a comparison is a few kilobytes; anything near this is not one
NOT_ONE = "This file is not a saved LayerCut comparison"


@dataclass(frozen=True)
class Comparison:
    """A model, the recipes of its slots (None: empty), the slot being edited, and the results shown."""

    model: str
    dtype: str = "auto"
    recipes: dict[str, Recipe | None] = field(default_factory=dict)
    editing: str = ""
    results: tuple[Measurement, ...] = ()

    def to_json(self) -> str:
        return json.dumps({
            "format": FORMAT, "version": VERSION, "model": self.model, "dtype": self.dtype, "editing": self.editing,
            "slots": {slot: recipe.to_json() if recipe is not None else None for slot, recipe in self.recipes.items()},
            "results": [m.to_dict() for m in self.results]}, indent=1)

    @classmethod
    def from_json(cls, text: str, slots: tuple[str, ...]) -> Comparison:
        """The comparison ``text`` holds for a page with ``slots``, every part checked, or a one-line reason."""
        try:
            data = json.loads(text)
        except ValueError:
            raise InvalidInput(f"{NOT_ONE}: it is not JSON.") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise InvalidInput(f"{NOT_ONE}.")
        if data.get("version") != VERSION:
            raise InvalidInput(f"{NOT_ONE} of a version this LayerCut reads (it reads version {VERSION}).")
        model, dtype = data.get("model"), data.get("dtype", "auto")
        if not isinstance(model, str) or not model.strip() or not isinstance(dtype, str):
            raise InvalidInput(f"{NOT_ONE}: it names no model.")
        recipes = _recipes(data.get("slots"), slots)
        editing = data.get("editing") if data.get("editing") in slots else slots[0]
        return cls(model.strip(), dtype, recipes, editing, _results(data.get("results", []), recipes))


def _recipes(found, slots: tuple[str, ...]) -> dict[str, Recipe | None]:
    if not isinstance(found, dict) or not set(found) <= set(slots):
        raise InvalidInput(f"{NOT_ONE}: its slots are not {', '.join(slots)}.")
    recipes = {}
    for slot in slots:
        data = found.get(slot)
        if data is None:
            recipes[slot] = None
            continue
        try:
            recipe = Recipe.from_json(data)
        except LayerCutError as err:
            raise InvalidInput(f"{slot}'s recipe in this file cannot be used: {err}") from None
        except (TypeError, ValueError, KeyError, AttributeError):
            raise InvalidInput(f"{slot}'s recipe in this file is not one LayerCut reads.") from None
        if any(kept_by_digest(value) for step in recipe.steps for value in vars(step).values()):
            raise InvalidInput(f"{slot} was calibrated on a text of its own, which the file keeps by its digest only: "
                               "it cannot be rebuilt from the file.")
        recipes[slot] = recipe if recipe.steps else None
    return recipes


_TYPES = {"name": str, "unit": str, "spread_kind": str, "model": str, "group": str, "details": dict}


def _well_typed(m: Measurement) -> bool:
    """Each field of the type the tables and plots take (a file may hold anything)."""
    return (all(isinstance(getattr(m, name), kind) for name, kind in _TYPES.items())
            and m.higher_is_better in (True, False, None) and not math.isinf(m.value)
            and all(v is None or isinstance(v, (int, float)) and not isinstance(v, bool) for v in (m.spread, m.ideal)))


def _results(found, recipes: dict[str, Recipe | None]) -> tuple[Measurement, ...]:
    """The measurements of the original and of the slots that hold a model; anything else refused."""
    if not isinstance(found, list):
        raise InvalidInput(f"{NOT_ONE}: its results are not a list.")
    models = {ORIGINAL, *(slot for slot, recipe in recipes.items() if recipe is not None)}
    results = []
    for data in found:
        try:
            measurement = Measurement.from_dict(data)
            valid = _well_typed(measurement)
        except (TypeError, ValueError, AttributeError):
            valid = False
        if not valid:
            raise InvalidInput(f"{NOT_ONE}: one of its results is not a measurement.")
        if measurement.model not in models:
            raise InvalidInput(f"{NOT_ONE}: a result belongs to {quoted(measurement.model)}, which it does not hold.")
        results.append(measurement)
    return tuple(results)
