"""The sparsity family's recipe step, and what the family is: magnitude, Wanda, SparseGPT; unstructured or N:M."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from torch import nn

from prune.core.experts import experts_refusal
from prune.core.calibration import Calibration
from prune.core.errors import InvalidInput
from prune.core.family import Choice, Family, Level, Option, register_family
from prune.core.sizes import Size, size_of
from prune.core.step import (Estimate, Progress, Step, calibration_from, calibration_record, calibration_words,
                             rebuildable, step, text_digest, with_digest)
from prune.sparsity.masks import (MAX_SPARSITY, METHODS, PATTERNS, check_request, sparse_copy_bytes, sparsify,
                                  zero_fraction)

NAMES = {"magnitude": "magnitude", "wanda": "Wanda", "sparsegpt": "SparseGPT"}


@step("sparsify")
@dataclass(frozen=True, eq=False)
class Sparsify(Step):
    """Zero a fraction of every linear weight in the decoder layers (see :mod:`prune.sparsity.masks`).

    The derived model owns its pruned matrices (stored densely, zeros included). Two steps are
    equal when their records are: an inline calibration text is recorded by its digest only.
    """

    kind: ClassVar[str]
    card_tag: ClassVar[str] = "sparse"
    layerwise: ClassVar[bool] = True
    method: str  # "magnitude", "wanda" or "sparsegpt"
    sparsity: float  # fraction of each matrix zeroed; N / M for an N:M pattern
    pattern: str = "unstructured"  # or "2:4", "4:8", …
    calibration: Calibration | None = None  # None for magnitude, which reads no data
    text_digest: str | None = None  # sha256 prefix of an inline calibration text (source "text")

    @classmethod
    def of(cls, method: str, sparsity: float | None = None, pattern: str = "unstructured",
           calibration: Calibration | None = None) -> Sparsify:
        """A checked step; Wanda and SparseGPT calibrate on ``calibration`` (None: the built-in text)."""
        method, sparsity, pattern = check_request(method, sparsity, pattern)
        calibration = None if method == "magnitude" else calibration or Calibration()
        return cls(method, sparsity, pattern, calibration, text_digest(calibration))

    @classmethod
    def from_record(cls, data: dict) -> Sparsify:
        made = cls.of(data.get("method"), data.get("sparsity"), data.get("pattern", "unstructured"),
                      calibration_from(data.get("calibration")))
        return with_digest(made, data.get("text_digest"))

    def record(self) -> dict:
        """The JSON fields (without ``kind``): an inline text by digest, never megabytes of it."""
        return {"method": self.method, "sparsity": self.sparsity, "pattern": self.pattern,
                "calibration": calibration_record(self.calibration), "text_digest": self.text_digest}

    def apply(self, model: nn.Module, tokenizer=None, progress: Progress | None = None) -> nn.Module:
        cal = rebuildable(self.calibration, self.text_digest)
        return sparsify(model, tokenizer, self.method, self.sparsity, pattern=self.pattern, calibration=cal,
                        progress=progress)

    def estimate(self, found: Estimate, after: Size) -> Estimate:
        """A dense copy of every matrix of the kept layers (a later sparsify replaces an earlier one's copies)."""
        copies = sparse_copy_bytes(found.model) * sum(found.size.layers) // sum(size_of(found.model).layers)
        return replace(found, owned=copies)

    def card_line(self, model: nn.Module, factored: bool = False) -> str:
        return (f"- Sparsity: {100 * zero_fraction(model):.1f} % of the decoder layers' linear weights are zero "
                f"(counted; {self.describe()}), stored densely: the checkpoint is as large as a dense one "
                "and runs no faster with dense kernels")

    def describe(self) -> str:
        """'Wanda, 50 % unstructured sparsity (calibration: wikitext2, 32 × 128 tokens)'."""
        what = f"{100 * self.sparsity:g} % unstructured" if self.pattern == "unstructured" else self.pattern
        return f"{NAMES[self.method]}, {what} sparsity{calibration_words(self.calibration)}"

    def short(self) -> str:
        """A column title: 'wanda 50%' or 'sparsegpt 2:4'."""
        if self.pattern == "unstructured":
            return f"{self.method} {100 * self.sparsity:g}%"
        return f"{self.method} {self.pattern}"


def build(name: str, level: float, pattern: str, calibration: Calibration) -> Sparsify:
    """The picker's step: ``level`` % zeroed, or the N:M ``pattern``'s own sparsity."""
    if pattern not in PATTERNS:
        raise InvalidInput(f"Choose a pattern among {', '.join(PATTERNS)}.")
    structured = pattern != "unstructured"
    return Sparsify.of(name, None if structured else level / 100, pattern, calibration)


def from_args(args, calibration: Calibration, data_dir=None) -> Sparsify | None:
    return None if args.sparsify is None else Sparsify.of(args.sparsify, args.sparsity, args.pattern, calibration)


def check_args(args) -> None:
    if (args.sparsity is not None or args.pattern != "unstructured") and args.sparsify is None:
        raise InvalidInput("--sparsity and --pattern go with --sparsify METHOD.")


DENSE = ("Zeros are stored densely: no memory saving, and no speedup with dense kernels "
         "(2:4 on an NVIDIA Ampere or newer GPU runs through PyTorch's semi-structured sparse kernels).")
LEVEL = Level("Sparsity (% of each matrix zeroed; N:M patterns imply theirs)", 0, round(100 * MAX_SPARSITY), 50)

FAMILY = register_family(Family(
    refuses=lambda model: experts_refusal(model, "Sparsity", reaches=True),
    name="sparsity", label="Sparsity", step=Sparsify,
    paper="Sun et al. 2023 (Wanda); Frantar & Alistarh 2023 (SparseGPT)", link="https://arxiv.org/abs/2306.11695",
    about="Zeroes a fraction of every decoder matrix (magnitude, Wanda, SparseGPT), unstructured or N:M.",
    choices=(
        Choice("magnitude", "Magnitude sparsity", "zeroes the smallest |W| of each layer's matrices; reads no data. "
               + DENSE, LEVEL, patterns=True),
        Choice("wanda", "Wanda sparsity (Sun et al. 2023)",
               "zeroes the lowest |W_ij|·‖X_j‖ within each output row, layer by layer on calibration inputs "
               "that passed through the already-pruned layers. " + DENSE, LEVEL, patterns=True),
        Choice("sparsegpt", "SparseGPT (Frantar & Alistarh 2023)",
               "second-order pruning: blocks of 128 columns, 1 % dampening, the kept weights updated to "
               "reconstruct each layer's output on calibration inputs (per-layer progress). " + DENSE, LEVEL,
               patterns=True),
    ),
    build=build,
    options=(Option("--sparsify", dict(metavar="METHOD", default=None,
                                       help=f"then zero --sparsity of every decoder matrix by {', '.join(METHODS)}")),
             Option("--sparsity", dict(type=float, default=None, help="with --sparsify: the fraction zeroed, 0…0.99")),
             Option("--pattern", dict(default="unstructured",
                                      help=f"with --sparsify: {', '.join(PATTERNS)} (N:M implies its sparsity N/M)"))),
    from_args=from_args, check_args=check_args, stage=3,
))
