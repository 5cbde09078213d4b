"""The width family's recipe step, and what the family is: fewer heads and MLP channels (Wanda-sp, FLAP)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from torch import nn

from prune.core.architectures import width_refusal
from prune.core.architectures import layer_config, width_of
from prune.core.calibration import Calibration
from prune.core.errors import InvalidInput, quoted
from prune.core.family import Choice, Family, Level, Option, register_family
from prune.core.sizes import Size, check_ratio, parameter_count
from prune.core.step import (Estimate, Progress, Step, calibration_from, calibration_record, calibration_words,
                             rebuildable, step, text_digest, with_digest)
from prune.width import taylor
from prune.width.shrink import (CRITERIA, DESCRIPTION, LLM_PRUNER, WANDA_SP, check_criterion, owned_params, plan,
                                resized, shrink_width)


@step("width")
@dataclass(frozen=True, eq=False)
class WidthPrune(Step):
    """Remove MLP channels and attention heads (whole KV groups) until ``param_ratio`` of the parameters stay.

    See :mod:`prune.width.shrink`: Wanda-sp importance (``criterion`` "wanda-sp") or LLM-Pruner's
    (``"llm-pruner"``, :mod:`prune.width.taylor`), the same structures from every layer, a standard config. The
    derived model owns its smaller matrices. An inline calibration text is recorded by its digest only, as in
    :class:`~prune.sparsity.step.Sparsify`.
    """

    kind: ClassVar[str]
    card_tag: ClassVar[str] = "width-pruning"
    layerwise: ClassVar[bool] = True
    refuses_after: ClassVar[dict[str, str]] = {
        "lowrank": "Width pruning cannot slice a projection held as low-rank factors: prune the width before "
                   "decomposing."}
    param_ratio: float  # fraction of the parameters of the model the step applies to, embeddings included
    calibration: Calibration | None = None
    text_digest: str | None = None  # sha256 prefix of an inline calibration text (source "text")
    criterion: str = WANDA_SP  # what ranks the structures: a key of prune.width.shrink.CRITERIA

    @classmethod
    def of(cls, param_ratio: float, calibration: Calibration | None = None, criterion: str = WANDA_SP) -> WidthPrune:
        """A checked step; the importance calibrates on ``calibration`` (None: the built-in text)."""
        calibration = calibration or Calibration()
        return cls(check_ratio(param_ratio), calibration, text_digest(calibration), check_criterion(criterion))

    @classmethod
    def from_record(cls, data: dict) -> WidthPrune:
        made = cls.of(data.get("param_ratio"), calibration_from(data.get("calibration")),
                      data.get("criterion", WANDA_SP))
        return with_digest(made, data.get("text_digest"))

    def record(self) -> dict:
        """The JSON fields (without ``kind``): an inline text by digest, never megabytes of it; the criterion
        only when it is not the default, so that earlier recipes keep their keys."""
        found = {"param_ratio": self.param_ratio, "calibration": calibration_record(self.calibration),
                 "text_digest": self.text_digest}
        return found if self.criterion == WANDA_SP else {**found, "criterion": self.criterion}

    def apply(self, model: nn.Module, tokenizer=None, progress: Progress | None = None) -> nn.Module:
        cal = rebuildable(self.calibration, self.text_digest)
        return shrink_width(model, tokenizer, param_ratio=self.param_ratio, calibration=cal, progress=progress,
                            criterion=self.criterion)

    def resize(self, size: Size) -> Size:
        """Every layer loses the structures :func:`prune.width.shrink.plan` chooses."""
        return resized(size, plan(size, self.param_ratio))

    def estimate(self, found: Estimate, after: Size) -> Estimate:
        """The smaller matrices, by arithmetic (later steps count on the size, not on a built model)."""
        return replace(found, owned=owned_params(found.size, after) * found.element, built=False)

    def card_line(self, model: nn.Module, factored: bool = False) -> str:
        params = parameter_count(model)
        return (f"- Width: {width_words(model)} per layer, {params:,} parameters ({self.describe()}); "
                "the checkpoint holds the smaller matrices in a standard config: it is smaller and faster "
                "with any kernels")

    def describe(self) -> str:
        """'width pruning to 80 % of the parameters: heads and MLP channels ranked by weight × activation
        (Wanda-sp) (calibration: …)'."""
        ranked = "weight × gradient" if self.criterion == LLM_PRUNER else "weight × activation"
        return (f"width pruning to {100 * self.param_ratio:g} % of the parameters: heads and MLP channels ranked by "
                f"{ranked} ({CRITERIA[self.criterion]}){calibration_words(self.calibration)}")

    def short(self) -> str:
        """A column title: 'width 80%', or 'width 80% LLM-Pruner'."""
        named = "" if self.criterion == WANDA_SP else f" {CRITERIA[self.criterion]}"
        return f"width {100 * self.param_ratio:g}%{named}"


def width_words(model: nn.Module) -> str:
    """'6 attention heads (2 KV heads, head_dim 64) and 1,016 MLP channels', from the derived config."""
    config, table = layer_config(model), width_of(model)
    mlp = f"{getattr(config, table.channel_field):,} MLP channels"
    if table.heads is None:
        return mlp
    return (f"{config.num_attention_heads} attention heads ({config.num_key_value_heads} KV heads, head_dim "
            f"{config.head_dim}) and {mlp}")


LEVEL = Level("Parameters kept (%)", 10, 99, 80)
NAME = "width"  # the picker's name for width pruning (Wanda-sp)
TAYLOR_NAME = "width-llm-pruner"  # the picker's name for LLM-Pruner's criterion
WIDTH_METHODS = (NAME, TAYLOR_NAME)


def criterion_for(name: str) -> str:
    """The criterion a width method's picker name stands for; any other name is refused in one line."""
    if name not in WIDTH_METHODS:
        raise InvalidInput(f"{quoted(name)} is not a width method; choose one of {', '.join(WIDTH_METHODS)}.")
    return LLM_PRUNER if name == TAYLOR_NAME else WANDA_SP


def build(name: str, level: float, pattern: str, calibration: Calibration) -> WidthPrune:
    return WidthPrune.of(level / 100, calibration, criterion_for(name))


def from_args(args, calibration: Calibration, data_dir=None) -> WidthPrune | None:
    return None if args.width is None else WidthPrune.of(args.width, calibration, args.width_criterion)


def check_args(args) -> None:
    if args.width is None and args.width_criterion != WANDA_SP:
        raise InvalidInput("--width_criterion goes with --width RATIO.")


FAMILY = register_family(Family(
    refuses=width_refusal,
    name="width", label="Width", step=WidthPrune,
    paper="An et al. 2024 (FLAP); Sun et al. 2023 (Wanda); Ma et al. 2023 (LLM-Pruner)",
    link="https://arxiv.org/abs/2312.11983",
    about="Removes attention heads (whole KV groups) and MLP channels in every layer down to a parameter count.",
    choices=(Choice(NAME, "Width pruning — fewer heads and MLP channels (Wanda-sp)", DESCRIPTION, LEVEL),
             Choice(TAYLOR_NAME, "Width pruning — LLM-Pruner's Taylor criterion", taylor.DESCRIPTION, LEVEL)),
    build=build,
    options=(Option("--width", dict(type=float, metavar="RATIO", default=None,
                                    help="then remove heads and MLP channels until RATIO of the parameters stay "
                                         "(0.8: 80 %%)")),
             Option("--width_criterion", dict(choices=tuple(CRITERIA), default=WANDA_SP,
                                              help="what ranks them: wanda-sp (weight × activation, FLAP) or "
                                                   "llm-pruner (element-wise weight × gradient, LLM-Pruner)"))),
    from_args=from_args, check_args=check_args, stage=1,
))
