"""The attention/MLP drop family's recipe step, and what the family is (He et al. 2024)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import ClassVar

from torch import nn

from prune.core.architectures import decoder_layers
from prune.core.errors import InvalidCut
from prune.core.family import Family, Option, register_family
from prune.core.step import Progress, Step, step
from prune.drop.sublayers import ATTENTION, KINDS, MLP, check_drop, drop, restore


@step("drop")
@dataclass(frozen=True, eq=False)
class SubLayerDrop(Step):
    """Drop the attention and/or the MLP of some layers (He et al. 2024); each keeps its residual path.

    The view shares every kept weight with the model it applies to; a dropped attention stores no
    keys or values (see ``prune.drop.sublayers``).
    """

    kind: ClassVar[str]
    view: ClassVar[bool] = True
    attention: tuple[int, ...] = ()  # layers whose attention is dropped, 0-based, in the numbering of the model
    mlp: tuple[int, ...] = ()  # layers whose MLP is dropped
    num_layers: int = 0  # layers of the model the step applies to

    @classmethod
    def of(cls, num_layers: int, attention: Iterable[int] = (), mlp: Iterable[int] = ()) -> SubLayerDrop:
        """A checked drop (at least one block; never every attention)."""
        wanted = check_drop(int(num_layers), attention, mlp)
        return cls(wanted[ATTENTION], wanted[MLP], int(num_layers))

    @classmethod
    def from_record(cls, data: dict) -> SubLayerDrop:
        return cls.of(data.get("num_layers"), data.get("attention") or (), data.get("mlp") or ())

    def apply(self, model: nn.Module, tokenizer=None, progress: Progress | None = None) -> nn.Module:
        found = len(decoder_layers(model))
        if found != self.num_layers:
            raise InvalidCut(f"This drop was made for a {self.num_layers}-layer model; this one has {found}.")
        return drop(model, self.attention, self.mlp)

    def removed_blocks(self, base: list[int], gone: dict[int, set[str]]) -> list[int]:
        for kind, layers in ((ATTENTION, self.attention), (MLP, self.mlp)):
            for i in layers:
                gone.setdefault(base[i], set()).add(kind)
        return base

    def describe(self) -> str:
        """'attention dropped in layers 3, 7, 9 (3 of 30)', and the MLP's likewise."""
        parts = [f"{what} dropped in layer{'s' if len(layers) > 1 else ''} {', '.join(map(str, layers))} "
                 f"({len(layers)} of {self.num_layers})"
                 for what, layers in (("attention", self.attention), ("MLP", self.mlp)) if layers]
        return " and ".join(parts)

    def short(self) -> str:
        """A column title in plain words: 'no attention 20, 21', 'no MLP 3' or both."""
        return " ".join(f"no {what} {', '.join(map(str, layers))}"
                        for what, layers in (("attention", self.attention), ("MLP", self.mlp)) if layers)


FAMILY = register_family(Family(
    name="drop", label="Attention/MLP", step=SubLayerDrop,
    paper="He et al. 2024, What Matters in Transformers? Not All Attention Is Needed",
    link="https://arxiv.org/abs/2406.15786",
    about="Scores each layer's attention and MLP block (method sublayer), then drops the N lowest blocks; each "
          "layer keeps its residual path.",
    options=(Option("--drop", dict(choices=KINDS, default=None,
                                   help="with --method sublayer: drop the --num_layers lowest-scored attention (or "
                                        "MLP) blocks, wherever they are, instead of cutting whole layers "
                                        "(He et al. 2024)")),),
    restore=restore,
))
