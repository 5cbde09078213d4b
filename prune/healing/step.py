"""The recipe step that heals the model the earlier steps derived (see :mod:`prune.healing.train`).

Registered under the kind ``heal`` when ``prune`` is imported. A heal never comes first: healing
the original is pointless, and :class:`~prune.core.recipe.Recipe` refuses it (:attr:`Heal.follows`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import ClassVar

from torch import nn

from prune.core.calibration import Calibration
from prune.healing.train import check_options, heal
from prune.core.recipe import Progress, _calibration_record, _rebuildable, _text_digest, step

_NAMES = {"lora": "LoRA", "last_layers": "last-layers"}


@step("heal")
@dataclass(frozen=True, eq=False)
class Heal:
    """Retrain briefly with LoRA (merged) or the last layers and the head, on WikiText-2 validation or a given text.

    Options are recorded in full (defaults filled in), so the key says exactly what was trained;
    an inline text is recorded by its digest only, as in :class:`~prune.core.recipe.Sparsify`.
    The parameter count is unchanged (no ``resize``).
    """

    kind: ClassVar[str]
    follows: ClassVar[bool] = True  # must follow another step
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
        return cls(method, steps, frozen, None if budget_s is None else float(budget_s), text, _text_digest(text))

    @property
    def option(self) -> dict:
        return dict(self.options)

    def apply(self, model: nn.Module, tokenizer=None, progress: Progress | None = None, callback=None) -> nn.Module:
        text = _rebuildable(self.text, self.text_digest)
        return heal(model, tokenizer, method=self.method, steps=self.steps, budget_s=self.budget_s, text=text,
                    progress=progress, callback=callback, **self.option)

    def describe(self) -> str:
        """'LoRA healing (rank 8, α 16), 40 steps of 4 × 256 tokens of WikiText-2 validation'."""
        o = self.option
        how = f"rank {o['rank']}, α {o['alpha']}" if self.method == "lora" else \
            f"the last {o['layers']} layers{', final norm and LM head' if o['head'] else ' and final norm'}"
        cap = f" (at most {self.budget_s:g} s)" if self.budget_s is not None else ""
        source = "WikiText-2 validation" if self.text is None or self.text.source == "wikitext2" else \
            f"the {self.text.source} text"
        return (f"{_NAMES[self.method]} healing ({how}), {self.steps} steps{cap} of {o['batch']} × {o['seq_len']} "
                f"tokens of {source}, lr {o['lr']:g}")

    def short(self) -> str:
        """A column title: 'lora 40' or 'last-3 60'."""
        what = "lora" if self.method == "lora" else f"last-{self.option['layers']}"
        return f"{what} {self.steps}"

    def record(self) -> dict:
        """The JSON fields (without ``kind``): options as a dict, an inline text by digest."""
        return {"method": self.method, "steps": self.steps, "budget_s": self.budget_s,
                "options": {k: list(v) if isinstance(v, tuple) else v for k, v in self.options},
                "text": _calibration_record(self.text), "text_digest": self.text_digest}

    @classmethod
    def from_record(cls, data: dict) -> Heal:
        text = data.get("text")
        made = cls.of(data.get("method"), data.get("steps"), data.get("budget_s"),
                      Calibration(**text) if text else None, **(data.get("options") or {}))
        return cls(made.method, made.steps, made.options, made.budget_s, made.text, data.get("text_digest"))

    def __eq__(self, other) -> bool:
        return isinstance(other, Heal) and self.record() == other.record()

    def __hash__(self) -> int:
        return hash(json.dumps(self.record(), sort_keys=True))
