"""``--recipe FILE``: the recipe an export recorded, read and checked once, so the command line can evaluate it again.

FILE is an export folder (its ``layercut.json``, else its ``config.json``), an export's ``layercut.json``
(the recipe and the base model's name), its ``config.json`` (the recipe under ``layercut``, no model
name), or a bare ``Recipe.to_json()``. Only ``layercut.json`` names the model the cut was made from.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from prune.core.errors import InvalidCut, InvalidInput, LayerCutError
from prune.core.recipe import CONFIG_FIELD, Recipe
from prune.core.step import kept_by_digest

from evaluation.exports.folder import MARKER

CONFIG = "config.json"
MODE = "recipe"  # the compared model's name in results, tables and file names


@dataclass(frozen=True)
class RecipeFile:
    """A checked recipe, where it was read, and the base model it names (None when the file names none)."""

    recipe: Recipe
    path: Path
    base_model: str | None = None

    def cuts(self, num_layers: int) -> dict[str, Recipe]:
        """The recipe as the command line's one compared model, refused for a model of another depth."""
        made_for = self.recipe.num_layers
        if made_for is not None and made_for != num_layers:
            raise InvalidCut(f"{self.path} holds a recipe made for a {made_for}-layer model; this model has "
                             f"{num_layers} layers: give --model the model it was made from.")
        return {MODE: self.recipe}


def read(name: str) -> RecipeFile:
    """The recipe in ``name`` (a file or an export folder), every step checked, or a one-line reason."""
    path = _recipe_path(Path(name).expanduser())
    data = _json(path)
    found = data.get("recipe", data.get(CONFIG_FIELD, data if "steps" in data else None))
    if not isinstance(found, dict):
        raise InvalidInput(f"{path} holds no LayerCut recipe: give an export folder, its {MARKER} or its {CONFIG}.")
    recipe = _checked(found, path)
    base = data.get("base_model") if "recipe" in data else None
    return RecipeFile(recipe, path, base if isinstance(base, str) and base else None)


def _recipe_path(path: Path) -> Path:
    """A folder's ``layercut.json``, else its ``config.json``; a file as it is."""
    if path.is_dir():
        for candidate in (path / MARKER, path / CONFIG):
            if candidate.is_file():
                return candidate
        raise InvalidInput(f"The folder {path} holds neither {MARKER} nor {CONFIG}: is it a LayerCut export?")
    if not path.is_file():
        raise InvalidInput(f"The recipe file {path} does not exist.")
    return path


def _json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise InvalidInput(f"Cannot read {path}: {err.strerror}.") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise InvalidInput(f"{path} is not JSON ({err}).") from None
    if not isinstance(data, dict):
        raise InvalidInput(f"{path} holds no LayerCut recipe: it is JSON, but not an object.")
    return data


def _checked(data: dict, path: Path) -> Recipe:
    """``Recipe.from_json`` (which checks each step) with the file named; a step that cannot be rebuilt refused."""
    steps = data.get("steps")
    if not isinstance(steps, list) or not all(isinstance(s, dict) for s in steps):
        raise InvalidInput(f"{path}: a recipe's steps are a list of objects, each with its 'kind'.")
    if not steps:
        raise InvalidInput(f"{path} holds the empty recipe (the original model): nothing to compare; use --full.")
    try:
        recipe = Recipe.from_json(data)
    except LayerCutError as err:
        raise type(err)(f"{path}: {err}") from None
    for index, step in enumerate(recipe.steps, 1):
        if any(kept_by_digest(value) for value in vars(step).values()):
            raise InvalidInput(f"{path}: step {index} ({step.short()}) was recorded with an inline calibration "
                               f"text kept only as its digest ({getattr(step, 'text_digest', None)}): give the text "
                               f"again to rebuild it (from Python or the app; the command line takes no inline text).")
    return recipe
