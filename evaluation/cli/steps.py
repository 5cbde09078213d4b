"""The steps the families' flags add after the chosen cut (or, with --full, after the original)."""

from __future__ import annotations

from functools import reduce

from prune.core.calibration import Calibration
from prune.core.family import FAMILIES, step_families
from prune.core.paths import safe_name
from prune.core.recipe import Recipe


def adds_step(args) -> bool:
    """Whether a family's flag adds a step to the compared models."""
    return any(getattr(args, option.dest) is not None for f in FAMILIES.values() if f.flag for option in f.options[:1])


def extra_steps(args, calibration: Calibration, data_dir=None) -> list:
    """The checked steps the families' flags ask for, in the order they apply."""
    return [item for item in (f.from_args(args, calibration, data_dir) for f in step_families()) if item is not None]


def with_steps(cuts: dict[str, Recipe], steps: list) -> dict[str, Recipe]:
    """Each compared recipe followed by ``steps`` (with --full: the original followed by them)."""
    if not steps:
        return cuts
    suffix = "_".join(safe_name(s.short()) for s in steps)
    if not cuts:
        origin = "--full with " + " and ".join(s.short() for s in steps)
        return {suffix: reduce(Recipe.then, steps, Recipe(origin=origin))}
    return {f"{mode}_{suffix}": reduce(Recipe.then, steps, recipe) for mode, recipe in cuts.items()}
