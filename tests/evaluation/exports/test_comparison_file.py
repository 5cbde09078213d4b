"""A saved comparison: what goes in comes back out, and anything else is one line."""

from __future__ import annotations

import json
import math

import pytest

from evaluation.exports.comparison_file import Comparison
from evaluation.measure.measurement import Measurement
from prune.core.calibration import Calibration
from prune.core.errors import InvalidInput, LayerCutError
from prune.core.recipe import Recipe
from prune.sparsity.step import Sparsify

SLOTS = ("A", "B")
RESULTS = (Measurement("arc_easy acc", 61.5, "%", spread=2.1, spread_kind="stderr", group="benchmarks",
                       details={"n-samples": 200}),
           Measurement("arc_easy acc", 48.0, "%", model="A", group="benchmarks"),
           Measurement("wikitext2 perplexity", math.nan, "", higher_is_better=False, model="B", group="perplexity"))
SAVED = Comparison("SmolLM2-135M-Instruct", "auto",
                   {"A": Recipe.block(30, 20, 26, origin="by hand"), "B": Recipe((Sparsify.of("wanda", 0.5),))},
                   "B", RESULTS)


def test_a_comparison_comes_back_as_it_was_saved():
    back = Comparison.from_json(SAVED.to_json(), SLOTS)
    assert back.model == SAVED.model and back.dtype == "auto" and back.editing == "B"
    assert back.recipes == SAVED.recipes and back.recipes["A"].origin == "by hand"
    assert [m.to_dict() for m in back.results] == [m.to_dict() for m in RESULTS]
    assert math.isnan(back.results[2].value)
    empty = Comparison("m", recipes={"A": None, "B": Recipe.block(30, 1, 2)}, editing="A")
    assert Comparison.from_json(empty.to_json(), SLOTS).recipes == {"A": None, "B": Recipe.block(30, 1, 2)}


def _with(**changes) -> str:
    data = json.loads(SAVED.to_json())
    for path, value in changes.items():
        *parents, last = path.split("__")
        node = data
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        node[int(last) if isinstance(node, list) else last] = value
    return json.dumps(data)


@pytest.mark.parametrize("text, message", [
    ("{not json", "This file is not a saved LayerCut comparison: it is not JSON."),
    ("[1, 2]", "This file is not a saved LayerCut comparison."),
    (json.dumps({"steps": []}), "This file is not a saved LayerCut comparison."),
    (_with(version=2), "of a version this LayerCut reads (it reads version 1)"),
    (_with(model=""), "it names no model"),
    (_with(model=7), "it names no model"),
    (_with(slots={"C": None}), "its slots are not A, B"),
    (_with(slots=[]), "its slots are not A, B"),
    (_with(slots__A={"steps": [{"kind": "cut", "num_layers": 30, "layers": [40]}]}), "A's recipe in this file cannot"),
    (_with(slots__A={"steps": [{"kind": "teleport"}]}), "A's recipe in this file cannot be used"),
    (_with(slots__B={"steps": "wanda"}), "B's recipe in this file cannot be used"),
    (_with(slots__B=None), "a result belongs to 'B', which it does not hold"),
    (_with(results={"a": 1}), "its results are not a list"),
    (_with(results__0__value="high"), "one of its results is not a measurement"),
    (_with(results__0__name=None), "one of its results is not a measurement"),
    (_with(results__0__details=[1]), "one of its results is not a measurement"),
    (_with(results__0__spread="wide"), "one of its results is not a measurement"),
    (_with(results__0={"value": 1}), "one of its results is not a measurement"),
    (_with(results__0="x"), "one of its results is not a measurement"),
])
def test_anything_else_is_one_line(text, message):
    with pytest.raises(LayerCutError) as refused:
        Comparison.from_json(text, SLOTS)
    assert message in str(refused.value) and "\n" not in str(refused.value)


def test_a_recipe_calibrated_on_a_text_of_its_own_cannot_travel():
    own = Calibration(source="text", text="my private notes " * 50, n_samples=4, seq_len=32)
    saved = Comparison("m", recipes={"A": Recipe((Sparsify.of("wanda", 0.5, calibration=own),)), "B": None})
    assert "my private notes" not in saved.to_json()  # kept by its digest only
    with pytest.raises(InvalidInput, match="A was calibrated on a text of its own"):
        Comparison.from_json(saved.to_json(), SLOTS)
