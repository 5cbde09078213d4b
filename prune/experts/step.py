"""The expert-pruning family's recipe step: a mixture of experts loses the same share of every layer's experts, the
least salient by REAP or a baseline (:mod:`prune.experts.saliency`), as REAP's code removes them
(:mod:`prune.experts.removal`)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from torch import nn

from prune.core.architectures import layer_config
from prune.core.calibration import Calibration
from prune.core.errors import InvalidInput, LayerCutError, quoted
from prune.core.experts import decoder_experts
from prune.core.family import Choice, Family, Level, Option, register_family
from prune.core.sizes import Size
from prune.core.step import (Estimate, Progress, Step, calibration_from, calibration_record, calibration_words,
                             rebuildable, step, text_digest, with_digest)
from prune.experts.merging import merge_experts, merge_statistics
from prune.experts.removal import COUNT_FIELDS, kept_experts, remove_experts, removed_count
from prune.experts.saliency import METHODS, check_method, expert_saliency, moe_layers

MERGE = "merge"
# the step's methods: a saliency whose lowest experts go, or merging
CRITERIA = {**METHODS, MERGE: "merged, frequency-weighted"}

MAX_FRACTION = 0.9
PREFIX = "experts-"  # the picker's names: "experts-reap", …


@step("experts")
@dataclass(frozen=True, eq=False)
class ExpertPrune(Step):
    """Remove ``fraction`` of every layer's experts, the lowest by ``method``'s saliency on ``calibration``."""

    kind: ClassVar[str]
    card_tag: ClassVar[str] = "expert-pruning"
    method: str  # one of CRITERIA
    fraction: float  # of each layer's experts removed: int(E · fraction) of them
    calibration: Calibration | None = None  # None for random, which reads no data
    text_digest: str | None = None
    seed: int = 0  # random's draw

    @classmethod
    def of(cls, method: str, fraction: float, calibration: Calibration | None = None, seed: int = 0) -> ExpertPrune:
        method = method if method == MERGE else check_method(method)
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 <= fraction <= MAX_FRACTION:
            raise InvalidInput(f"The share of experts removed is a fraction from 0 to {MAX_FRACTION}, not "
                               f"{quoted(fraction)}.")
        calibration = None if method == "random" else calibration or Calibration()
        return cls(method, float(fraction), calibration, text_digest(calibration), int(seed))

    @classmethod
    def from_record(cls, data: dict) -> ExpertPrune:
        made = cls.of(data.get("method"), data.get("fraction"), calibration_from(data.get("calibration")),
                      data.get("seed", 0))
        return with_digest(made, data.get("text_digest"))

    def record(self) -> dict:
        return {"method": self.method, "fraction": self.fraction, "calibration": calibration_record(self.calibration),
                "text_digest": self.text_digest, "seed": self.seed}

    def apply(self, model: nn.Module, tokenizer=None, progress: Progress | None = None) -> nn.Module:
        calibration = rebuildable(self.calibration, self.text_digest)
        if self.method == MERGE:
            statistics = merge_statistics(model, tokenizer, calibration, progress=progress)
            return merge_experts(model, statistics, self.fraction)
        layers = moe_layers(model)
        scores = expert_saliency(model, tokenizer, self.method, calibration, seed=self.seed, progress=progress)
        return remove_experts(model, kept_experts(scores, self.fraction), layers)

    def resize(self, size: Size) -> Size:
        """Every stack of experts keeps E − int(E · fraction) experts, and its router as many rows (one a kept expert,
        as wide as the experts' inputs)."""
        layers, matrices = list(size.layers), []
        for index, found in enumerate(size.matrices):
            stacks = [m for m in found if m.experts > 1]
            if stacks:
                gone = removed_count(stacks[0].experts, self.fraction)
                layers[index] -= gone * (sum(m.outputs * m.inputs + (m.outputs if m.bias else 0) for m in stacks)
                                         + stacks[0].inputs)  # each removed expert's matrices and router row
                found = tuple(replace(m, experts=m.experts - gone) if m.experts > 1 else m for m in found)
            matrices.append(found)
        return replace(size, layers=tuple(layers), matrices=tuple(matrices))

    def estimate(self, found: Estimate, after: Size) -> Estimate:
        """The kept experts' stacks and their routers' rows are the variant's own copies."""
        stacks = [[m for m in layer if m.experts > 1] for layer in after.matrices]
        copies = sum(m.params + (m.rows if m.bias else 0) for layer in stacks for m in layer)
        routers = sum(layer[0].experts * layer[0].inputs for layer in stacks if layer)
        return replace(found, owned=found.owned + (copies + routers) * found.element)

    def card_line(self, model: nn.Module, factored: bool = False) -> str:
        config = layer_config(model)
        count = next((getattr(config, f) for f in COUNT_FIELDS if isinstance(getattr(config, f, None), int)), "?")
        how = ("each the frequency-weighted average of the experts merged into it, as REAP's merging baseline "
               "averages them" if self.method == MERGE else "as REAP's code removes them")
        return (f"- Expert pruning: {self.describe()}; {count} experts kept in each layer with experts, their router "
                f"rows with them, {how} (Lasby et al. 2025).")

    def describe(self) -> str:
        """'REAP expert pruning, 25 % of each layer's experts removed (calibration: …)'."""
        if self.method == MERGE:
            return (f"Expert merging, {100 * self.fraction:g} % of each layer's experts merged into the kept"
                    f"{calibration_words(self.calibration)}")
        return (f"{METHODS[self.method]} expert pruning, {100 * self.fraction:g} % of each layer's experts removed"
                f"{calibration_words(self.calibration)}")

    def short(self) -> str:
        """A column title: 'reap −25% experts'."""
        return f"{self.method} −{100 * self.fraction:g}% experts"


def refusal(model: nn.Module) -> str | None:
    """For the model line: one line where the model has experts LayerCut cannot read, else None. A dense model is not
    named (every dense model would carry the line): building on it refuses in one line."""
    if not decoder_experts(model):
        return None
    try:
        moe_layers(model)
    except LayerCutError as err:
        return str(err)
    return None


def build(name: str, level: float, pattern: str, calibration: Calibration) -> ExpertPrune:
    return ExpertPrune.of(name.removeprefix(PREFIX), level / 100, calibration)


def from_args(args, calibration: Calibration, data_dir=None) -> ExpertPrune | None:
    if args.prune_experts is None:
        return None
    return ExpertPrune.of(args.prune_experts, args.expert_fraction, calibration)


def check_args(args) -> None:
    if args.expert_fraction != DEFAULT_FRACTION and args.prune_experts is None:
        raise InvalidInput("--expert_fraction goes with --prune_experts METHOD.")


DEFAULT_FRACTION = 0.25
LEVEL = Level("Experts removed (% of each layer's)", 0, round(100 * MAX_FRACTION), round(100 * DEFAULT_FRACTION))
WORDS = {"reap": "REAP (Lasby et al. 2025): the mean over the tokens routed to an expert of its renormalised gate "
                 "value times the norm of its output; the lowest go",
         "frequency": "the experts the fewest calibration tokens are routed to go",
         "ean": "the experts with the smallest mean output norm over their routed tokens go",
         "gate": "the experts with the smallest mean renormalised gate value over their routed tokens go",
         "random": "a seeded random choice: the baseline",
         MERGE: "merging (REAP's baseline): the least frequently routed experts are averaged, weighted by frequency, "
                "into the kept expert of the nearest mean output (HC-SMoE's similarity) instead of removed"}

FAMILY = register_family(Family(
    refuses=refusal,
    name="experts", label="Expert pruning", step=ExpertPrune,
    paper="Lasby et al. 2025, REAP the Experts (ICLR 2026)", link="https://arxiv.org/abs/2510.13999",
    about="Removes the same share of every layer's experts of a mixture of experts, the least salient by REAP or a "
          "baseline on the calibration text, with their router rows.",
    choices=tuple(Choice(f"{PREFIX}{name}", f"{label} (Lasby et al. 2025)" if name == "reap" else
                         f"by {label}" if name in METHODS else label,
                         WORDS[name] + ". One pass over the "
                         "calibration text; every layer keeps as many experts.", LEVEL)
                  for name, label in CRITERIA.items()),
    build=build,
    options=(Option("--prune_experts", dict(choices=tuple(CRITERIA), default=None,
                                            help="remove --expert_fraction of every layer's experts of a mixture of "
                                                 "experts, the least salient by this criterion (reap: REAP; merge: "
                                                 "merged into the kept instead)")),
             Option("--expert_fraction", dict(type=float, default=DEFAULT_FRACTION,
                                              help=f"with --prune_experts: the share of each layer's experts removed "
                                                   f"(default {DEFAULT_FRACTION})"))),
    from_args=from_args, check_args=check_args, stage=1,
))
