"""The recipe step that heals the model the earlier steps derived (see :mod:`prune.healing.train`).

Registered under the kind ``heal`` when ``prune`` is imported. A heal never comes first: healing
the original is pointless, and :class:`~prune.core.recipe.Recipe` refuses it (:attr:`Heal.follows`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from torch import nn

from prune.core.calibration import Calibration
from prune.core.errors import InvalidInput
from prune.core.family import Family, Option, register_family
from prune.core.sizes import Size
from prune.core.step import (Earlier, Estimate, Progress, Step, calibration_from, calibration_record, rebuildable, step,
                             text_digest, with_digest)
from prune.healing.distill import NAMES as TEACHER_NAMES, TEACHERS
from prune.healing.train import DEFAULTS, KD_DEFAULTS, METHODS, check_options, head_params, heal, owned_params

_NAMES = {"lora": "LoRA", "last_layers": "last-layers"}  # in a step's description
LABELS = {"lora": "LoRA (Shortened LLaMA)", "last_layers": "Last layers and head (Lu et al.)"}  # the page's choice


@step("heal")
@dataclass(frozen=True, eq=False)
class Heal(Step):
    """Retrain briefly with LoRA (merged) or the last layers and the head, on WikiText-2 validation or a given text.

    Options are recorded in full (defaults filled in), so the key says exactly what was trained;
    an inline text is recorded by its digest only, as in :class:`~prune.core.recipe.Sparsify`.
    The parameter count is unchanged (no ``resize``).
    """

    kind: ClassVar[str]
    follows: ClassVar[bool] = True  # must follow another step
    reads_earlier: ClassVar[bool] = True  # distillation's teacher is the original
    method: str  # "lora" or "last_layers"
    steps: int  # optimizer steps asked for (a budget may stop earlier; the healed config says how many ran)
    options: tuple[tuple[str, object], ...]  # every option of the method, sorted by name
    budget_s: float | None = None  # wall-clock cap, seconds
    text: Calibration | None = None  # the training text's source (None: WikiText-2 validation of the data folder)
    text_digest: str | None = None  # sha256 prefix of an inline text

    @classmethod
    def of(cls, method: str = "lora", steps: int | None = None, budget_s: float | None = None,
           text: Calibration | str | None = None, **options) -> Heal:
        """A checked step; ``text`` is a source, an inline string, or None for WikiText-2 validation."""
        steps, merged = check_options(method, steps, budget_s, options)
        if isinstance(text, str):
            text = Calibration(source="text", text=text)
        frozen = tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in merged.items()))
        return cls(method, steps, frozen, None if budget_s is None else float(budget_s), text, text_digest(text))

    @property
    def option(self) -> dict:
        return dict(self.options)

    def apply(self, model: nn.Module, tokenizer=None, progress: Progress | None = None, callback=None,
              earlier: Earlier | None = None) -> nn.Module:
        text = rebuildable(self.text, self.text_digest)
        return heal(model, tokenizer, method=self.method, steps=self.steps, budget_s=self.budget_s, text=text,
                    progress=progress, callback=callback, original=earlier.original if earlier else None,
                    **self.option)

    def describe(self) -> str:
        """'LoRA healing (rank 8, α 16), 40 steps of 4 × 256 tokens of WikiText-2 validation'."""
        o = self.option
        how = f"rank {o['rank']}, α {o['alpha']}" if self.method == "lora" else \
            f"the last {o['layers']} layers{', final norm and LM head' if o['head'] else ' and final norm'}"
        cap = f" (at most {self.budget_s:g} s)" if self.budget_s is not None else ""
        source = "WikiText-2 validation" if self.text is None or self.text.source == "wikitext2" else \
            f"the {self.text.source} text"
        return (f"{_NAMES[self.method]} healing ({how}){self._distilling()}, {self.steps} steps{cap} of {o['batch']} "
                f"× {o['seq_len']} tokens of {source}, lr {o['lr']:g}")

    def _distilling(self) -> str:
        """' by forward KL (KD) to the original (τ 1), half the task loss', or '' for the task loss alone."""
        o = self.option
        if "teacher" not in o:
            return ""
        mix = "" if o["kd_ratio"] == 1 else f", {1 - o['kd_ratio']:g} of the task loss"
        return f" by {TEACHER_NAMES[o['teacher']]} to the original (τ {o['temperature']:g}){mix}"

    def short(self) -> str:
        """A column title: 'lora 40', 'last-3 60', 'lora+kd 30', 'lora+rkl0.5 30' (a share of the task loss)."""
        o = self.option
        what = "lora" if self.method == "lora" else f"last-{o['layers']}"
        if "teacher" in o:
            what += "+" + ("kd" if o["teacher"] == "forward_kl" else "rkl") + ("" if o["kd_ratio"] == 1 else
                                                                           f"{o['kd_ratio']:g}")
        return f"{what} {self.steps}"

    def record(self) -> dict:
        """The JSON fields (without ``kind``): options as a dict, an inline text by digest."""
        return {"method": self.method, "steps": self.steps, "budget_s": self.budget_s,
                "options": {k: list(v) if isinstance(v, tuple) else v for k, v in self.options},
                "text": calibration_record(self.text), "text_digest": self.text_digest}

    @classmethod
    def from_record(cls, data: dict) -> Heal:
        made = cls.of(data.get("method"), data.get("steps"), data.get("budget_s"),
                      calibration_from(data.get("text")), **(data.get("options") or {}))
        return with_digest(made, data.get("text_digest"))

    def estimate(self, found: Estimate, after: Size) -> Estimate:
        """LoRA copies the matrices earlier steps may already own; the last layers add theirs."""
        trained = owned_params(found.size, self.method, self.option, head_params(found.base),
                               copied=found.owned > 0) * found.element
        return replace(found, owned=max(found.owned, trained) if self.method == "lora" else found.owned + trained)


def from_args(args, calibration: Calibration, data_dir=None) -> Heal | None:
    if args.heal is None:
        return None
    text = Calibration(source="wikitext2", path=str(data_dir) if data_dir else None, bos=calibration.bos)
    distilling = {} if args.heal_teacher == "none" else {
        "teacher": args.heal_teacher, **{k: v for k, v in (("kd_ratio", args.kd_ratio),
                                                           ("temperature", args.kd_temperature)) if v is not None}}
    return Heal.of(args.heal, args.heal_steps, args.heal_budget_s, text, **distilling)


def check_args(args) -> None:
    if (args.heal_steps is not None or args.heal_budget_s is not None or args.heal_teacher != "none") \
            and args.heal is None:
        raise InvalidInput("--heal_steps, --heal_budget_s and --heal_teacher go with --heal lora|last_layers.")
    if (args.kd_ratio is not None or args.kd_temperature is not None) and args.heal_teacher == "none":
        raise InvalidInput("--kd_ratio and --kd_temperature go with --heal_teacher forward_kl|reverse_kl.")


FAMILY = register_family(Family(
    name="healing", label="Healing", step=Heal,
    paper="Kim et al. 2024 (Shortened LLaMA: LoRA); Lu et al. 2024 (the last layers); distillation: Hinton et al. "
          "2015 (KD), Muralidharan et al. 2024 (Minitron), Gu et al. 2024 (MiniLLM)",
    link="https://arxiv.org/abs/2402.02834",
    about="Retrains a compressed model briefly: LoRA adapters merged back, or the last layers, final norm and head; "
          "on the text, or distilled from the original.",
    options=(Option("--heal", dict(choices=METHODS, default=None,
                                   help="then retrain briefly: LoRA, merged (Shortened LLaMA), or the last layers, "
                                        "final norm and LM head (Lu et al. 2024), on WikiText-2 validation; test "
                                        "perplexity is never trained on")),
             Option("--heal_steps", dict(type=int, default=None,
                                         help="with --heal: optimizer steps "
                                              f"(default: lora {DEFAULTS['lora']['steps']}, "
                                              f"last_layers {DEFAULTS['last_layers']['steps']})")),
             Option("--heal_budget_s", dict(type=float, default=None,
                                            help="with --heal: stop after the step that crosses this many seconds")),
             Option("--heal_teacher", dict(choices=TEACHERS, default="none",
                                           help="with --heal: distil from the original: forward_kl (KD, as Minitron) "
                                                "or reverse_kl (token-level MiniLLM); none: the text's next-token "
                                                "loss")),
             Option("--kd_ratio", dict(type=float, default=None,
                                       help=f"with --heal_teacher: the distillation loss's share, the rest the "
                                            f"next-token loss (default {KD_DEFAULTS['kd_ratio']:g}: distillation "
                                            f"only)")),
             Option("--kd_temperature", dict(type=float, default=None,
                                             help=f"with --heal_teacher: the softmax temperature τ (default "
                                                  f"{KD_DEFAULTS['temperature']:g}; the loss is scaled by τ²)"))),
    from_args=from_args, check_args=check_args, stage=4,
))
