"""What one browser session compares: its model, its analysis, its cuts A and B, its results.

A :class:`Session` lives in ``gr.State``, one per visitor; handlers take it and return a new
one. The backend holds no selection, so nothing one visitor does changes what another sees.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import prune
from evaluation.serving import Measurement, ModelInfo, ModelSpec
from prune.core.recipe import Recipe
from prune.experts.map import ExpertMap

SLOTS = ("A", "B")  # the compressed models compared with the original, in column order


@dataclass(frozen=True)
class Session:
    spec: ModelSpec | None = None
    info: ModelInfo | None = None
    result: prune.ImportanceResult | None = None  # the analysis on show
    origin: str = ""  # how the analysis was made: method and calibration, for the recipes it picks
    calibration: prune.Calibration | None = None  # the analysis's calibration and options, for its stability
    options: tuple[tuple[str, object], ...] = ()
    cuts: tuple[Recipe | None, Recipe | None] = (None, None)  # A, B
    editing: str = SLOTS[0]  # the slot the range, the heatmap and the presets edit
    results: tuple[Measurement, ...] = ()  # benchmark and perplexity results shown
    loading: str = ""  # a model being loaded: nothing of the previous model shows meanwhile
    experts: ExpertMap | None = None  # a mixture of experts' expert saliency on show (the expert heatmap)

    def variants(self) -> dict[str, Recipe]:
        """The compressed models to compare, label → recipe."""
        return {slot: cut for slot, cut in zip(SLOTS, self.cuts) if cut is not None}

    @property
    def other(self) -> str:
        """The slot not edited: where healing puts its model."""
        return next(slot for slot in SLOTS if slot != self.editing)

    def cut(self, slot: str | None = None) -> Recipe | None:
        return self.cuts[SLOTS.index(slot or self.editing)]

    def with_cut(self, recipe: Recipe | None, slot: str | None = None) -> Session:
        """This session with ``recipe`` in a slot; results shown for that slot's old cut are dropped."""
        slot = slot or self.editing
        cuts = tuple(recipe if s == slot else c for s, c in zip(SLOTS, self.cuts))
        return replace(self, cuts=cuts, results=tuple(m for m in self.results if m.model != slot))

    def with_block(self, start: int, end: int, origin: str) -> Session:
        """This session with the block ``[start, end)`` of its model as the edited slot's cut."""
        return self.with_cut(Recipe.block(self.info.num_layers, start, end, origin=origin))

    def with_results(self, measurements: list[Measurement]) -> Session:
        """Fresh results replace the ones they measure again; others stay."""
        fresh = {(m.group, m.name, m.model) for m in measurements}
        kept = [m for m in self.results if (m.group, m.name, m.model) not in fresh]
        return replace(self, results=(*kept, *measurements))

    def while_loading(self, name: str) -> Session:
        """What the page shows while ``name`` loads: no model, no analysis, no cut."""
        return Session(editing=self.editing, loading=name)

    def for_model(self, spec: ModelSpec, info: ModelInfo) -> Session:
        """A session on another model: nothing of the previous model's stays."""
        return Session(spec=spec, info=info, editing=self.editing)
