"""Weight-only quantization of a model's decoder layers through torchao (PyTorch's own quantization library).

Why torchao: it is PyTorch's own, a single wheel that needs only torch, and transformers saves and reloads its
quantized weights (``TorchAoConfig``; an export reloads with the same logits). llm-compressor, the other kept library,
pins transformers ≤ 5.17 and does not install beside our stack (``../shared/NOTES.md``).

* **int8**: ``Int8WeightOnlyConfig``: one int8 per weight, one symmetric scale per output row.
* **int4**: ``IntxWeightOnlyConfig(int4, PerGroup(g))``: 16 levels, one symmetric scale per group of ``g`` inputs
  (32 by default, GGUF's Q4_0 group).

torchao computes the integers and scales; :mod:`prune.quantize.packed` then holds them as PyTorch's CPU kernels read
them (int4 two values a byte, its scales in bfloat16 beside tinygemm's zeros) and multiplies through those kernels,
activations in bfloat16. Saving converts them back to torchao's plain tensors (same integers, the int4 scales as
rounded), which transformers saves and reloads (``TorchAoConfig``); ``prune.load_model`` packs them again.

Every ``nn.Linear`` of the decoder layers is quantized (a low-rank step's two factors too); embeddings and norms stay
as they are. The LM head stays too by default (torchao's and transformers' default leaves the tied embedding alone);
with ``head`` it is stored in int8, one scale per row, whatever the layers' bits: llama.cpp's Q8_0 files hold the
output matrix in Q8_0 and its Q4_0 files in Q6_K, a higher precision than the layers'. A tied head is then untied:
the variant's head is its own int8 matrix, its input embedding the original's (a token reads one row of it). With
``embedding`` the input embedding is stored in int8 too, the same rule (llama.cpp's Q8_0 ``token_embd``); a head tied
to it stays tied, the one int8 matrix (transformers reloads it with ``include_input_output_embeddings``). A
projection whose input width is not a multiple of the group stays dense and is counted. The original is never
altered: the variant's layers, head and embedding are clones (``prune.core.surgery.clone_layers``) whose modules
get new, quantized parameters.
"""

from __future__ import annotations

import logging
from dataclasses import replace

import torch
from torch import nn

from prune.core.experts import refuse_experts, routers
from prune.core.architectures import decoder_layers
from prune.core.errors import InvalidInput, quoted
from prune.core.factored import Matrix, pays
from prune.core.storage import is_quantized
from prune.core.surgery import clone_layers, shallow_clone

QUANTIZED_FIELD = "layercut_quantized"  # config: what was quantized, for the card and a reloaded export
BITS = (8, 4)
GROUPS = (32, 64, 128, 256)
DEFAULT_GROUP = 32
# torchao's import logs that its CUDA-only extensions and Triton are absent on a CPU machine: not our user's concern
for _name in ("torchao", "torchao.kernel.intmm", "torch.utils._pytree"):
    logging.getLogger(_name).setLevel(logging.ERROR)


def torchao_config(bits: int, group: int | None):
    """The torchao config of ``bits``-bit weights (int4: in groups of ``group`` inputs)."""
    from torchao.quantization import Int8WeightOnlyConfig, IntxWeightOnlyConfig, MappingType
    from torchao.quantization.granularity import PerGroup

    if bits == 8:
        return Int8WeightOnlyConfig()
    return IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(group),
                                mapping_type=MappingType.SYMMETRIC)


def quantizable(module: nn.Module, group: int | None) -> bool:
    """Whether torchao quantizes ``module``: an ``nn.Linear`` whose input width fits whole groups."""
    return isinstance(module, nn.Linear) and (group is None or module.in_features % group == 0)


def quantize(model: nn.Module, bits: int, group: int | None, head: bool = False, embedding: bool = False) -> nn.Module:
    """A variant of ``model`` whose decoder layers' linear weights are ``bits``-bit, rounded to nearest (and with
    ``head`` or ``embedding``, its LM head or input embedding int8); ``model`` is untouched."""
    from torchao.quantization import quantize_

    from prune.quantize.experts import quantize_experts

    refuse_quantized(model)
    refuse_experts(model, f"int{bits} quantization", reaches=True)
    variant = clone_layers(model)
    linears, chosen = chosen_linears(variant, bits, group)
    config = torchao_config(bits, group)
    quantize_(decoder_layers(variant), config, filter_fn=lambda module, _name: id(module) in chosen)
    stacks = quantize_experts(variant, bits, group)
    return finished(variant, bits, group, head, (len(chosen), len(linears) - len(chosen), *stacks), "rtn", embedding)


def refuse_quantized(model: nn.Module) -> None:
    """A one-line refusal for a model already quantized: its weights are no longer the float ones to round."""
    if getattr(model, "hf_quantizer", None) is not None:
        raise InvalidInput("This model is already quantized: quantize the unquantized model, once.")


def chosen_linears(variant: nn.Module, bits: int, group: int | None) -> tuple[list[nn.Linear], set[int]]:
    """The decoder layers' linear maps (a mixture of experts' routers apart: they stay float), and the ids of those
    quantized (a one-line refusal when there are none)."""
    linears = [m for layer in decoder_layers(variant) for kept in (routers(layer),) for m in layer.modules()
               if isinstance(m, nn.Linear) and id(m) not in kept]
    chosen = {id(m) for m in linears if quantizable(m, group)}
    if not chosen:
        raise InvalidInput(f"No projection of this model can be quantized to int{bits}: torchao quantizes "
                           f"nn.Linear maps{'' if group is None else f' whose input width is a multiple of {group}'}.")
    return linears, chosen


def finished(variant: nn.Module, bits: int, group: int | None, head: bool, counts: tuple[int, int],
             method: str, embedding: bool = False) -> nn.Module:
    """``variant``, its layers' weights quantized by ``method``, with its head (``head``) and input embedding
    (``embedding``), the config that saves and reloads it and what was done (``counts``: projections quantized and
    kept dense, then stacks of experts quantized and kept float), in kernel form."""
    from transformers import TorchAoConfig

    from prune.quantize.packed import packed_model

    _quantize_embeddings(variant, head, embedding)
    # transformers skips the output embedding on reload unless told: an int8 head names no module to skip; an int8
    # input embedding (and a head tied to it) is reloaded only where embeddings are included
    extra = {"modules_to_not_convert": []} if head or embedding else {}
    variant.config.quantization_config = TorchAoConfig(
        torchao_config(bits, group), **extra, **({"include_input_output_embeddings": True} if embedding else {}))
    stacks = dict(zip(("expert_stacks", "expert_stacks_float"), counts[2:])) if any(counts[2:]) else {}
    setattr(variant.config, QUANTIZED_FIELD, {"bits": bits, "group": group, "quantized": counts[0],
                                              "dense": counts[1], "head": head, "method": method,
                                              "embedding": embedding, **stacks})
    return packed_model(variant)


def _quantize_embeddings(variant: nn.Module, head: bool, embedding: bool) -> None:
    """The variant's input embedding (``embedding``) and LM head (``head``) replaced by int8 copies (a scale per row).
    A head tied to a quantized embedding stays tied (its own module, the one int8 parameter); a tied head quantized
    alone is untied."""
    inputs, outputs = variant.get_input_embeddings(), variant.get_output_embeddings()
    tied = outputs is not None and outputs.weight is inputs.weight
    if embedding:
        own = _int8_copy(inputs, nn.Embedding, "input embedding")
        variant.set_input_embeddings(own)
        if tied:
            sharing = shallow_clone(outputs)
            sharing.weight = own.weight
            variant.set_output_embeddings(sharing)
    if head and not (embedding and tied):
        variant.set_output_embeddings(_int8_copy(outputs, nn.Linear, "LM head"))
        for config in {id(c): c for c in (variant.config, variant.config.get_text_config())}.values():
            config.tie_word_embeddings = False


def _int8_copy(module: nn.Module | None, kind: type, what: str) -> nn.Module:
    """A clone of ``module`` whose weight is torchao's int8 (a scale per row), as its layers' int8 weights are."""
    from torchao.quantization import quantize_

    if not isinstance(module, kind):
        raise InvalidInput(f"This model's {what} is not an nn.{kind.__name__}: quantize the decoder layers only.")
    own = shallow_clone(module)
    quantize_(own, torchao_config(8, None), filter_fn=lambda found, _name: found is own)
    return own


def kernel_of(model: nn.Module) -> str | None:
    """Which products the model's quantized weights run, for a speed row ('torch._weight_int8pack_mm (bfloat16
    activations)'; torchao's own weights: 'dequantize, then multiply'); None when no weight is quantized."""
    quantized = [p for p in model.parameters() if is_quantized(p)]
    if not quantized:
        return None
    from prune.quantize.packed import FALLBACK, is_packed

    return "; ".join(sorted({p.kernel() if is_packed(p) else FALLBACK for p in quantized}))


def restore(model: nn.Module) -> nn.Module:
    """A reloaded export's torchao weights in kernel form again (the same numbers)."""
    if getattr(model.config, QUANTIZED_FIELD, None) is None:
        return model
    from prune.quantize.experts import restore_experts
    from prune.quantize.packed import packed_model

    return restore_experts(packed_model(model))


def int8_bytes(rows: int, inputs: int, element: int) -> int:
    """An int8 matrix's bytes: a byte per weight and a scale (``element`` bytes) per row."""
    return rows * inputs + rows * element


def quantized_bytes(matrix: Matrix, bits: int, group: int | None, element: int, copied: bool) -> int:
    """What one layer matrix owns once quantized, its bias apart: int8 values and a scale (the model's dtype) per row,
    or int4 values two a byte and a bfloat16 scale and zero per group. The bias is kept as it was: counted when an
    earlier step ``copied`` the matrices (a low-rank step copies the biases too; a sparsity step, and a width step
    where it keeps a layer's heads, do not, so after those a bias the variant shares is counted: a few kB, 0.01 % of a
    real model's bytes). One kept dense (input width not a multiple of the group) owns
    what it did: its bytes if an earlier step ``copied`` the matrices, else nothing (it is the original's)."""
    if matrix.experts > 1:  # a stack of experts: each expert's matrix, its bias, as one
        return matrix.experts * quantized_bytes(replace(matrix, experts=1), bits, group, element, copied)
    factored = matrix.rank is not None and pays(matrix.outputs, matrix.inputs, matrix.rank)
    maps = ([(matrix.rank, matrix.inputs), (matrix.outputs, matrix.rank)] if factored  # a low-rank step's factors
            else [(matrix.outputs, matrix.inputs)])
    total = 0
    for outputs, inputs in maps:
        if group is not None and inputs % group:
            total += outputs * inputs * element if copied else 0
        elif group is None:
            total += int8_bytes(outputs, inputs, element)
        else:
            total += outputs * inputs // 2 + outputs * (inputs // group) * 2 * 2
    return total + (matrix.outputs * element if matrix.bias and copied else 0)


def check(bits, group) -> tuple[int, int | None]:
    """``bits`` (8 or 4) and int4's group (one of :data:`GROUPS`; None for int8, which scales each row)."""
    if isinstance(bits, bool) or bits not in BITS:
        raise InvalidInput(f"Quantization is to 8 or 4 bits, not {quoted(bits)}.")
    if bits == 8:
        if group is not None:
            raise InvalidInput("int8 weights have one scale per row: give no group size.")
        return 8, None
    group = DEFAULT_GROUP if group is None else group
    if isinstance(group, bool) or group not in GROUPS:
        raise InvalidInput(f"The int4 group size is one of {', '.join(map(str, GROUPS))}, not {quoted(group)}.")
    return 4, group


