"""The quantization family's recipe step: weight-only int8 or int4, rounded to nearest (torchao's numbers) or chosen by
GPTQ on calibration text, in PyTorch's kernels' form, last.

Registered under the kind ``quantize`` when ``prune`` is imported. It may follow any other step (or stand alone:
"int4 alone") and nothing may follow it (:attr:`Quantize.last`): healing, sparsifying or cutting quantized weights
is not what these steps do. It removes no layer, so a quantized depth cut keeps its mergekit and llama.cpp hand-offs
(they build the unquantized cut, and say so).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from torch import nn

from prune.core.experts import experts_refusal
from prune.core.calibration import Calibration
from prune.core.errors import InvalidInput, quoted
from prune.core.family import Choice, Family, Option, register_family
from prune.core.sizes import Size
from prune.core.step import (Estimate, Progress, Step, calibration_from, calibration_record, calibration_words,
                             rebuildable, step, text_digest, with_digest)
from prune.quantize.calibrated import quantize_gptq
from prune.quantize.weights import (BITS, DEFAULT_GROUP, GROUPS, QUANTIZED_FIELD, check, int8_bytes, quantize,
                                    quantized_bytes, restore)

NAMES = {"int8": 8, "int4": 4}
HEAD = "+head"  # a picker name's suffix: the LM head in int8 too ("int4+head")
EMBEDDING = "+emb"  # a picker name's suffix: the input embedding in int8 too ("int4+emb"; a tied head with it)
GPTQ = "-gptq"  # a picker name's suffix: the integers chosen by GPTQ ("int4-gptq")
METHODS = {"rtn": "round-to-nearest", "gptq": "GPTQ"}  # how the integers are chosen → its words
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
    method: str = "rtn"  # "rtn" (round to nearest) or "gptq" (calibrated, see prune.quantize.gptq)
    calibration: Calibration | None = None  # GPTQ's; None for rtn, which reads no data
    text_digest: str | None = None  # sha256 prefix of an inline calibration text (source "text")
    embedding: bool = False  # the input embedding in int8 too (a scale per row); a head tied to it stays tied

    @classmethod
    def of(cls, bits: int = 8, group: int | None = None, head: bool = False, method: str = "rtn",
           calibration: Calibration | None = None, embedding: bool = False) -> Quantize:
        """A checked step; GPTQ calibrates on ``calibration`` (None: the built-in text)."""
        if not isinstance(head, bool):
            raise InvalidInput("Whether the LM head is quantized is true or false.")
        if not isinstance(embedding, bool):
            raise InvalidInput("Whether the input embedding is quantized is true or false.")
        if method not in METHODS:
            raise InvalidInput(f"Quantization rounds to nearest (rtn) or solves by GPTQ (gptq), not {quoted(method)}.")
        calibration = calibration or Calibration() if method == "gptq" else None
        return cls(*check(bits, group), head, method, calibration, text_digest(calibration), embedding)

    @classmethod
    def from_record(cls, data: dict) -> Quantize:
        """A recorded step; one recorded before GPTQ (no ``method``) rounds to nearest, one without ``embedding``
        keeps the float embedding."""
        made = cls.of(data.get("bits"), data.get("group"), data.get("head", False), data.get("method", "rtn"),
                      calibration_from(data.get("calibration")), data.get("embedding", False))
        return with_digest(made, data.get("text_digest"))

    def record(self) -> dict:
        """The JSON fields (without ``kind``): round-to-nearest's as they were before GPTQ (its recipes' keys
        unchanged); GPTQ's with its calibration (an inline text by digest); ``embedding`` only when set."""
        found = {"bits": self.bits, "group": self.group, "head": self.head,
                 **({"embedding": True} if self.embedding else {})}
        if self.method == "rtn":
            return found
        return {**found, "method": self.method, "calibration": calibration_record(self.calibration),
                "text_digest": self.text_digest}

    def apply(self, model: nn.Module, tokenizer=None, progress: Progress | None = None) -> nn.Module:
        if self.method == "rtn":
            return quantize(model, self.bits, self.group, self.head, self.embedding)
        return quantize_gptq(model, tokenizer, self.bits, self.group, self.head, embedding=self.embedding,
                             calibration=rebuildable(self.calibration, self.text_digest), progress=progress)

    def estimate(self, found: Estimate, after: Size) -> Estimate:
        """Every layer matrix quantized, by arithmetic: it replaces the copies an earlier step made of those
        matrices (one kept dense, its width not whole groups, stays an earlier step's copy if there were copies)."""
        copied = found.owned > 0
        owned = sum(quantized_bytes(m, self.bits, self.group, found.element, copied)
                    for layer in after.matrices for m in layer)
        int8 = int8_bytes(*after.embedding, found.element)  # an int8 embedding or head: a tied pair is one matrix
        owned += int8 * (self.embedding + (self.head and not (self.embedding and after.tied)))
        return replace(found, owned=owned, built=False)

    def stored(self, after: Size, element: int, stored: int) -> int:
        """Every layer matrix in its quantized bytes instead of dense (one kept dense stays so); with ``head``, the LM
        head as its int8 copy (a tied head untied: the embedding stays beside it); with ``embedding``, the input
        embedding as its int8 copy (a tied head shares it: counted once)."""
        matrices = [m for layer in after.matrices for m in layer]
        dense = sum((m.params + (m.rows if m.bias else 0)) * element for m in matrices)
        stored += sum(quantized_bytes(m, self.bits, self.group, element, True) for m in matrices) - dense
        rows, width = after.embedding
        dense = rows * width * element
        if self.embedding:
            stored += int8_bytes(rows, width, element) - dense
        if self.head and not (self.embedding and after.tied):
            stored += int8_bytes(rows, width, element) - (0 if after.tied else dense)
        return stored

    def base_layers(self, kept: list[int]) -> list[int]:
        """It removes no layer."""
        return kept

    def handoff_note(self) -> str:
        return (f"the weights were quantized {'by torchao' if self.method == 'rtn' else 'by GPTQ'}; the mergekit and "
                "llama.cpp commands build the unquantized model (llama-quantize quantizes in its own formats)")

    def card_line(self, model: nn.Module, factored: bool = False) -> str:
        found = getattr(model.config, QUANTIZED_FIELD, None) or {}
        dense = found.get("dense", 0)
        kept = f"; {dense} projection(s) kept dense (input width not a multiple of the group)" if dense else ""
        packed = ", int4 packed two values a byte with bfloat16 scales" if self.bits == 4 else ""
        head = {(True, False): " and the LM head (int8, untied from the input embedding)",
                (False, True): " and the input embedding (int8, a head tied to it shares it)",
                (True, True): " and the LM head and input embedding (int8)"}.get((self.head, self.embedding), "")
        solved = (" The integers were chosen by GPTQ (Frantar et al. 2023) layer by layer on the calibration text; "
                  "stored as round-to-nearest's are." if self.method == "gptq" else "")
        stacks = found.get("expert_stacks", 0)
        experts = (f", {stacks} stacks of experts (every expert's matrices, run by LayerCut's experts forward through "
                   "the same kernels; the routers kept in float)" if stacks else "")
        return (f"- Quantization: {self.describe()}: {found.get('quantized', '?')} projections{experts}{head}{kept}."
                f"{solved} "
                "In LayerCut, "
                f"on a CPU, the products run PyTorch's kernels ({KERNELS[self.bits]}) with activations rounded to "
                f"bfloat16{packed}. Saved in torchao's plain format (the same integers and scales): " + (
                    "transformers with torchao installed reloads it (`TorchAoConfig` in config.json) and multiplies in "
                    "the model's dtype, so its logits differ from LayerCut's by the bfloat16 rounding of the "
                    "activations." if not stacks else
                    "the experts as torchao's 3-D tensors, which transformers reads but its experts forwards cannot "
                    "multiply: load this folder with `prune.load_model` (LayerCut's kernels, the same logits)."))

    def describe(self) -> str:
        """'int4 weight-only quantization (torchao, symmetric, groups of 32 inputs)'; by GPTQ: '… (GPTQ, symmetric,
        groups of 32 inputs) (calibration: wikitext2, 32 × 128 tokens)'."""
        scale = "one scale per row" if self.group is None else f"groups of {self.group} inputs"
        head = {(True, False): "; the LM head in int8, a scale per row",
                (False, True): "; the input embedding in int8, a scale per row",
                (True, True): "; the LM head and input embedding in int8, a scale per row"}.get(
            (self.head, self.embedding), "")
        who = "torchao" if self.method == "rtn" else METHODS[self.method]
        return (f"int{self.bits} weight-only quantization ({who}, symmetric, {scale}{head})"
                f"{calibration_words(self.calibration)}")

    def short(self) -> str:
        """A column title: 'int8', 'int4 g32', 'int8+head', 'int4 g32+emb', 'int8+head+emb' or 'int4 g32 gptq'."""
        solved = f" {self.method}" if self.method != "rtn" else ""
        return (f"int{self.bits}" if self.group is None else f"int{self.bits} g{self.group}") + solved + (
            HEAD if self.head else "") + (EMBEDDING if self.embedding else "")


def build(name: str, level: float, pattern: str, calibration: Calibration) -> Quantize:
    """The picker's step (it has no level): 'int4', 'int4+head', 'int4+emb' or 'int4-gptq' (calibrated on
    ``calibration``)."""
    method = "gptq" if name.endswith(GPTQ) else "rtn"
    bits = NAMES[name.removesuffix(HEAD).removesuffix(EMBEDDING).removesuffix(GPTQ)]
    return Quantize.of(bits, head=name.endswith(HEAD), method=method, calibration=calibration,
                       embedding=name.endswith(EMBEDDING))


def from_args(args, calibration: Calibration, data_dir=None) -> Quantize | None:
    if args.quantize is None:
        return None
    return Quantize.of(NAMES[args.quantize], args.quant_group if args.quantize == "int4" else None, args.quant_head,
                       args.quant_method, calibration, args.quant_embedding)


def check_args(args) -> None:
    if args.quant_group is not None and args.quantize != "int4":
        raise InvalidInput("--quant_group goes with --quantize int4.")
    if (args.quant_head or args.quant_embedding or args.quant_method != "rtn") and args.quantize is None:
        raise InvalidInput("--quant_head, --quant_embedding and --quant_method go with --quantize.")


FAMILY = register_family(Family(
    refuses=lambda model: experts_refusal(model, "Quantization", reaches=True),
    name="quantize", label="Quantization", step=Quantize,
    paper="torchao (PyTorch's quantization library): weight-only int8 and int4; GPTQ (Frantar et al. 2023)",
    link="https://github.com/pytorch/ao",
    about="Stores every decoder matrix in int8 (a scale per row) or int4 (a scale per group of inputs), weight-only, "
          "rounded to nearest or chosen by GPTQ; last in a recipe, after any other step.",
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
                      "the original's.", None) for bits in BITS),
             *(Choice(f"int{bits}{EMBEDDING}", f"int{bits} weights and an int8 input embedding",
                      f"as int{bits}, and the input embedding too in int8, a scale per row, as llama.cpp stores "
                      "token_embd (Q8_0): a small model's largest matrix (SmolLM2-135M's is 63 % of its int4 bytes). "
                      "A token reads one int8 row; a head tied to it stays tied and multiplies by the int8 kernel, so "
                      "the bytes fall.", None) for bits in BITS),
             *(Choice(f"int{bits}{GPTQ}", f"int{bits} weights by GPTQ (Frantar et al. 2023)",
                      f"as int{bits}, the same bytes and kernels, but each layer's integers (and, in groups, scales) "
                      "chosen on the calibration text layer by layer so that the layer's outputs change least: each "
                      "column's rounding error is spread over the columns not yet rounded (blocks of 128, 1 % "
                      "dampening). Slower to build than rounding to nearest (per-layer progress).", None)
               for bits in BITS)),
    build=build,
    options=(Option("--quantize", dict(choices=tuple(NAMES), default=None,
                                       help="last: store every decoder matrix in int8 (a scale per row) or int4 (a "
                                            "scale per group), weight-only, in torchao's format")),
             Option("--quant_group", dict(type=int, choices=GROUPS, default=None,
                                          help=f"with --quantize int4: inputs per scale (default {DEFAULT_GROUP})")),
             Option("--quant_method", dict(choices=tuple(METHODS), default="rtn",
                                           help="with --quantize: rtn rounds each weight to nearest (fast); gptq "
                                                "chooses the integers layer by layer on the calibration text (GPTQ, "
                                                "Frantar et al. 2023), the same storage")),
             Option("--quant_head", dict(action="store_true",
                                         help="with --quantize: the LM head too, in int8 (a scale per row), as "
                                              "llama.cpp stores it; a tied head is untied")),
             Option("--quant_embedding", dict(action="store_true",
                                              help="with --quantize: the input embedding too, in int8 (a scale per "
                                                   "row), as llama.cpp stores token_embd; a head tied to it stays "
                                                   "tied (the one int8 matrix)"))),
    from_args=from_args, check_args=check_args, stage=9, restore=restore,
))
