"""The quantization family's recipe step: weight-only int8 or int4 (torchao's numbers, PyTorch's kernels), last.

Registered under the kind ``quantize`` when ``prune`` is imported. It may follow any other step (or stand alone:
"int4 alone") and nothing may follow it (:attr:`Quantize.last`): healing, sparsifying or cutting quantized weights
is not what these steps do. It removes no layer, so a quantized depth cut keeps its mergekit and llama.cpp hand-offs
(they build the unquantized cut, and say so).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from torch import nn

from prune.core.calibration import Calibration
from prune.core.errors import InvalidInput
from prune.core.family import Choice, Family, Option, register_family
from prune.core.sizes import Size
from prune.core.step import Estimate, Progress, Step, step
from prune.quantize.weights import (BITS, DEFAULT_GROUP, GROUPS, QUANTIZED_FIELD, check, head_bytes, quantize,
                                    int8_bytes, quantized_bytes, restore)

NAMES = {"int8": 8, "int4": 4}
HEAD = "+head"  # a picker name's suffix: the LM head in int8 too ("int4+head")
KERNELS = {8: "`torch._weight_int8pack_mm`", 4: "tinygemm's `_weight_int4pack_mm_for_cpu`"}  # a CPU's (elsewhere the
# products dequantize, then multiply)


@step("quantize")
@dataclass(frozen=True, eq=False)
class Quantize(Step):
    """Store the decoder layers' linear weights in ``bits`` bits (see :mod:`prune.quantize.weights`)."""

    kind: ClassVar[str]
    last: ClassVar[bool] = True
    card_tag: ClassVar[str] = "quantized"
    bits: int  # 8 or 4
    group: int | None = None  # int4: inputs per scale; int8: None (one scale per row)
    head: bool = False  # the LM head in int8 too (a scale per row)

    @classmethod
    def of(cls, bits: int = 8, group: int | None = None, head: bool = False) -> Quantize:
        if not isinstance(head, bool):
            raise InvalidInput("Whether the LM head is quantized is true or false.")
        return cls(*check(bits, group), head)

    @classmethod
    def from_record(cls, data: dict) -> Quantize:
        return cls.of(data.get("bits"), data.get("group"), data.get("head", False))

    def apply(self, model: nn.Module, tokenizer=None, progress: Progress | None = None) -> nn.Module:
        return quantize(model, self.bits, self.group, self.head)

    def estimate(self, found: Estimate, after: Size) -> Estimate:
        """Every layer matrix quantized, by arithmetic: it replaces the copies an earlier step made of those
        matrices (one kept dense, its width not whole groups, stays an earlier step's copy if there were copies)."""
        copied = found.owned > 0
        owned = sum(quantized_bytes(m, self.bits, self.group, found.element, copied)
                    for layer in after.matrices for m in layer)
        owned += head_bytes(found.base) if self.head else 0
        return replace(found, owned=owned, built=False)

    def stored(self, after: Size, element: int, stored: int) -> int:
        """Every layer matrix in its quantized bytes instead of dense (one kept dense stays so); with ``head``, the LM
        head as its int8 copy (a tied head untied: the embedding stays beside it)."""
        matrices = [m for layer in after.matrices for m in layer]
        dense = sum((m.params + (m.outputs if m.bias else 0)) * element for m in matrices)
        stored += sum(quantized_bytes(m, self.bits, self.group, element, True) for m in matrices) - dense
        if self.head:
            rows, width = after.embedding
            stored += int8_bytes(rows, width, element) - (0 if after.tied else rows * width * element)
        return stored

    def base_layers(self, kept: list[int]) -> list[int]:
        """It removes no layer."""
        return kept

    def handoff_note(self) -> str:
        return ("the weights were quantized by torchao; the mergekit and llama.cpp commands build the unquantized "
                "model (llama-quantize quantizes in its own formats)")

    def card_line(self, model: nn.Module, factored: bool = False) -> str:
        found = getattr(model.config, QUANTIZED_FIELD, None) or {}
        dense = found.get("dense", 0)
        kept = f"; {dense} projection(s) kept dense (input width not a multiple of the group)" if dense else ""
        packed = ", int4 packed two values a byte with bfloat16 scales" if self.bits == 4 else ""
        head = " and the LM head (int8, untied from the input embedding)" if self.head else ""
        return (f"- Quantization: {self.describe()}: {found.get('quantized', '?')} projections{head}{kept}. In "
                "LayerCut, "
                f"on a CPU, the products run PyTorch's kernels ({KERNELS[self.bits]}) with activations rounded to "
                f"bfloat16{packed}. Saved in torchao's plain format (the same integers and scales): transformers with "
                "torchao installed reloads it (`TorchAoConfig` in config.json) and multiplies in the model's dtype, "
                "so its logits differ from LayerCut's by the bfloat16 rounding of the activations.")

    def describe(self) -> str:
        """'int4 weight-only quantization (torchao, symmetric, groups of 32 inputs)'."""
        scale = "one scale per row" if self.group is None else f"groups of {self.group} inputs"
        head = "; the LM head in int8, a scale per row" if self.head else ""
        return f"int{self.bits} weight-only quantization (torchao, symmetric, {scale}{head})"

    def short(self) -> str:
        """A column title: 'int8', 'int4 g32' or 'int8+head'."""
        return (f"int{self.bits}" if self.group is None else f"int{self.bits} g{self.group}") + (HEAD if self.head
                                                                                                else "")


def build(name: str, level: float, pattern: str, calibration: Calibration) -> Quantize:
    """The picker's step (it has no level)."""
    return Quantize.of(NAMES[name.removesuffix(HEAD)], head=name.endswith(HEAD))


def from_args(args, calibration: Calibration, data_dir=None) -> Quantize | None:
    if args.quantize is None:
        return None
    return Quantize.of(NAMES[args.quantize], args.quant_group if args.quantize == "int4" else None, args.quant_head)


def check_args(args) -> None:
    if args.quant_group is not None and args.quantize != "int4":
        raise InvalidInput("--quant_group goes with --quantize int4.")
    if args.quant_head and args.quantize is None:
        raise InvalidInput("--quant_head goes with --quantize.")


FAMILY = register_family(Family(
    name="quantize", label="Quantization", step=Quantize,
    paper="torchao (PyTorch's quantization library): weight-only int8 and int4", link="https://github.com/pytorch/ao",
    about="Stores every decoder matrix in int8 (a scale per row) or int4 (a scale per group of inputs), weight-only; "
          "last in a recipe, after any other step.",
    choices=(Choice("int8", "int8 weights (torchao, weight-only)",
                    "one int8 per weight and a scale per row: a quarter of float32's bytes; on a CPU the products run "
                    "PyTorch's int8 kernel with bfloat16 activations. Last in a recipe: tick 'Start from this slot's "
                    "cut' to quantize the slot's model.",
                    None),
             Choice("int4", f"int4 weights (torchao, weight-only, groups of {DEFAULT_GROUP})",
                    f"16 levels per weight, two a byte, a bfloat16 scale and zero per {DEFAULT_GROUP} inputs (about "
                    "0.6 of int8's bytes); on a CPU the products run PyTorch's int4 kernel (tinygemm) with bfloat16 "
                    "activations.", None),
             *(Choice(f"int{bits}{HEAD}", f"int{bits} weights and an int8 LM head",
                      f"as int{bits}, and the LM head too in int8, a scale per row, as llama.cpp stores it in higher "
                      "precision than the layers (Q8_0 beside Q8_0, Q6_K beside Q4_0): the head is the largest matrix "
                      "of a small model, read whole for every token. A tied head is untied; the input embedding stays "
                      "the original's.", None) for bits in BITS)),
    build=build,
    options=(Option("--quantize", dict(choices=tuple(NAMES), default=None,
                                       help="last: store every decoder matrix in int8 (a scale per row) or int4 (a "
                                            "scale per group), weight-only, through torchao")),
             Option("--quant_group", dict(type=int, choices=GROUPS, default=None,
                                          help=f"with --quantize int4: inputs per scale (default {DEFAULT_GROUP})")),
             Option("--quant_head", dict(action="store_true",
                                         help="with --quantize: the LM head too, in int8 (a scale per row), as "
                                              "llama.cpp stores it; a tied head is untied"))),
    from_args=from_args, check_args=check_args, stage=9, restore=restore,
))
