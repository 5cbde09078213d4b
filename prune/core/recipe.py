"""A recipe: how a compared model is derived from the original, as one frozen, hashable value.

A recipe is a tuple of steps applied in order (cut, drop attention or MLP blocks, sparsify, shrink
the width, decompose into low-rank factors, then heal, …). Each kind of step is one frozen dataclass registered here under its kind name with :func:`step`; a step is
checked once, when it is made for the model it applies to, and trusted afterwards. A step's
``apply(model, tokenizer=None, progress=None)`` returns the derived model; steps that read
calibration text need the tokenizer, and long ones report ``progress(fraction, message)``. The
recipe's :attr:`Recipe.key` names every cache of what it derives, and
:meth:`Recipe.apply` records the recipe in the derived model's config (``config.layercut``),
so a saved checkpoint says what was done to it. The empty recipe is the original model.
Steps that change the parameter count say how by arithmetic, ``resize(size) -> size`` on a
:class:`~prune.width.shrink.Size`, so :meth:`Recipe.size` counts a variant's parameters without building it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, fields, replace
from typing import ClassVar

from torch import nn

from prune.core.architectures import decoder_layers
from prune.core.calibration import Calibration
from prune.core.errors import InvalidCut, InvalidInput, quoted
from prune.lowrank.decomposition import check_space, decompose, plan as lowrank_plan, resized as lowrank_resized
from prune.core.paths import digest
from prune.drop.sublayers import ATTENTION, MLP, check_drop, drop
from prune.sparsity.masks import check_request, sparsify
from prune.core.surgery import check_block, check_layers, remove_layers
from prune.width.shrink import IMPORTANCE, Size, check_ratio, plan, resized, shrink_width

CONFIG_FIELD = "layercut"  # the derived model's config records its recipe here
Progress = Callable[[float, str], object]

STEPS: dict[str, type] = {}
# (an earlier step's kind, a later step's kind): why the later cannot follow the earlier, in any recipe
ORDER: dict[tuple[str, str], str] = {
    ("sparsify", "lowrank"): "A low-rank decomposition would replace the sparsified weights' zeros with dense "
                             "factors: decompose first, then sparsify.",
    ("lowrank", "width"): "Width pruning cannot slice a projection held as low-rank factors: prune the width "
                          "before decomposing.",
}


def step(kind: str):
    """Class decorator: register a frozen step dataclass under ``kind`` (its JSON tag)."""

    def add(cls):
        if kind in STEPS:
            raise ValueError(f"Recipe step {quoted(kind)} is registered twice.")
        cls.kind = kind
        STEPS[kind] = cls
        return cls

    return add


@step("cut")
@dataclass(frozen=True)
class DepthCut:
    """Remove whole decoder layers; the kept layers share their weights with the model cut."""

    kind: ClassVar[str]
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

    def describe(self) -> str:
        """'layers 20–25 (6 of 30), end exclusive [20, 26)', or the list for a scattered cut."""
        count = f"({len(self.layers)} of {self.num_layers})"
        if self.span is None:
            return f"layers {', '.join(map(str, self.layers))} {count}"
        start, end = self.span
        what = f"layer {start}" if end - start == 1 else f"layers {start}–{end - 1}"
        return f"{what} {count}, end exclusive [{start}, {end})"

    def short(self) -> str:
        """A column title: '−[20, 26)' or '−{3, 7, 9}'."""
        if self.span is not None:
            return f"−[{self.span[0]}, {self.span[1]})"
        return "−{" + ", ".join(map(str, self.layers)) + "}"


@step("drop")
@dataclass(frozen=True)
class SubLayerDrop:
    """Drop the attention and/or the MLP of some layers (He et al. 2024); each keeps its residual path.

    The view shares every kept weight with the model it applies to; a dropped attention stores no
    keys or values (see ``prune.drop.sublayers``).
    """

    kind: ClassVar[str]
    attention: tuple[int, ...] = ()  # layers whose attention is dropped, 0-based, in the numbering of the model
    mlp: tuple[int, ...] = ()  # layers whose MLP is dropped
    num_layers: int = 0  # layers of the model the step applies to

    @classmethod
    def of(cls, num_layers: int, attention: Iterable[int] = (), mlp: Iterable[int] = ()) -> SubLayerDrop:
        """A checked drop (at least one block; never every attention)."""
        wanted = check_drop(int(num_layers), attention, mlp)
        return cls(wanted[ATTENTION], wanted[MLP], int(num_layers))

    def apply(self, model: nn.Module, tokenizer=None, progress: Progress | None = None) -> nn.Module:
        found = len(decoder_layers(model))
        if found != self.num_layers:
            raise InvalidCut(f"This drop was made for a {self.num_layers}-layer model; this one has {found}.")
        return drop(model, self.attention, self.mlp)

    def describe(self) -> str:
        """'attention dropped in layers 3, 7, 9 (3 of 30)', and the MLP's likewise."""
        parts = [f"{what} dropped in layer{'s' if len(layers) > 1 else ''} {', '.join(map(str, layers))} "
                 f"({len(layers)} of {self.num_layers})"
                 for what, layers in (("attention", self.attention), ("MLP", self.mlp)) if layers]
        return " and ".join(parts)

    def short(self) -> str:
        """A column title: '−attn{20, 21}', '−mlp{3}' or both."""
        return " ".join(f"−{what}{{{', '.join(map(str, layers))}}}"
                        for what, layers in (("attn", self.attention), ("mlp", self.mlp)) if layers)


@step("sparsify")
@dataclass(frozen=True, eq=False)
class Sparsify:
    """Zero a fraction of every linear weight in the decoder layers (see :mod:`prune.sparsity.masks`).

    The derived model owns its pruned matrices (stored densely, zeros included). Two steps are
    equal when their records are: an inline calibration text is recorded by its digest only.
    """

    kind: ClassVar[str]
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
        return cls(method, sparsity, pattern, calibration, _text_digest(calibration))

    def apply(self, model: nn.Module, tokenizer=None, progress: Progress | None = None) -> nn.Module:
        cal = _rebuildable(self.calibration, self.text_digest)
        return sparsify(model, tokenizer, self.method, self.sparsity, pattern=self.pattern, calibration=cal,
                        progress=progress)

    def describe(self) -> str:
        """'Wanda, 50 % unstructured sparsity (calibration: wikitext2, 32 × 128 tokens)'."""
        name = {"magnitude": "magnitude", "wanda": "Wanda", "sparsegpt": "SparseGPT"}[self.method]
        what = f"{100 * self.sparsity:g} % unstructured" if self.pattern == "unstructured" else self.pattern
        cal = self.calibration
        data = "" if cal is None else f" (calibration: {cal.source}, {cal.n_samples} × {cal.seq_len} tokens)"
        return f"{name}, {what} sparsity{data}"

    def short(self) -> str:
        """A column title: 'wanda 50%' or 'sparsegpt 2:4'."""
        return f"{self.method} {100 * self.sparsity:g}%" if self.pattern == "unstructured" else f"{self.method} {self.pattern}"

    def record(self) -> dict:
        """The JSON fields (without ``kind``): an inline text by digest, never megabytes of it."""
        cal = _calibration_record(self.calibration)
        return {"method": self.method, "sparsity": self.sparsity, "pattern": self.pattern, "calibration": cal,
                "text_digest": self.text_digest}

    @classmethod
    def from_record(cls, data: dict) -> Sparsify:
        cal = data.get("calibration")
        step = cls.of(data.get("method"), data.get("sparsity"), data.get("pattern", "unstructured"),
                      Calibration(**cal) if cal else None)
        return cls(step.method, step.sparsity, step.pattern, step.calibration, data.get("text_digest"))

    def __eq__(self, other) -> bool:
        return isinstance(other, Sparsify) and self.record() == other.record()

    def __hash__(self) -> int:
        return hash(json.dumps(self.record(), sort_keys=True))


@step("width")
@dataclass(frozen=True, eq=False)
class WidthPrune:
    """Remove MLP channels and attention heads (whole KV groups) until ``param_ratio`` of the parameters stay.

    See :mod:`prune.width.shrink`: Wanda-sp importance, the same structures from every layer, a standard
    config. The derived model owns its smaller matrices. An inline calibration text is recorded by
    its digest only, as in :class:`Sparsify`.
    """

    kind: ClassVar[str]
    param_ratio: float  # fraction of the parameters of the model the step applies to, embeddings included
    calibration: Calibration | None = None
    text_digest: str | None = None  # sha256 prefix of an inline calibration text (source "text")

    @classmethod
    def of(cls, param_ratio: float, calibration: Calibration | None = None) -> WidthPrune:
        """A checked step; the importance calibrates on ``calibration`` (None: the built-in text)."""
        calibration = calibration or Calibration()
        return cls(check_ratio(param_ratio), calibration, _text_digest(calibration))

    def apply(self, model: nn.Module, tokenizer=None, progress: Progress | None = None) -> nn.Module:
        cal = _rebuildable(self.calibration, self.text_digest)
        return shrink_width(model, tokenizer, param_ratio=self.param_ratio, calibration=cal, progress=progress)

    def resize(self, size: Size) -> Size:
        """Every layer loses the structures :func:`prune.width.shrink.plan` chooses."""
        return resized(size, plan(size, self.param_ratio))

    def describe(self) -> str:
        """'width pruning to 80 % of the parameters: heads and MLP channels by Wanda-sp (calibration: …)'."""
        cal = self.calibration
        data = "" if cal is None else f" (calibration: {cal.source}, {cal.n_samples} × {cal.seq_len} tokens)"
        return f"width pruning to {100 * self.param_ratio:g} % of the parameters: heads and MLP channels by {IMPORTANCE}{data}"

    def short(self) -> str:
        """A column title: 'width 80%'."""
        return f"width {100 * self.param_ratio:g}%"

    def record(self) -> dict:
        """The JSON fields (without ``kind``): an inline text by digest, never megabytes of it."""
        cal = _calibration_record(self.calibration)
        return {"param_ratio": self.param_ratio, "calibration": cal, "text_digest": self.text_digest}

    @classmethod
    def from_record(cls, data: dict) -> WidthPrune:
        cal = data.get("calibration")
        made = cls.of(data.get("param_ratio"), Calibration(**cal) if cal else None)
        return cls(made.param_ratio, made.calibration, data.get("text_digest"))

    def __eq__(self, other) -> bool:
        return isinstance(other, WidthPrune) and self.record() == other.record()

    def __hash__(self) -> int:
        return hash(json.dumps(self.record(), sort_keys=True))


@step("lowrank")
@dataclass(frozen=True, eq=False)
class Decompose:
    """Replace projections by two low-rank linear maps, in feature or weight space (see :mod:`prune.lowrank.decomposition`).

    The derived model owns its factors. ``ranks`` is one whole number for every chosen projection, or
    ``((layer, path, rank), …)`` naming its own projections (a rank search's result). An inline
    calibration text is recorded by its digest only, as in :class:`Sparsify`.
    """

    kind: ClassVar[str]
    space: str  # "feature" or "weight"
    param_ratio: float | None = None  # fraction of all the parameters kept; or …
    ranks: int | tuple[tuple[int, str, int], ...] | None = None  # … the ranks
    projections: tuple[str, ...] | None = None  # paths or last path components; None: every linear map
    layers: tuple[int, ...] | None = None  # None: every decoder layer
    calibration: Calibration | None = None  # None for weight space, which reads no data
    text_digest: str | None = None
    sequential: bool = True  # feature bases read on the decomposed layers' outputs; False: on the original's

    @classmethod
    def of(cls, space: str, param_ratio: float | None = None, ranks=None, projections: Iterable[str] | None = None,
           layers: Iterable[int] | None = None, calibration: Calibration | None = None,
           sequential: bool = True) -> Decompose:
        """A checked step (ranks against the model's shapes when it is applied or sized)."""
        space = check_space(space)
        if (param_ratio is None) == (ranks is None):
            raise InvalidInput("Give either a parameter ratio or ranks to decompose, not both or neither.")
        ratio = None if param_ratio is None else check_ratio(param_ratio)
        if isinstance(ranks, dict) or (isinstance(ranks, (list, tuple)) and not isinstance(ranks, str)):
            ranks = _rank_triples(ranks)
            if projections is not None or layers is not None:
                raise InvalidInput("Ranks given per (layer, projection) name their own projections: leave out the "
                                   "projections and layers.")
        elif ranks is not None and (isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 1):
            raise InvalidInput(f"A rank is a whole number of at least 1, not {quoted(ranks)}.")
        names = None if projections is None else tuple(sorted({str(p) for p in projections}))
        picked = None if layers is None else tuple(sorted({int(i) for i in layers}))
        calibration = None if space == "weight" else calibration or Calibration()
        if not isinstance(sequential, bool):
            raise InvalidInput(f"Sequential calibration is true or false, not {quoted(sequential)}.")
        return cls(space, ratio, ranks, names, picked, calibration, _text_digest(calibration),
                   sequential or space == "weight")

    def _targets(self) -> dict:
        ranks = {(i, path): r for i, path, r in self.ranks} if isinstance(self.ranks, tuple) else self.ranks
        return {"param_ratio": self.param_ratio, "ranks": ranks, "projections": self.projections,
                "layers": self.layers}

    def plan(self, size: Size) -> dict:
        """(layer, path) → rank of every projection this step decomposes in a model of ``size``."""
        return lowrank_plan(size, **self._targets())

    def apply(self, model: nn.Module, tokenizer=None, progress: Progress | None = None) -> nn.Module:
        cal = _rebuildable(self.calibration, self.text_digest)
        return decompose(model, tokenizer, space=self.space, calibration=cal, progress=progress,
                         sequential=self.sequential, **self._targets())

    def resize(self, size: Size) -> Size:
        """The chosen projections at their planned ranks (:func:`prune.lowrank.decomposition.plan`)."""
        return lowrank_resized(size, self.plan(size))

    def describe(self) -> str:
        """'feature-space low-rank decomposition to 80 % of the parameters (calibration: …)'."""
        what = (f"to {100 * self.param_ratio:g} % of the parameters" if self.param_ratio is not None
                else f"at rank {self.ranks}" if isinstance(self.ranks, int) else f"at {len(self.ranks)} searched ranks")
        which = f" ({', '.join(self.projections)})" if self.projections else ""
        where = f" in layers {', '.join(map(str, self.layers))}" if self.layers else ""
        cal = self.calibration
        data = "" if cal is None else f" (calibration: {cal.source}, {cal.n_samples} × {cal.seq_len} tokens" + \
            ("" if self.sequential else ", read on the original's activations") + ")"
        return f"{self.space}-space low-rank decomposition {what}{which}{where}{data}"

    def short(self) -> str:
        """A column title: 'feature 80%', 'weight r64' or 'feature ranks'."""
        if self.param_ratio is not None:
            return f"{self.space} {100 * self.param_ratio:g}%"
        return f"{self.space} r{self.ranks}" if isinstance(self.ranks, int) else f"{self.space} ranks"

    def record(self) -> dict:
        """The JSON fields (without ``kind``): ranks as [layer, path, rank] lists, an inline text by digest."""
        ranks = [list(t) for t in self.ranks] if isinstance(self.ranks, tuple) else self.ranks
        return {"space": self.space, "param_ratio": self.param_ratio, "ranks": ranks,
                "projections": list(self.projections) if self.projections is not None else None,
                "layers": list(self.layers) if self.layers is not None else None,
                "calibration": _calibration_record(self.calibration), "text_digest": self.text_digest,
                "sequential": self.sequential}

    @classmethod
    def from_record(cls, data: dict) -> Decompose:
        cal = data.get("calibration")
        made = cls.of(data.get("space"), data.get("param_ratio"), data.get("ranks"), data.get("projections"),
                      data.get("layers"), Calibration(**cal) if cal else None, data.get("sequential", True))
        return replace(made, text_digest=data.get("text_digest"))

    def __eq__(self, other) -> bool:
        return isinstance(other, Decompose) and self.record() == other.record()

    def __hash__(self) -> int:
        return hash(json.dumps(self.record(), sort_keys=True))


def _rank_triples(ranks) -> tuple[tuple[int, str, int], ...]:
    """{(layer, path): rank} or [(layer, path, rank), …] as sorted (layer, path, rank) triples, each checked."""
    items = [(*key, rank) for key, rank in ranks.items()] if isinstance(ranks, dict) else [tuple(t) for t in ranks]
    found = {}
    for item in items:
        if len(item) != 3 or isinstance(item[0], bool) or not isinstance(item[0], int) or item[0] < 0 \
                or not isinstance(item[1], str) or isinstance(item[2], bool) or not isinstance(item[2], int) \
                or item[2] < 1:
            raise InvalidInput(f"Ranks per projection are (layer, path, rank) with a layer from 0 and a rank of at "
                               f"least 1, not {quoted(item)}.")
        found[(item[0], item[1])] = item[2]
    if not found:
        raise InvalidInput("No ranks were given to decompose.")
    return tuple((layer, path, rank) for (layer, path), rank in sorted(found.items()))


def _text_digest(cal: Calibration | None) -> str | None:
    """The sha256 prefix of an inline calibration text, which a step records instead of the text."""
    text = cal.text if cal is not None and cal.source == "text" else None
    return hashlib.sha256(text.encode()).hexdigest()[:16] if text is not None else None


def _calibration_record(cal: Calibration | None) -> dict | None:
    """A step's calibration as JSON: an inline text by its digest only, never megabytes of it."""
    data = None if cal is None else asdict(cal)
    if data is not None and data["source"] == "text":
        data["text"] = None
    return data


def _rebuildable(cal: Calibration | None, digest: str | None) -> Calibration | None:
    """``cal``, or a clear error when a step read back from JSON kept only its inline text's digest."""
    if cal is not None and cal.source == "text" and cal.text is None:
        raise InvalidInput(f"This step was recorded with an inline calibration text kept only as its digest "
                           f"({digest}): give the text again to rebuild it.")
    return cal


def _step_to_json(item) -> dict:
    if hasattr(item, "record"):
        return {"kind": item.kind, **item.record()}
    return {"kind": item.kind, **{k: list(v) if isinstance(v, tuple) else v for k, v in asdict(item).items()}}


def _step_from_json(data: dict):
    kind = data.get("kind")
    if kind not in STEPS:
        raise InvalidInput(f"Unknown recipe step {quoted(kind)}. Known steps: {', '.join(STEPS)}.")
    cls = STEPS[kind]
    if hasattr(cls, "from_record"):
        return cls.from_record(data)
    values = {f.name: data[f.name] for f in fields(cls) if f.name in data}
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}
    return cls.of(**values) if hasattr(cls, "of") else cls(**values)  # checked as when it was made


@dataclass(frozen=True)
class Recipe:
    """Steps applied in order to the original; ``origin`` says how it was chosen (not part of the key)."""

    steps: tuple = ()
    origin: str = field(default="", compare=False)

    def __post_init__(self):
        if self.steps and getattr(self.steps[0], "follows", False):
            raise InvalidInput(f"A {self.steps[0].kind} step follows a cut, a sparsification or a decomposition; "
                               f"it cannot come first.")
        kinds = [s.kind for s in self.steps]
        for index, earlier in enumerate(kinds):
            for later in kinds[index + 1:]:
                if (earlier, later) in ORDER:
                    raise InvalidInput(ORDER[earlier, later])

    @classmethod
    def cut(cls, num_layers: int, layers: Iterable[int], origin: str = "") -> Recipe:
        """The one-step recipe that removes ``layers`` (checked)."""
        return cls((DepthCut.of(num_layers, layers),), origin)

    @classmethod
    def block(cls, num_layers: int, start: int, end: int, origin: str = "") -> Recipe:
        """The one-step recipe that removes the block ``[start, end)`` (checked)."""
        return cls((DepthCut.block(num_layers, start, end),), origin)

    @classmethod
    def drop(cls, num_layers: int, attention: Iterable[int] = (), mlp: Iterable[int] = (), origin: str = "") -> Recipe:
        """The one-step recipe that drops the attention of layers ``attention`` and the MLP of ``mlp`` (checked)."""
        return cls((SubLayerDrop.of(num_layers, attention, mlp),), origin)

    @property
    def is_original(self) -> bool:
        return not self.steps

    @property
    def key(self) -> str:
        """A short stable digest of the steps: what names this recipe in every cache."""
        return digest([_step_to_json(s) for s in self.steps])

    @property
    def depth_cut(self) -> DepthCut | None:
        """The first depth cut, which decides the layers the UI shows as removed."""
        return next((s for s in self.steps if isinstance(s, DepthCut)), None)

    @property
    def sparsity(self) -> Sparsify | None:
        """The last sparsify step, which decides the zeros the variant holds."""
        return next((s for s in reversed(self.steps) if isinstance(s, Sparsify)), None)

    @property
    def sublayer_drop(self) -> SubLayerDrop | None:
        """The first attention/MLP drop, which decides the blocks the UI shows as dropped."""
        return next((s for s in self.steps if isinstance(s, SubLayerDrop)), None)

    def size(self, size: Size) -> Size:
        """The parameter count of the variant of a model of ``size`` (steps without ``resize`` keep it), by arithmetic."""
        for item in self.steps:
            size = item.resize(size) if hasattr(item, "resize") else size
        return size

    def then(self, item) -> Recipe:
        """This recipe followed by one more step."""
        return Recipe((*self.steps, item), self.origin)

    def apply(self, model: nn.Module, tokenizer=None, progress: Progress | None = None) -> nn.Module:
        """The derived model (the original itself for the empty recipe; the original is never altered).

        ``tokenizer`` is the model's, for steps that calibrate; ``progress`` spans all the steps.
        """
        derived = model
        for index, item in enumerate(self.steps):
            derived = item.apply(derived, tokenizer, _span(progress, index, len(self.steps)))
        if derived is not model:
            if derived.config is model.config:
                raise RuntimeError(f"A recipe step shared the original's config: {self.describe()}")
            stamp(derived, self)
        return derived

    def describe(self) -> str:
        return " → ".join(s.describe() for s in self.steps) if self.steps else "the original model"

    def short(self) -> str:
        return " ".join(s.short() for s in self.steps) if self.steps else "original"

    def to_json(self) -> dict:
        return {"steps": [_step_to_json(s) for s in self.steps], "origin": self.origin}

    @classmethod
    def from_json(cls, data: dict | str) -> Recipe:
        if isinstance(data, str):
            data = json.loads(data)
        return cls(tuple(_step_from_json(s) for s in data.get("steps", [])), data.get("origin", ""))


def _span(progress: Progress | None, index: int, steps: int) -> Progress | None:
    """Step ``index`` of ``steps``'s share of the whole recipe's progress."""
    if progress is None:
        return None
    return lambda fraction, message: progress((index + fraction) / steps, message)


def stamp(model: nn.Module, recipe: Recipe) -> None:
    """Record ``recipe`` in ``model``'s config (its own config, never the original's)."""
    setattr(model.config, CONFIG_FIELD, recipe.to_json())


def recipe_of(model: nn.Module) -> Recipe | None:
    """The recipe recorded in a derived (or reloaded) model's config, if any."""
    data = getattr(model.config, CONFIG_FIELD, None)
    return Recipe.from_json(data) if isinstance(data, dict) else None
