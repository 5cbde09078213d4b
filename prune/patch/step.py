"""The linear patch's recipe step: ReplaceMe's map for the block a depth cut removed (see :mod:`prune.patch.replaceme`).

Registered under the kind ``patch`` when ``prune`` is imported. It follows a cut directly
(:attr:`Patch.after`), fits on the model that cut was applied to (``Earlier.before``) and folds the map into the
cut model's layer before each removed block: the patched model owns that layer's down projection, and shares every
other weight with the cut.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from torch import nn

from prune.core.architectures import width_of
from prune.core.calibration import Calibration
from prune.core.errors import InvalidInput, UnknownMethod, UnsupportedArchitecture, quoted
from prune.core.family import Family, Option, register_family
from prune.core.step import (Earlier, Estimate, Progress, Step, calibration_from, calibration_record,
                             calibration_words, rebuildable, step, text_digest, with_digest)
from prune.core.sizes import Size
from prune.core.surgery import index_runs, removed_between, removed_layers_of
from prune.patch.replaceme import DEFAULTS, METHODS, PATCHED_FIELD, down_path, patch

NAMES = {"lstsq": "least squares", "cosine": "cosine"}
LABELS = {"lstsq": "Linear patch: ReplaceMe, least squares (no training)",
          "cosine": "Linear patch: ReplaceMe, cosine (Adam on the map only)"}
# the patch's own calibration when none is given: 64 windows of 256 tokens (16,384 tokens)
CALIBRATION = {"n_samples": 64, "seq_len": 256}


@step("patch")
@dataclass(frozen=True, eq=False)
class Patch(Step):
    """Replace the block the previous cut removed by one linear map folded into the layer before it (ReplaceMe)."""

    kind: ClassVar[str]
    follows: ClassVar[bool] = True
    after: ClassVar[str] = "cut"
    reads_earlier: ClassVar[bool] = True
    card_tag: ClassVar[str] = "linear-patch"
    method: str  # "lstsq" or "cosine"
    calibration: Calibration
    options: tuple[tuple[str, object], ...]  # every option of the method, sorted by name
    text_digest: str | None = None  # sha256 prefix of an inline calibration text

    @classmethod
    def of(cls, method: str = "lstsq", calibration: Calibration | None = None, **options) -> Patch:
        """A checked step; ``calibration`` None: the built-in text, 64 windows of 256 tokens."""
        if method not in METHODS:
            raise UnknownMethod(f"Unknown linear patch {quoted(method)}. Choose one of: {', '.join(METHODS)}.")
        unknown = sorted(set(options) - set(DEFAULTS[method]))
        if unknown:
            raise InvalidInput(f"The {method} patch takes no option {quoted(unknown[0])}; it takes "
                               f"{', '.join(DEFAULTS[method])}.")
        merged = {**DEFAULTS[method], **options}
        for name in ("epochs", "batch"):
            value = merged.get(name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise InvalidInput(f"The patch option {name} is a whole number of at least 1, not {quoted(value)}.")
        if method == "cosine" and not float(merged["lr"]) > 0:
            raise InvalidInput(f"The learning rate must be above 0, not {quoted(merged['lr'])}.")
        if method == "lstsq" and not float(merged["ridge"]) >= 0:
            raise InvalidInput(f"The ridge is a number from 0 up, not {quoted(merged['ridge'])}.")
        calibration = calibration or Calibration(**CALIBRATION)
        return cls(method, calibration, tuple(sorted(merged.items())), text_digest(calibration))

    @classmethod
    def from_record(cls, data: dict) -> Patch:
        made = cls.of(data.get("method"), calibration_from(data.get("calibration")), **(data.get("options") or {}))
        return with_digest(made, data.get("text_digest"))

    def record(self) -> dict:
        return {"method": self.method, "calibration": calibration_record(self.calibration),
                "options": dict(self.options), "text_digest": self.text_digest}

    def apply(self, model: nn.Module, tokenizer=None, progress: Progress | None = None,
              earlier: Earlier | None = None) -> nn.Module:
        if earlier is None or earlier.before is None:
            raise InvalidInput("The linear patch fits on the model the cut was applied to: build it from its recipe.")
        cal = rebuildable(self.calibration, self.text_digest)
        removed = removed_between(earlier.before, model)
        return patch(earlier.before, model, tokenizer, removed, self.method, cal, dict(self.options), progress)

    def estimate(self, found: Estimate, after: Size) -> Estimate:
        """One down projection (and its bias) per removed block, owned by the patched model."""
        try:
            path = down_path(width_of(found.base))
        except UnsupportedArchitecture:
            return found
        one = max((m.params for layer in found.size.matrices for m in layer if m.path == path), default=0)
        blocks = len(index_runs(removed_layers_of(found.model))) if found.built else 1
        return replace(found, owned=found.owned + blocks * one * found.element)

    def base_layers(self, kept: list[int]) -> list[int]:
        """It removes no layer: a patched cut keeps the cut's layers (its hand-offs say what they cannot carry)."""
        return kept

    def handoff_note(self) -> str:
        return ("the linear patch changed the MLP down projection of the layer before each removed block; the "
                "mergekit and llama.cpp commands remove the same layers from the base model's files but cannot "
                "carry that change, so what they build is the plain cut, without the patch")

    def card_line(self, model: nn.Module, factored: bool = False) -> str:
        found = getattr(model.config, PATCHED_FIELD, None) or {}
        blocks = "; ".join(f"block [{b['block'][0]}, {b['block'][1]}) folded into layer {b['block'][0] - 1}'s down "
                           f"projection (fit error {b['error']:.3f}, plain cut {b['unpatched_error']:.3f})"
                           for b in found.get("blocks", []))
        return (f"- Linear patch: ReplaceMe ({NAMES[self.method]}, Shopkhoev et al. 2025)"
                f"{': ' + blocks if blocks else ''}. "
                f"The patched layers' weights differ from the base model's.")

    def describe(self) -> str:
        """'linear patch (ReplaceMe, least squares) (calibration: wikitext2, 64 × 256 tokens)'."""
        extra = "" if self.method == "lstsq" else f", {self.option['epochs']} epochs at lr {self.option['lr']:g}"
        return f"linear patch (ReplaceMe, {NAMES[self.method]}{extra}){calibration_words(self.calibration)}"

    @property
    def option(self) -> dict:
        return dict(self.options)

    def short(self) -> str:
        """A column title: 'patched' or 'patched (cos)'."""
        return "patched" if self.method == "lstsq" else "patched (cos)"


def from_args(args, calibration: Calibration, data_dir=None) -> Patch | None:
    if args.patch is None:
        return None
    return Patch.of(args.patch, replace(calibration, **CALIBRATION))


def check_args(args) -> None:
    if args.patch is not None and (args.full or getattr(args, "drop", None)):
        raise InvalidInput("--patch repairs a depth cut: not with --full or --drop.")


FAMILY = register_family(Family(
    name="patch", label="Linear patch", step=Patch,
    paper="Shopkhoev et al. 2025 (ReplaceMe)", link="https://arxiv.org/abs/2505.02819",
    about="Replaces the block a depth cut removed by one linear map fitted on calibration text and folded into the "
          "layer before it: no training, a standard architecture.",
    options=(Option("--patch", dict(choices=METHODS, default=None,
                                    help="after the cut: replace the removed block by one linear map folded into the "
                                         "layer before it (ReplaceMe): lstsq (least squares, no training) or cosine "
                                         f"(Adam on the map); fitted on {CALIBRATION['n_samples']} × "
                                         f"{CALIBRATION['seq_len']} tokens of the calibration text")),),
    from_args=from_args, check_args=check_args, stage=0,
))
