"""The method picker: depth methods (importance scores, then a cut), width and low-rank methods (a recipe step).

Depth methods are the importance methods of ``prune.METHODS``: *Analyze* scores every layer and
a cut is chosen from the scores. The others change every layer instead: sparsity zeroes weights
(magnitude, Wanda, SparseGPT; unstructured or N:M), width pruning shrinks the matrices, low-rank
decomposition factors them (feature or weight space); *Build* puts one in the edited slot as a
recipe step (alone, or after that slot's cut).
"""

from __future__ import annotations

from dataclasses import dataclass

import prune
from prune.core.calibration import Calibration
from prune.core.errors import InvalidInput, UnknownMethod, quoted
from prune.lowrank.decomposition import DESCRIPTIONS as LOWRANK_DESCRIPTIONS
from prune.core.recipe import Decompose, Sparsify, WidthPrune
from prune.sparsity.masks import MAX_SPARSITY, PATTERNS
from prune.width.shrink import DESCRIPTION as WIDTH_DESCRIPTION

WIDTH = "width"  # structured width pruning; the sparsity methods keep prune.sparsity.masks's names
LOWRANK = "lowrank-"  # + the space: "lowrank-feature", "lowrank-weight"


@dataclass(frozen=True)
class WidthMethod:
    name: str
    label: str
    description: str
    group: str = "Width"  # the picker's group: "Width" or "Low-rank"

    @property
    def sparsity(self) -> bool:
        """Whether the level is a sparsity (else: the share of parameters kept)."""
        return self.group == "Width" and self.name != WIDTH


_DENSE = ("Zeros are stored densely: no memory saving, and no speedup with dense kernels "
          "(2:4 on an NVIDIA Ampere or newer GPU runs through PyTorch's semi-structured sparse kernels).")
WIDTH_METHODS = {m.name: m for m in (
    WidthMethod("magnitude", "Magnitude sparsity", "zeroes the smallest |W| of each layer's matrices; reads no data. "
                + _DENSE),
    WidthMethod("wanda", "Wanda sparsity (Sun et al. 2023)",
                "zeroes the lowest |W_ij|·‖X_j‖ within each output row, layer by layer on calibration inputs "
                "that passed through the already-pruned layers. " + _DENSE),
    WidthMethod("sparsegpt", "SparseGPT (Frantar & Alistarh 2023)",
                "second-order pruning: blocks of 128 columns, 1 % dampening, the kept weights updated to "
                "reconstruct each layer's output on calibration inputs (per-layer progress). " + _DENSE),
    WidthMethod(WIDTH, "Width pruning (Wanda-sp: heads and MLP channels)", WIDTH_DESCRIPTION),
    *(WidthMethod(LOWRANK + space, label, LOWRANK_DESCRIPTIONS[space], "Low-rank")
      for space, label in (("feature", "Feature space (Chavan et al. 2024)"), ("weight", "Weight space (truncated SVD)"))),
)}
LEVEL_DEFAULTS = {True: 50, False: 80}  # sparsity %, parameters kept %


def method_choices() -> list[tuple[str, str]]:
    """(label, name) for the picker: depth methods first, then width methods, each group named in its labels."""
    return ([(f"Depth · {m.label}", m.name) for m in prune.METHODS.values()]
            + [(f"{m.group} · {m.label}", m.name) for m in WIDTH_METHODS.values()])


def check_method(name) -> str:
    """A method of the picker (depth or width), or a one-line message naming the known ones."""
    if not isinstance(name, str) or (name not in prune.METHODS and name not in WIDTH_METHODS):
        raise UnknownMethod(f"Unknown method {quoted(name)}. Known methods: "
                            f"{', '.join([*prune.METHODS, *WIDTH_METHODS])}.")
    return name


def is_width(name: str) -> bool:
    return name in WIDTH_METHODS


def width_markdown(name: str) -> str:
    method = WIDTH_METHODS[name]
    return f"**{method.label}**: *{method.description}*"


def level_slider(name: str) -> dict:
    """The level slider's settings for a width method: sparsity % or parameters kept %."""
    if WIDTH_METHODS[name].sparsity:
        return dict(label="Sparsity (% of each matrix zeroed; N:M patterns imply theirs)", minimum=0,
                    maximum=round(100 * MAX_SPARSITY), value=LEVEL_DEFAULTS[True])
    return dict(label="Parameters kept (%)", minimum=10, maximum=99, value=LEVEL_DEFAULTS[False])


def step_for(name: str, level: float, pattern: str, calibration: Calibration):
    """The recipe step a width method builds at ``level`` % (the steps check their values)."""
    if name not in WIDTH_METHODS:
        raise InvalidInput(f"{quoted(name)} is not a width method; choose one of {', '.join(WIDTH_METHODS)}.")
    if name == WIDTH:
        return WidthPrune.of(level / 100, calibration)
    if name.startswith(LOWRANK):
        return Decompose.of(name.removeprefix(LOWRANK), param_ratio=level / 100, calibration=calibration)
    if pattern not in PATTERNS:
        raise InvalidInput(f"Choose a pattern among {', '.join(PATTERNS)}.")
    structured = pattern != "unstructured"
    return Sparsify.of(name, None if structured else level / 100, pattern, calibration)
