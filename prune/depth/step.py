"""The depth family's recipe step, and what the family is: whole decoder layers removed."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import ClassVar

from torch import nn

from prune.core.architectures import decoder_layers
from prune.core.errors import InvalidCut
from prune.core.family import Family, register_family
from prune.core.sizes import Size
from prune.core.step import Estimate, Progress, Step, step
from prune.core.surgery import check_block, check_layers, remove_layers


@step("cut")
@dataclass(frozen=True, eq=False)
class DepthCut(Step):
    """Remove whole decoder layers; the kept layers share their weights with the model cut."""

    kind: ClassVar[str]
    view: ClassVar[bool] = True
    layers: tuple[int, ...]  # removed, 0-based, in the numbering of the model the step applies to
    num_layers: int  # layers of that model

    @classmethod
    def of(cls, num_layers: int, layers: Iterable[int]) -> DepthCut:
        """A checked cut of any set of layers (never empty, never all of them)."""
        return cls(tuple(check_layers(int(num_layers), layers)), int(num_layers))

    @classmethod
    def block(cls, num_layers: int, start: int, end: int) -> DepthCut:
        """A checked cut of the block ``[start, end)``, end exclusive."""
        check_block(int(num_layers), start, end)
        return cls(tuple(range(start, end)), int(num_layers))

    @classmethod
    def from_record(cls, data: dict) -> DepthCut:
        return cls.of(data.get("num_layers"), data.get("layers") or ())

    @property
    def span(self) -> tuple[int, int] | None:
        """``(start, end)`` when the removed layers are contiguous, else None."""
        first, last = self.layers[0], self.layers[-1]
        return (first, last + 1) if last - first + 1 == len(self.layers) else None

    def apply(self, model: nn.Module, tokenizer=None, progress: Progress | None = None) -> nn.Module:
        found = len(decoder_layers(model))
        if found != self.num_layers:
            raise InvalidCut(f"This cut was made for a {self.num_layers}-layer model; this one has {found}.")
        return remove_layers(model, self.layers)

    def resize(self, size: Size) -> Size:
        """The size without the removed layers."""
        kept = [i for i in range(len(size.layers)) if i not in self.layers]
        return replace(size, layers=tuple(size.layers[i] for i in kept),
                       matrices=tuple(size.matrices[i] for i in kept) if size.matrices else ())

    def estimate(self, found: Estimate, after: Size) -> Estimate:
        """A cut owns nothing; applied (a cheap view) so that a later step counts only the kept layers."""
        return replace(found, model=self.apply(found.model)) if found.built else found

    def removed_blocks(self, base: list[int], gone: dict[int, set[str]]) -> list[int]:
        for i in self.layers:
            gone[base[i]] = {"layer"}
        return [b for i, b in enumerate(base) if i not in self.layers]

    def base_layers(self, kept: list[int]) -> list[int] | None:
        if self.num_layers != len(kept):
            raise InvalidCut(f"A step made for {self.num_layers} layers follows one that leaves {len(kept)}.")
        return [k for i, k in enumerate(kept) if i not in self.layers]

    def describe(self) -> str:
        """'layers 20–25 (6 of 30) = block [20, 26)', or the list for a scattered cut: plain words first, the
        block's notation (start inclusive, end exclusive) beside them."""
        count = f"({len(self.layers)} of {self.num_layers})"
        if self.span is None:
            return f"layers {', '.join(map(str, self.layers))} {count}"
        start, end = self.span
        what = f"layer {start}" if end - start == 1 else f"layers {start}–{end - 1}"
        return f"{what} {count} = block [{start}, {end})"

    def short(self) -> str:
        """A column title in plain words: 'cut 20–25', 'cut 5' or 'cut 3, 7, 9'."""
        if self.span is not None and self.span[1] - self.span[0] > 1:
            return f"cut {self.span[0]}–{self.span[1] - 1}"
        return "cut " + ", ".join(map(str, self.layers))


FAMILY = register_family(Family(
    name="depth", label="Depth", step=DepthCut,
    paper="Gromov et al. 2024; Men et al. 2024 (ShortGPT); Kim et al. 2024 (Shortened LLaMA); Song et al. 2024 "
          "(SLEB); Gardinazzi et al. 2024 (zigzag persistence)",
    link="https://arxiv.org/abs/2403.17887",
    about="Scores every layer by an importance method (the picker's Depth entries), then cuts N layers: the "
          "method's paper's choice or the best contiguous block.",
    options=(),
))
