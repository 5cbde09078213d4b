"""The recipe step protocol: what every family's step is and does, and the one registry of step kinds.

A step is a frozen dataclass that subclasses :class:`Step` and is registered with :func:`step` under its
kind (its JSON tag). It is checked once, when made for the model it applies to (``Step.of``), and trusted
afterwards. Its behaviour lives on it: ``apply`` derives the model, ``resize`` counts parameters by
arithmetic, ``estimate`` counts the bytes a variant will own before it is built, ``removed_blocks``
says which of the base model's layers or blocks it takes out, ``card_line`` writes its model-card line.
Equality, hashing and JSON come from ``record()`` here, once for every step.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields, replace
from typing import ClassVar

from torch import nn

from prune.core.calibration import Calibration
from prune.core.errors import InvalidInput, quoted
from prune.core.sizes import Size

Progress = Callable[[float, str], object]
STEPS: dict[str, type] = {}


def step(kind: str):
    """Class decorator: register a frozen step dataclass under ``kind`` (its JSON tag)."""

    def add(cls):
        if kind in STEPS:
            raise ValueError(f"Recipe step {quoted(kind)} is registered twice.")
        cls.kind = kind
        STEPS[kind] = cls
        return cls

    return add


@dataclass(frozen=True)
class Estimate:
    """What a variant will own, counted step by step before it is built (see ``Step.estimate``)."""

    base: nn.Module  # the model the recipe applies to
    model: nn.Module  # the variant so far while only views were applied, else the last model built
    size: Size  # the parameter count before the step
    owned: int = 0  # bytes owned so far
    built: bool = True  # whether ``model`` is the variant so far (False after a step counted by arithmetic only)

    @property
    def element(self) -> int:
        return next(self.base.parameters()).element_size()


@dataclass(frozen=True)
class Earlier:
    """The models a step that reads earlier ones (``Step.reads_earlier``) receives beside its input."""

    original: nn.Module  # the model the recipe applies to (distillation's teacher)
    before: nn.Module | None = None  # the input of the previous step (the patch fits the block a cut removed on it)


class Step:
    """The base of every recipe step: shared record, equality, hashing and neutral defaults."""

    kind: ClassVar[str]
    follows: ClassVar[bool] = False  # it must follow another step (healing the original is pointless)
    view: ClassVar[bool] = False  # it shares every kept weight with the model it applies to (cuts, drops)
    # it builds a model read from disk one layer at a time (prune.core.layer_files), so it needs no more memory
    layerwise: ClassVar[bool] = False
    card_tag: ClassVar[str | None] = None  # the model card's tag when the recipe holds this kind of step
    refuses_after: ClassVar[dict[str, str]] = {}  # an earlier step's kind → why this step cannot follow it
    after: ClassVar[str | None] = None  # the kind of step this one must follow directly (the patch: a cut)
    reads_earlier: ClassVar[bool] = False  # ``apply`` also receives ``earlier`` (an :class:`Earlier`)
    last: ClassVar[bool] = False  # no step may follow it (quantization)

    def apply(self, model: nn.Module, tokenizer=None, progress: Progress | None = None) -> nn.Module:
        raise NotImplementedError

    def describe(self) -> str:
        raise NotImplementedError

    def short(self) -> str:
        raise NotImplementedError

    def resize(self, size: Size) -> Size:
        """The parameter count after this step, by arithmetic (unchanged unless the step says otherwise)."""
        return size

    def estimate(self, found: Estimate, after: Size) -> Estimate:
        """The bytes owned after this step (``after`` is ``resize(found.size)``); nothing new by default."""
        return found

    def stored(self, after: Size, element: int, stored: int) -> int:
        """The variant's weight bytes as stored once this step is applied (``after``: its size; ``stored``: the bytes
        before it, as if every parameter were dense in ``element`` bytes); unchanged unless the step stores weights
        in another form."""
        return stored

    def removed_blocks(self, base: list[int], gone: dict[int, set[str]]) -> list[int]:
        """Record in ``gone`` what this step removes of each base layer; return the base index of each layer left."""
        return base

    def base_layers(self, kept: list[int]) -> list[int] | None:
        """The base index of each layer left when this step only removes whole layers, else None."""
        return None

    def handoff_note(self) -> str | None:
        """What the mergekit and llama.cpp hand-offs of a depth cut cannot carry of this step (None: nothing)."""
        return None

    def card_line(self, model: nn.Module, factored: bool = False) -> str | None:
        """The model card's 'What was done' line for the last step of this kind (None: the recipe line says it).

        ``factored``: the export keeps low-rank factors as two matrices (else merged back).
        """
        return None

    def record(self) -> dict:
        """The JSON fields (without ``kind``); tuples as lists."""
        return {k: _listed(v) for k, v in asdict(self).items()}

    @classmethod
    def from_record(cls, data: dict):
        values = {f.name: data[f.name] for f in fields(cls) if f.name in data}
        return cls(**{k: _tupled(v) for k, v in values.items()})

    def __eq__(self, other) -> bool:
        return type(other) is type(self) and self.record() == other.record()

    def __hash__(self) -> int:
        return hash(json.dumps(self.record(), sort_keys=True))


def _listed(value):
    return [_listed(v) for v in value] if isinstance(value, tuple) else value


def _tupled(value):
    return tuple(_tupled(v) for v in value) if isinstance(value, list) else value


def to_json(item: Step) -> dict:
    return {"kind": item.kind, **item.record()}


def from_json(data: dict) -> Step:
    kind = data.get("kind") if isinstance(data, dict) else None
    if kind not in STEPS:
        raise InvalidInput(f"Unknown recipe step {quoted(kind)}. Known steps: {', '.join(STEPS)}.")
    try:
        return STEPS[kind].from_record(data)
    except (TypeError, ValueError, AttributeError, KeyError) as err:
        raise InvalidInput(f"The recorded {kind} step is malformed ({type(err).__name__}).") from None


# ---------------------------------------------------------------- steps that calibrate on a text


def text_digest(cal: Calibration | None) -> str | None:
    """The sha256 prefix of an inline calibration text, which a step records instead of the text."""
    text = cal.text if cal is not None and cal.source == "text" else None
    return hashlib.sha256(text.encode()).hexdigest()[:16] if text is not None else None


def calibration_record(cal: Calibration | None) -> dict | None:
    """A step's calibration as JSON: an inline text by its digest only, never megabytes of it."""
    data = None if cal is None else asdict(cal)
    if data is not None and data["source"] == "text":
        data["text"] = None
    return data


def calibration_from(data: dict | None) -> Calibration | None:
    return Calibration(**data) if data else None


def kept_by_digest(value) -> bool:
    """An inline calibration text that JSON kept by its digest only: a step holding it cannot be rebuilt."""
    return isinstance(value, Calibration) and value.source == "text" and value.text is None


def rebuildable(cal: Calibration | None, digest: str | None) -> Calibration | None:
    """``cal``, or a clear error when a step read back from JSON kept only its inline text's digest."""
    if kept_by_digest(cal):
        raise InvalidInput(f"This step was recorded with an inline calibration text kept only as its digest "
                           f"({digest}): give the text again to rebuild it.")
    return cal


def calibration_words(cal: Calibration | None, extra: str = "") -> str:
    """' (calibration: wikitext2, 32 × 128 tokens)' for a step's description; '' without calibration."""
    return "" if cal is None else f" (calibration: {cal.source}, {cal.n_samples} × {cal.seq_len} tokens{extra})"


def with_digest(made, digest: str | None):
    """A step read back from JSON: checked by ``of``, keeping the recorded text digest."""
    return replace(made, text_digest=digest)
