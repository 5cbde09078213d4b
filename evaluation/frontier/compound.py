"""Compound candidates: what deployments do, a network cut or slimmed, repaired and quantized.

Each structural family of the frontier (depth by the paper's rule and by block, each also patched; width; low rank; a
mixture of experts' expert pruning by REAP) combined with int8 and with int4, planned by arithmetic on the **bytes as
stored** (``Recipe.stored_bytes``: the structure's parameters, its matrices then in their quantized bytes) so that
the compound lands at the size: the mildest structure that, quantized, fits, rather than a deep cut in float. Where
the quantization alone already fits, no structure is needed and the compound is said to be that family alone. On the
params axis a quantization changes nothing (it keeps every parameter), so compounds are planned by bytes and by
latency only (a decode step reads every stored byte once: the latency axis is planned as the same fraction of the
bytes).

With a repair (``kd`` or ``lora`` and a number of seconds), each structural point (alone and in its compounds) is
also trained for that long before it is quantized (``prune.healing``: LoRA on WikiText-2 validation, ``kd`` distilled
from the original by forward KL), as the depth papers report their cuts: its own families say so ("depth, block + kd
+ int4").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from prune.core.calibration import Calibration
from prune.core.errors import InvalidCut, InvalidInput, LayerCutError, quoted
from prune.core.recipe import Recipe
from prune.core.sizes import Size
from prune.healing.step import Heal
from prune.quantize.step import Quantize

STRUCTURES = ("depth, paper", "depth, paper + patch", "depth, block", "depth, block + patch", "width", "low-rank")
EXPERTS = "experts, REAP"  # a mixture of experts' experts removed (REAP): quantized too, not repaired
QUANTIZED = ("int8", "int4")  # the quantizations a structure is combined with, as the frontier's own single families
FAMILIES = tuple(f"{structure} + {bits}" for structure in (*STRUCTURES, EXPERTS) for bits in QUANTIZED)
REPAIRS = {"kd": {"teacher": "forward_kl"}, "lora": {}}  # a repair's LoRA options: distilled, or on the text alone
REPAIR_STEPS = 100_000  # steps asked of a repair: its seconds stop it first
RATIO_STEP = 0.001  # the finest width or rank ratio a compound is planned at


def quantization(name: str, calibration: Calibration | None) -> Quantize:
    """The step of the frontier's ``int8`` (rounded to nearest: GPTQ buys int8 nothing measurable) or ``int4``
    (groups of 32, GGUF's Q4_0 group, by GPTQ on the frontier's ``calibration``), each with the input embedding in
    int8 (a head tied to it stays tied): what a deployment ships, as llama.cpp stores ``token_embd``."""
    if name == "int8":
        return Quantize.of(8, embedding=True)
    return Quantize.of(4, method="gptq", calibration=calibration, embedding=True)


@dataclass(frozen=True)
class Repair:
    """Each structural point trained for ``seconds`` before it is quantized."""

    name: str  # a key of REPAIRS
    seconds: float

    def step(self, text: Calibration | None) -> Heal:
        return Heal.of("lora", REPAIR_STEPS, self.seconds, text, **REPAIRS[self.name])

    def families(self) -> tuple[str, ...]:
        """The repaired families: each structure repaired, alone and quantized."""
        return tuple(f"{s} + {self.name}{'' if bits is None else ' + ' + bits}" for s in STRUCTURES
                     for bits in (None, *QUANTIZED))


def check_repair(name: str | None, seconds: float | None) -> Repair | None:
    """A repair (``kd 120``), or None; a one-line refusal otherwise."""
    if name is None:
        return None
    if name not in REPAIRS:
        raise InvalidInput(f"A frontier's repair is {' or '.join(REPAIRS)}, not {quoted(name)}.")
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 < seconds <= 3600:
        raise InvalidInput(f"A repair trains each point for 1…3,600 seconds, not {quoted(seconds)}.")
    return Repair(name, float(seconds))


def fewest_fitting(make: Callable[[int], Recipe], finish: Callable[[Recipe], Recipe], limit: int, base: Size,
                   element: int, most: int) -> Recipe | str:
    """``finish(make(n))`` for the smallest n (1 … ``most``) whose bytes as stored are at most ``limit``, or why
    none is."""
    for n in range(1, most + 1):
        try:
            recipe = finish(make(n))
        except InvalidCut as err:
            return " ".join(str(err).split())
        if recipe.stored_bytes(base, element) <= limit:
            return recipe
    return f"removing {most} of them does not reach this size once quantized"


def largest_fitting(make: Callable[[float], Recipe], finish: Callable[[Recipe], Recipe], limit: int, base: Size,
                    element: int) -> Recipe | str:
    """``finish(make(r))`` for the largest ratio r (to ``RATIO_STEP``) whose bytes as stored are at most ``limit``:
    down from 0.99 in hundredths to the first that fits, then up in thousandths; or why none does."""
    def fitting(ratio: float) -> Recipe | None:
        try:
            recipe = finish(make(round(ratio, 6)))
            return recipe if recipe.stored_bytes(base, element) <= limit else None
        except LayerCutError:
            return None  # a ratio this family cannot build reaches nothing

    coarse = next((hundredths / 100 for hundredths in range(99, 0, -1) if fitting(hundredths / 100)), None)
    if coarse is None:
        return "no ratio of this family reaches this size once quantized"
    finer = [coarse + k * RATIO_STEP for k in range(9, 0, -1)]
    return next((found for ratio in finer if (found := fitting(ratio)) is not None), fitting(coarse))
