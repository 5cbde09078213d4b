"""Quantized weights held as PyTorch's CPU kernels read them, and multiplied by those kernels: fewer bytes per product.

torchao 0.18's weight-only tensors dequantize the whole matrix before every product on a CPU (and store int4 one value
a byte). These two tensor subclasses hold the same integers and scales in the forms PyTorch's own CPU kernels take:

* :class:`Int8Rows`: the int8 values [N, K] and one scale per row in the model's dtype; a product runs
  ``torch._weight_int8pack_mm`` (bfloat16 activations; a float32 model's scale is applied after, in float32).
* :class:`Int4Groups`: two values a byte, packed by ``_convert_weight_to_int4pack_for_cpu`` (u = q + 8), and tinygemm's
  bfloat16 scales-and-zeros [K/g, N, 2] (zero 0: tinygemm computes (u - 8)·scale + zero); a product runs
  ``_weight_int4pack_mm_for_cpu``. The scales are torchao's rounded to bfloat16.

Both kernels are slower than dense with float32 activations, so the activations go in as bfloat16 and the output comes
back in the model's dtype. Off a CPU (or for an int4 matrix whose rows are not a multiple of 16) the product
dequantizes, then multiplies; int4 then holds its values as plain nibble pairs (byte j of a row: value 2j low, 2j+1
high). :meth:`to_torchao` gives torchao's plain tensors of the same numbers, which transformers saves and reloads.
"""

from __future__ import annotations

import functools
import math

import torch
from torch import nn
from torchao.utils import TorchAOBaseTensor
from transformers.quantizers.quantizer_torchao import TorchAoHfQuantizer

from prune.core.architectures import decoder_layers
from prune.core.errors import InvalidInput
from prune.core.storage import is_quantized

aten = torch.ops.aten
ALIGN = 64  # bytes: where the int8 kernel's weight and input must start
KERNEL_ROWS = 16  # the int4 CPU packing takes a multiple of 16 rows
BLOCK = 64  # rows: the int4 CPU packing is read back a block of this many rows at a time where it keeps them apart
INT8_KERNEL = "torch._weight_int8pack_mm (bfloat16 activations)"
INT4_KERNEL = "aten._weight_int4pack_mm_for_cpu (bfloat16 activations)"
FALLBACK = "dequantize, then multiply"


class Int8Rows(TorchAOBaseTensor):
    """int8 values [N, K] and a scale per row (the model's dtype)."""

    tensor_data_names = ["qdata", "scale"]
    tensor_attribute_names = ["dtype"]

    def __new__(cls, qdata: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype):
        return torch.Tensor._make_wrapper_subclass(cls, qdata.shape, dtype=dtype, device=qdata.device,
                                                   requires_grad=False)

    def __init__(self, qdata: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype):
        super().__init__()
        self.qdata, self.scale = _aligned(qdata), scale  # [N, K] int8, [N]

    def values(self) -> torch.Tensor:
        return self.qdata

    def scales(self) -> torch.Tensor:
        """[N, 1]: one group of K inputs per row."""
        return self.scale[:, None]

    def kernel(self) -> str:
        return INT8_KERNEL if self.device.type == "cpu" else FALLBACK

    def product(self, x: torch.Tensor) -> torch.Tensor:
        """x [M, K] @ Wᵀ by the int8 kernel; a bfloat16 scale goes into the kernel, another is applied after."""
        inside = self.scale if self.scale.dtype == torch.bfloat16 else torch.ones_like(self.scale, dtype=torch.bfloat16)
        out = _int8_mm(x.to(torch.bfloat16), self.qdata, inside).to(self.dtype)
        return out if inside is self.scale else out * self.scale

    def moved(self, device: torch.device, dtype: torch.dtype) -> Int8Rows:
        return Int8Rows(self.qdata.to(device), self.scale.to(device, dtype), dtype)

    def to_torchao(self):
        from torchao.quantization import Int8Tensor

        return Int8Tensor(self.qdata, self.scales(), [1, self.shape[1]], self.dtype,
                          zero_point=torch.zeros_like(self.scales(), dtype=torch.int8))


class Int4Groups(TorchAOBaseTensor):
    """int4 values two a byte and tinygemm's bfloat16 scales-and-zeros per group of ``group`` inputs."""

    tensor_data_names = ["packed", "scale_and_zero"]
    tensor_attribute_names = ["shape", "group", "dtype", "packing"]

    def __new__(cls, packed, scale_and_zero, shape, group: int, dtype: torch.dtype, packing: str):
        return torch.Tensor._make_wrapper_subclass(cls, shape, dtype=dtype, device=packed.device, requires_grad=False)

    def __init__(self, packed, scale_and_zero, shape, group: int, dtype: torch.dtype, packing: str):
        super().__init__()
        self.packed, self.scale_and_zero = packed, scale_and_zero  # [N, K/2] uint8, [K/g, N, 2] bfloat16
        self.group, self.packing = group, packing  # packing: "cpu" (the kernel's packing) or "nibbles"

    @classmethod
    def of(cls, values: torch.Tensor, scales: torch.Tensor, group: int, dtype: torch.dtype) -> Int4Groups:
        """From int4 values [N, K] in [-8, 7] and scales [N, K/g], packed for their device's kernel."""
        pairs = torch.stack([scales, torch.zeros_like(scales)], -1).transpose(0, 1).to(torch.bfloat16).contiguous()
        packing = "cpu" if values.device.type == "cpu" and values.shape[0] % KERNEL_ROWS == 0 else "nibbles"
        return cls(_pack(values, packing), pairs, values.shape, group, dtype, packing)

    def values(self) -> torch.Tensor:
        return _unpack(self.packed, self.shape, self.packing)

    def scales(self) -> torch.Tensor:
        """[N, K/g] bfloat16."""
        return self.scale_and_zero[..., 0].T

    def kernel(self) -> str:
        return INT4_KERNEL if self.packing == "cpu" and self.device.type == "cpu" else FALLBACK

    def product(self, x: torch.Tensor) -> torch.Tensor:
        """x [M, K] @ Wᵀ by tinygemm's CPU kernel."""
        out = _int4_mm(x.to(torch.bfloat16), self.packed, self.group, self.scale_and_zero)
        return out.to(self.dtype)

    def moved(self, device: torch.device, dtype: torch.dtype) -> Int4Groups:
        if torch.device(device).type == self.device.type:
            return Int4Groups(self.packed.to(device), self.scale_and_zero.to(device), self.shape, self.group, dtype,
                              self.packing)
        return Int4Groups.of(self.values().to(device), self.scales().to(device), self.group, dtype)

    def to_torchao(self):
        from torchao.quantization import IntxUnpackedToInt8Tensor

        scales = self.scales().to(self.dtype)
        return IntxUnpackedToInt8Tensor(self.values(), scales, torch.zeros_like(scales, dtype=torch.int8), torch.int4,
                                        (1, self.group), self.dtype, None)


def _aligned(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor``, copied if its data does not start on 64 bytes: the int8 kernel crashes on unaligned rows (e.g. a
    tensor read from a safetensors file at an odd offset). ``torch.compile``, which has no data to point at, rebuilds
    weights that were aligned when built."""
    if torch.compiler.is_compiling():
        return tensor
    return tensor if tensor.data_ptr() % ALIGN == 0 and tensor.is_contiguous() else tensor.clone(
        memory_format=torch.contiguous_format)


# The kernels as custom operators: opaque to torch.compile, which calls them as they are (it cannot trace the
# alignment check, and inductor does not lower the kernels' inputs itself).
@torch.library.custom_op("layercut::int8_rows_mm", mutates_args=())
def _int8_mm(x: torch.Tensor, qdata: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return torch._weight_int8pack_mm(_aligned(x), qdata, scale)


@_int8_mm.register_fake
def _(x, qdata, scale):
    return x.new_empty(x.shape[0], qdata.shape[0])


@torch.library.custom_op("layercut::int4_groups_mm", mutates_args=())
def _int4_mm(x: torch.Tensor, packed: torch.Tensor, group: int, scale_and_zero: torch.Tensor) -> torch.Tensor:
    return aten._weight_int4pack_mm_for_cpu(x.contiguous(), packed, group, scale_and_zero)


@_int4_mm.register_fake
def _(x, packed, group, scale_and_zero):
    return x.new_empty(x.shape[0], scale_and_zero.shape[1])


def _dequantize(self) -> torch.Tensor:
    """The float weight, as torchao computes it: q in the model's dtype times its group's scale."""
    rows, inputs = self.shape
    scales = self.scales()
    grouped = self.values().to(self.dtype).view(rows, scales.shape[1], -1) * scales[..., None]
    return grouped.view(rows, inputs).to(self.dtype)


def _linear(func, types, args, kwargs):
    """F.linear with a packed weight: the kernel on its device, else dequantize then multiply."""
    x, weight, bias = args[0], args[1], args[2] if len(args) > 2 else None
    if weight.kernel() == FALLBACK:
        return torch.nn.functional.linear(x, weight.dequantize(), bias)
    out = weight.product(x.reshape(-1, x.shape[-1]).contiguous()).reshape(*x.shape[:-1], weight.shape[0])
    return out if bias is None else out + bias


def _embedding(func, types, args, kwargs):
    """F.embedding (or aten.embedding) with int8 rows: each asked token's int8 row times its scale, one row read per
    token (the matrix is not dequantized)."""
    weight, ids = (args[1], args[0]) if func is torch.nn.functional.embedding else (args[0], args[1])
    return weight.qdata[ids].to(weight.dtype) * weight.scale[ids, None].to(weight.dtype)  # [..., K]


def _to_copy(func, types, args, kwargs):
    """``.to(device, dtype)``: int4 repacked for a device of another type."""
    self = args[0]
    found = self._get_to_kwargs(*args[1:], **kwargs)
    return self.moved(found["device"], found.get("dtype", self.dtype))


for _cls in (Int8Rows, Int4Groups):
    _cls.dequantize = _dequantize
    _cls.implements(aten.linear.default)(_linear)
    _cls.implements_torch_function(torch.nn.functional.linear)(_linear)
    _cls.implements(aten._to_copy.default)(_to_copy)
Int8Rows.implements(aten.embedding.default)(_embedding)
Int8Rows.implements_torch_function(torch.nn.functional.embedding)(_embedding)


def _pack(values: torch.Tensor, packing: str) -> torch.Tensor:
    """int4 values [N, K] as [N, K/2] bytes: the CPU kernel's packing, or plain nibble pairs."""
    unsigned = (values.to(torch.int32) + 8)
    if packing == "cpu":
        return aten._convert_weight_to_int4pack_for_cpu(unsigned, 1)
    return (unsigned[:, 0::2] | (unsigned[:, 1::2] << 4)).to(torch.uint8)


def _unpack(packed: torch.Tensor, shape, packing: str) -> torch.Tensor:
    """int8 values [N, K] from their packed bytes; the CPU packing's order is read back by packing each position's
    base-16 digits (it moves whole nibbles, in an order that depends on the CPU's instruction set)."""
    nibbles = torch.stack([packed & 15, packed >> 4], -1).reshape(shape).to(torch.int8) - 8
    if packing == "nibbles":
        return nibbles
    rows, inputs = shape
    block = _block_positions(inputs) if rows % BLOCK == 0 else None
    blocks = rows // BLOCK if block is not None else 1
    where = block if block is not None else _positions(rows, inputs)
    values = torch.empty_like(nibbles).view(blocks, -1)
    values[:, where.to(packed.device)] = nibbles.view(blocks, -1)
    return values.view(shape)


@functools.lru_cache(maxsize=32)
def _block_positions(inputs: int) -> torch.Tensor | None:
    """:func:`_positions` of a block of :data:`BLOCK` rows, when the packing keeps each such block in its own bytes in
    the same order (checked on two blocks: then the first block's bytes hold only its own rows); else None."""
    two = _positions(2 * BLOCK, inputs)
    first, second = two.view(2, -1)
    return first.clone() if torch.equal(second, first + BLOCK * inputs) else None


def _positions(rows: int, inputs: int) -> torch.Tensor:
    """For each nibble of the CPU packing (in the order :func:`_unpack` reads them), the weight position it holds."""
    index = torch.arange(rows * inputs).view(rows, inputs)
    found = torch.zeros(rows * inputs, dtype=torch.int64)
    for digit in range(math.ceil(math.log2(max(rows * inputs, 2)) / 4)):
        packed = _pack(((index >> (4 * digit)) & 15) - 8, "cpu")
        found += torch.stack([packed & 15, packed >> 4], -1).view(-1).to(torch.int64) << (4 * digit)
    return found


def from_torchao(weight) -> Int8Rows | Int4Groups:
    """torchao's symmetric weight (``Int8Tensor`` or ``IntxUnpackedToInt8Tensor``) in kernel form, the same numbers."""
    from torchao.quantization import Int8Tensor, IntxUnpackedToInt8Tensor

    int4 = isinstance(weight, IntxUnpackedToInt8Tensor) and weight.target_dtype == torch.int4
    if not (isinstance(weight, Int8Tensor) or int4) or (weight.zero_point is not None and weight.zero_point.any()):
        raise InvalidInput("LayerCut's kernels take torchao's symmetric int8 or int4 weights, not "
                           f"{type(weight).__name__} with these zero points.")
    if int4:
        return Int4Groups.of(weight.qdata, weight.scale, weight.block_size[1], weight.dtype)
    return Int8Rows(weight.qdata, weight.scale.reshape(-1).to(weight.dtype), weight.dtype)  # a scale per row


def packed_model(model: nn.Module) -> nn.Module:
    """``model`` (its own quantized layers, head and input embedding) with torchao's weights in kernel form, in
    place, and saved as torchao's; a weight two modules share (a tied head) stays one."""
    made: dict[int, nn.Parameter] = {}
    ends = [m for m in (model.get_input_embeddings(), model.get_output_embeddings()) if m is not None]
    for module in [*(m for layer in decoder_layers(model) for m in layer.modules()), *ends]:
        if isinstance(module, (nn.Linear, nn.Embedding)) and is_quantized(module.weight) and not is_packed(
                module.weight):
            found = module.weight
            made.setdefault(id(found), nn.Parameter(from_torchao(found), requires_grad=False))
            module.weight = made[id(found)]
    model.hf_quantizer = SavesTorchao(model.config.quantization_config)
    return model


class SavesTorchao(TorchAoHfQuantizer):
    """transformers' torchao quantizer, given kernel-form weights in torchao's plain form to flatten and save."""

    def get_state_dict_and_metadata(self, model):
        from torchao.prototype.safetensors.safetensors_support import flatten_tensor_state_dict

        state, seen = {}, set()
        for name, value in model.state_dict(keep_vars=True).items():  # a tied weight once, under its first name (the
            if not is_packed(value):  # input embedding's): the flattened names escape transformers' tied-key removal
                state[name] = value.detach()
            elif id(value) not in seen:
                state[name] = value.to_torchao()
                seen.add(id(value))
        return flatten_tensor_state_dict(state)


def is_packed(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` is a weight in kernel form."""
    return isinstance(tensor, (Int8Rows, Int4Groups))
