"""The low-rank family's recipe step, and what the family is: projections as two linear maps (feature or weight
space)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import ClassVar

from torch import nn

from prune.core.experts import experts_refusal
from prune.core.calibration import Calibration
from prune.core.errors import InvalidInput, quoted
from prune.core.family import Choice, Family, Level, Option, register_family
from prune.core.sizes import Size, check_ratio, parameter_count
from prune.core.step import (Estimate, Progress, Step, calibration_from, calibration_record, calibration_words,
                             rebuildable, step, text_digest, with_digest)
from prune.lowrank.decomposition import (DESCRIPTIONS, FACTORED_FIELD, SPACES, check_space, decompose, owned_params,
                                         plan as lowrank_plan, resized as lowrank_resized, with_factor_shapes)


@step("lowrank")
@dataclass(frozen=True, eq=False)
class Decompose(Step):
    """Replace projections by two low-rank linear maps, in feature or weight space
    (see :mod:`prune.lowrank.decomposition`).

    The derived model owns its factors. ``ranks`` is one whole number for every chosen projection, or
    ``((layer, path, rank), …)`` naming its own projections (a rank search's result). An inline
    calibration text is recorded by its digest only, as in :class:`~prune.sparsity.step.Sparsify`.
    """

    kind: ClassVar[str]
    card_tag: ClassVar[str] = "low-rank"
    layerwise: ClassVar[bool] = True
    refuses_after: ClassVar[dict[str, str]] = {
        "sparsify": "A low-rank decomposition would replace the sparsified weights' zeros with dense factors: "
                    "decompose first, then sparsify."}
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
        return cls(space, ratio, ranks, names, picked, calibration, text_digest(calibration),
                   sequential or space == "weight")

    @classmethod
    def from_record(cls, data: dict) -> Decompose:
        made = cls.of(data.get("space"), data.get("param_ratio"), data.get("ranks"), data.get("projections"),
                      data.get("layers"), calibration_from(data.get("calibration")), data.get("sequential", True))
        return with_digest(made, data.get("text_digest"))

    def record(self) -> dict:
        """The JSON fields (without ``kind``): ranks as [layer, path, rank] lists, an inline text by digest."""
        ranks = [list(t) for t in self.ranks] if isinstance(self.ranks, tuple) else self.ranks
        return {"space": self.space, "param_ratio": self.param_ratio, "ranks": ranks,
                "projections": list(self.projections) if self.projections is not None else None,
                "layers": list(self.layers) if self.layers is not None else None,
                "calibration": calibration_record(self.calibration), "text_digest": self.text_digest,
                "sequential": self.sequential}

    def _targets(self) -> dict:
        ranks = {(i, path): r for i, path, r in self.ranks} if isinstance(self.ranks, tuple) else self.ranks
        return {"param_ratio": self.param_ratio, "ranks": ranks, "projections": self.projections,
                "layers": self.layers}

    def plan(self, size: Size) -> dict:
        """(layer, path) → rank of every projection this step decomposes in a model of ``size``."""
        return lowrank_plan(size, **self._targets())

    def apply(self, model: nn.Module, tokenizer=None, progress: Progress | None = None) -> nn.Module:
        cal = rebuildable(self.calibration, self.text_digest)
        return decompose(model, tokenizer, space=self.space, calibration=cal, progress=progress,
                         sequential=self.sequential, **self._targets())

    def resize(self, size: Size) -> Size:
        """The chosen projections at their planned ranks (:func:`prune.lowrank.decomposition.plan`)."""
        return lowrank_resized(size, self.plan(size))

    def estimate(self, found: Estimate, after: Size) -> Estimate:
        """The factors, by arithmetic."""
        return replace(found, owned=found.owned + owned_params(found.size, self.plan(found.size)) * found.element)

    def card_line(self, model: nn.Module, factored: bool = False) -> str:
        params = parameter_count(model)
        return f"- Low-rank: {self.describe()}; {params:,} parameters in memory. " + (FACTORED_FORM if factored
                                                                                        else MERGED_FORM)

    def describe(self) -> str:
        """'feature-space low-rank decomposition to 80 % of the parameters (calibration: …)'."""
        what = (f"to {100 * self.param_ratio:g} % of the parameters" if self.param_ratio is not None
                else f"at rank {self.ranks}" if isinstance(self.ranks, int) else f"at {len(self.ranks)} searched ranks")
        which = f" ({', '.join(self.projections)})" if self.projections else ""
        where = f" in layers {', '.join(map(str, self.layers))}" if self.layers else ""
        data = calibration_words(self.calibration, "" if self.sequential else ", read on the original's activations")
        return f"{self.space}-space low-rank decomposition {what}{which}{where}{data}"

    def short(self) -> str:
        """A column title: 'feature 80%', 'weight r64' or 'feature ranks'."""
        if self.param_ratio is not None:
            return f"{self.space} {100 * self.param_ratio:g}%"
        return f"{self.space} r{self.ranks}" if isinstance(self.ranks, int) else f"{self.space} ranks"


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


MERGED_FORM = ("Saved merged back: each factored projection is stored as the one dense matrix its two factors "
               "multiply to, so any transformers loads this folder as a standard model with the same outputs, at the "
               "original's size and speed; the ranks are in the config (`layercut_ranks`) and below")
FACTORED_FORM = ("Saved factored: each factored projection as its two factors (`first`, `second`), smaller on disk; "
                 "the config is marked `layercut_factored` and records the ranks (`layercut_ranks`, and below). Plain "
                 "transformers cannot build these modules: load the folder with LayerCut's `prune.load_model`")
PREFIX = "lowrank-"  # + the space: the picker's "lowrank-feature", "lowrank-weight"


def build(name: str, level: float, pattern: str, calibration: Calibration) -> Decompose:
    return Decompose.of(name.removeprefix(PREFIX), param_ratio=level / 100, calibration=calibration)


def from_args(args, calibration: Calibration, data_dir=None) -> Decompose | None:
    if args.decompose is None:
        return None
    return Decompose.of(args.decompose, param_ratio=args.param_ratio, calibration=calibration)


def check_args(args) -> None:
    if (args.decompose is None) != (args.param_ratio is None):
        raise InvalidInput("--decompose feature|weight and --param_ratio R go together.")


def reshape(config):
    """A checkpoint saved with its factors is built factored, of the ranks its config records."""
    return with_factor_shapes if getattr(config, FACTORED_FIELD, False) else None


LEVEL = Level("Parameters kept (%)", 10, 99, 80)

FAMILY = register_family(Family(
    refuses=lambda model: experts_refusal(model, "Low-rank factoring"),
    name="lowrank", label="Low-rank", step=Decompose,
    paper="Chavan et al. 2024 (feature space, SFSD-LLM); truncated SVD (weight space)",
    link="https://arxiv.org/abs/2403.07378",
    about="Factors projections into two low-rank maps, in feature space (calibration data) or weight space (SVD).",
    choices=tuple(Choice(PREFIX + space, label, DESCRIPTIONS[space], LEVEL) for space, label in
                  (("feature", "Feature space (Chavan et al. 2024)"), ("weight", "Weight space (truncated SVD)"))),
    build=build,
    options=(Option("--decompose", dict(choices=SPACES, default=None,
                                        help="then factor every projection in feature space (Chavan et al. 2024) or "
                                             "weight space (SVD)")),
             Option("--param_ratio", dict(type=float, default=None,
                                          help="with --decompose: the fraction of the parameters kept (0.8: 80 %%)"))),
    from_args=from_args, check_args=check_args, stage=2, reshape=reshape,
))
