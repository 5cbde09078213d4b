"""Quantized weights held as PyTorch's kernels read them, and multiplied by those kernels: fewer bytes per product.

torchao 0.18's weight-only tensors dequantize the whole matrix before every product on a CPU (and store int4 one value
a byte). These two tensor subclasses hold the same integers and scales in the forms PyTorch's own CPU kernels take:

* :class:`Int8Rows`: the int8 values [N, K] and one scale per row in the model's dtype; a product runs
  ``torch._weight_int8pack_mm`` (bfloat16 activations; a float32 model's scale is applied after, in float32). From
  ``WIDEN_ROWS`` rows of input (scoring, a long prefill: compute-bound, where that kernel is slower than a dense
  product, 1.4× on AVX2) the same product is computed densely on the rows widened a block at a time: bfloat16 inputs
  times integers are exact in float32, summed in float32 and rounded once to bfloat16 as the kernel does, only the
  order of the sums differs (as it differs between the kernel's own AVX2 and AVX-512 code); widened to bfloat16 where
  oneDNN multiplies bfloat16 natively (AVX512-BF16, AMX: 3× the kernel's rate at 4,096 rows on a Zen 5), else to
  float32. Decoding (a row or a batch of rows at a time) keeps the kernel, which reads a quarter of the bytes.
* :class:`Int4Groups`: two values a byte, packed by ``_convert_weight_to_int4pack_for_cpu`` (u = q + 8), and tinygemm's
  bfloat16 scales-and-zeros [K/g, N, 2] (zero 0: tinygemm computes (u - 8)·scale + zero); a product runs
  ``_weight_int4pack_mm_for_cpu``. The scales are torchao's rounded to bfloat16. Where ATen runs AVX2 code (there that
  kernel is 1.35× slower than a float32 product at 4,096 rows; with AVX-512 it is faster than one) a product of
  ``INT4_WIDEN_ROWS`` rows or more dequantizes the rows a block at a time, (u − 8)·scale + zero exact in float32, and
  multiplies them densely in float32, rounding once to bfloat16 as the kernel does (the order of the sums aside).

Both kernels are slower than dense with float32 activations, so the activations go in as bfloat16 and the output comes
back in the model's dtype. On CUDA (``moved`` repacks a weight that changes device type):

* int4 is packed by ``_convert_weight_to_int4pack`` into tinygemm's tensor-core tiles (int32 [N/8, K/(16·t), 32, t/2]
  for t inner k-tiles; torchao's ``Int4TilePackedTo4dTensor`` packs alike, a byte holding value 2j high and 2j+1 low)
  and multiplied by ``_weight_int4pack_mm``, which dequantizes (u - 8)·scale + zero like the CPU kernel: the same
  scales-and-zeros, the same bytes. It needs compute capability 8.0, groups of 32-256 inputs, rows in eights and
  inputs in multiples of 32; elsewhere the row names the reason and the product dequantizes.
* int8 widens to the activations' dtype and multiplies densely, its scale applied to the output (compiled, inductor
  may fuse the widening into the product). torch's CUDA ``_weight_int8pack_mm`` is a reference kernel (a thread per
  output element, each reading a whole row): slower at batch 1 than widening, so it is not used.

Elsewhere (or for an int4 matrix whose rows are not a multiple of 16 on a CPU) the product dequantizes, then
multiplies; int4 then holds its values as plain nibble pairs (byte j of a row: value 2j low, 2j+1 high).
:meth:`to_torchao` gives torchao's plain tensors of the same numbers, which transformers saves and reloads.
"""

from __future__ import annotations

import functools
import math

import torch
from torch import nn
from torchao.utils import TorchAOBaseTensor
from transformers.quantizers.quantizer_torchao import TorchAoHfQuantizer

from prune.core.architectures import decoder_layers
from prune.core.devices import cpu_bfloat16_native
from prune.core.errors import InvalidInput
from prune.core.storage import is_quantized

aten = torch.ops.aten
ALIGN = 64  # bytes: where the int8 kernel's weight and input must start
INT8_INPUTS = 16  # torch 2.13's CPU int8 kernel reads inputs 16 at a time: another width crashes it (past one row)
KERNEL_ROWS = 16  # the int4 CPU packing takes a multiple of 16 rows
BLOCK = 64  # rows: the int4 CPU packing is read back a block of this many rows at a time where it keeps them apart
WIDEN_ROWS = 256  # input rows from which an int8 product widens the weight instead of running the kernel
WIDEN_BYTES = 32 << 20  # the widened rows' transient copy, at most, per block
NATIVE_BF16 = cpu_bfloat16_native()  # oneDNN multiplies bfloat16 natively here
INT4_WIDENS = torch.backends.cpu.get_cpu_capability() == "AVX2"  # where the int4 kernel is the slower (measured)
INT4_WIDEN_ROWS = 1024  # input rows from which it does: dequantizing costs what ~300 rows' products do
INT8_KERNEL = f"torch._weight_int8pack_mm (bfloat16 activations; from {WIDEN_ROWS} rows, the same product widened)"
INT4_KERNEL = ("aten._weight_int4pack_mm_for_cpu (bfloat16 activations"
               + (f"; from {INT4_WIDEN_ROWS} rows, the same product widened)" if INT4_WIDENS else ")"))
INT8_CUDA = "int8 widened, then the dense product (scale on the output)"
INT8_UNEVEN = f"{INT8_CUDA}: an input width not a multiple of {INT8_INPUTS}, which the int8 kernel does not take"
INT4_CUDA = "aten._weight_int4pack_mm, tinygemm (bfloat16 activations)"
FALLBACK = "dequantize, then multiply"
TINYGEMM_GROUPS = (32, 64, 128, 256)  # the group sizes tinygemm's CUDA kernel is built for


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
        if self.device.type == "cpu" and self.shape[1] % INT8_INPUTS:
            return INT8_UNEVEN
        return {"cpu": INT8_KERNEL, "cuda": INT8_CUDA}.get(self.device.type, FALLBACK)

    def has_kernel(self) -> bool:
        return self.device.type in ("cpu", "cuda")

    def product(self, x: torch.Tensor) -> torch.Tensor:
        """x [M, K] @ Wᵀ by the int8 kernel (a bfloat16 scale goes into it, another is applied after); on CUDA, or
        where K is not a multiple of 16, the int8 values widened to the model's dtype, the scale applied to the
        output."""
        if self.device.type == "cuda" or self.shape[1] % INT8_INPUTS:
            return _widened_mm(x.to(self.dtype), self.qdata, self.scale)
        inside = self.scale if self.scale.dtype == torch.bfloat16 else None  # else applied after, in float32
        x = x.to(torch.bfloat16)
        if x.shape[0] >= WIDEN_ROWS:
            out = _int8_widened(x, self.qdata, inside).to(self.dtype)
        else:
            out = _int8_mm(x, self.qdata, torch.ones_like(self.scale, dtype=torch.bfloat16) if inside is None
                           else inside).to(self.dtype)
        return out if inside is not None else out * self.scale

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
        self.group, self.packing = group, packing  # packing: "cpu", "cuda" (a kernel's packing) or "nibbles"

    @classmethod
    def of(cls, values: torch.Tensor, scales: torch.Tensor, group: int, dtype: torch.dtype) -> Int4Groups:
        """From int4 values [N, K] in [-8, 7] and scales [N, K/g], packed for their device's kernel."""
        pairs = torch.stack([scales, torch.zeros_like(scales)], -1).transpose(0, 1).to(torch.bfloat16).contiguous()
        packing = _packing_for(values.device, tuple(values.shape), group)
        return cls(_pack(values, packing), pairs, values.shape, group, dtype, packing)

    def values(self) -> torch.Tensor:
        return _unpack(self.packed, self.shape, self.packing)

    def scales(self) -> torch.Tensor:
        """[N, K/g] bfloat16."""
        return self.scale_and_zero[..., 0].T

    def has_kernel(self) -> bool:
        """Whether a product runs a kernel (read in the forward pass, so traced: nothing cached or probed here)."""
        return self.packing == self.device.type

    def kernel(self) -> str:
        """The kernel a product runs; on CUDA without tinygemm, the dequantizing path and why."""
        if self.has_kernel():
            return INT4_CUDA if self.packing == "cuda" else INT4_KERNEL
        refusal = _tinygemm_refusal(self.device, tuple(self.shape), self.group) if self.device.type == "cuda" else None
        return f"{FALLBACK} ({refusal})" if refusal else FALLBACK

    def product(self, x: torch.Tensor) -> torch.Tensor:
        """x [M, K] @ Wᵀ by tinygemm's kernel for this device."""
        x = x.to(torch.bfloat16).contiguous()
        if self.packing == "cuda":
            return aten._weight_int4pack_mm(x, self.packed, self.group, self.scale_and_zero).to(self.dtype)
        if INT4_WIDENS and x.shape[0] >= INT4_WIDEN_ROWS:
            return _int4_widened(x, self).to(self.dtype)
        return _int4_mm(x, self.packed, self.group, self.scale_and_zero).to(self.dtype)

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


def _widened_mm(x: torch.Tensor, qdata: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """x [M, K] @ (q·scale)ᵀ as (x @ qᵀ)·scale: the int8 values [N, K] widened to x's dtype, the scale [N] on the
    output (N products where scaling the weight would be N·K)."""
    return torch.nn.functional.linear(x, qdata.to(x.dtype)) * scale


# The kernels as custom operators: opaque to torch.compile, which calls them as they are (it cannot trace the
# alignment check, and inductor does not lower the kernels' inputs itself).
@torch.library.custom_op("layercut::int8_rows_mm", mutates_args=())
def _int8_mm(x: torch.Tensor, qdata: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return torch._weight_int8pack_mm(_aligned(x), qdata, scale)


@_int8_mm.register_fake
def _(x, qdata, scale):
    return x.new_empty(x.shape[0], qdata.shape[0])


def _int8_widened(x: torch.Tensor, qdata: torch.Tensor, scale: torch.Tensor | None) -> torch.Tensor:
    """What ``torch._weight_int8pack_mm(x, qdata, scale)`` computes (bfloat16 x [M, K] times int8 rows [N, K], float32
    sums, times ``scale`` [N] when given, rounded once to bfloat16) as dense products, the rows widened a block of at
    most ``WIDEN_BYTES`` at a time: to bfloat16 where oneDNN multiplies it natively and no scale goes in (its float32
    sums come out rounded to bfloat16), else to float32."""
    native = NATIVE_BF16 and scale is None
    wide = x if native else x.float()

    def block(start: int, end: int) -> torch.Tensor:
        out = torch.nn.functional.linear(wide, qdata[start:end].to(wide.dtype))
        return out if native else (out if scale is None else out * scale[start:end].float()).to(torch.bfloat16)

    return _in_blocks(x.shape[0], qdata.shape[0], max(1, WIDEN_BYTES // (4 * qdata.shape[1])), block)


def _in_blocks(inputs: int, rows: int, step: int, block) -> torch.Tensor:
    """The [inputs, rows] bfloat16 product whose columns ``block(start, end)`` gives, ``step`` rows of the weight at a
    time (one block: its own output; more: each written into one output, nothing concatenated)."""
    if step >= rows:
        return block(0, rows)
    out = torch.empty(inputs, rows, dtype=torch.bfloat16)
    for start in range(0, rows, step):
        out[:, start:min(rows, start + step)] = block(start, min(rows, start + step))
    return out


@torch.library.custom_op("layercut::int4_groups_mm", mutates_args=())
def _int4_mm(x: torch.Tensor, packed: torch.Tensor, group: int, scale_and_zero: torch.Tensor) -> torch.Tensor:
    return aten._weight_int4pack_mm_for_cpu(x.contiguous(), packed, group, scale_and_zero)


@_int4_mm.register_fake
def _(x, packed, group, scale_and_zero):
    return x.new_empty(x.shape[0], scale_and_zero.shape[1])


def _int4_widened(x: torch.Tensor, weight: Int4Groups) -> torch.Tensor:
    """What the CPU int4 kernel computes for bfloat16 ``x`` [M, K] ((u − 8)·scale + zero per group, exact in float32,
    times x, float32 sums, rounded once to bfloat16) as dense float32 products, the rows dequantized a block of at most
    ``WIDEN_BYTES`` at a time (whole blocks of the packing's 64 rows, which are read back each on its own)."""
    rows, inputs = weight.shape
    wide = x.float()

    def block(start: int, end: int) -> torch.Tensor:
        values = _unpack(weight.packed[start:end], (end - start, inputs), weight.packing).float()
        scale, zero = weight.scale_and_zero[:, start:end].float().permute(2, 1, 0)[..., None]  # 2 × [n, K/g, 1]
        dense = (values.view(end - start, -1, weight.group) * scale + zero).view(end - start, inputs)
        return torch.nn.functional.linear(wide, dense).to(torch.bfloat16)

    step = max(BLOCK, WIDEN_BYTES // (4 * inputs) // BLOCK * BLOCK) if rows % BLOCK == 0 else rows
    return _in_blocks(x.shape[0], rows, step, block)


def _dequantize(self) -> torch.Tensor:
    """The float weight, as torchao computes it: q in the model's dtype times its group's scale."""
    rows, inputs = self.shape
    scales = self.scales()
    grouped = self.values().to(self.dtype).view(rows, scales.shape[1], -1) * scales[..., None]
    return grouped.view(rows, inputs).to(self.dtype)


def _linear(func, types, args, kwargs):
    """F.linear with a packed weight: the kernel on its device, else dequantize then multiply."""
    x, weight, bias = args[0], args[1], args[2] if len(args) > 2 else None
    if not weight.has_kernel():
        return torch.nn.functional.linear(x, weight.dequantize(), bias)
    out = weight.product(x.reshape(-1, x.shape[-1]).contiguous()).reshape(*x.shape[:-1], weight.shape[0])
    return out if bias is None else out + bias


def _embedding(func, types, args, kwargs):
    """F.embedding (or aten.embedding) with int8 rows: each asked token's int8 row times its scale, one row read per
    token (the matrix is not dequantized)."""
    weight, ids = (args[1], args[0]) if func is torch.nn.functional.embedding else (args[0], args[1])
    return weight.qdata[ids].to(weight.dtype) * weight.scale[ids, None].to(weight.dtype)  # [..., K]


def moved_copy(func, types, args, kwargs):
    """``.to(device, dtype)`` of a weight in kernel form: int4 repacked for a device of another type."""
    self = args[0]
    found = self._get_to_kwargs(*args[1:], **kwargs)
    return self.moved(found["device"], found.get("dtype", self.dtype))


for _cls in (Int8Rows, Int4Groups):
    _cls.dequantize = _dequantize
    _cls.implements(aten.linear.default)(_linear)
    _cls.implements_torch_function(torch.nn.functional.linear)(_linear)
    _cls.implements(aten._to_copy.default)(moved_copy)
Int8Rows.implements(aten.embedding.default)(_embedding)
Int8Rows.implements_torch_function(torch.nn.functional.embedding)(_embedding)


def _packing_for(device: torch.device, shape: tuple, group: int) -> str:
    """The packing a kernel on ``device`` reads for a matrix of ``shape`` [N, K], else plain nibbles."""
    if device.type == "cpu":
        return "cpu" if shape[0] % KERNEL_ROWS == 0 else "nibbles"
    if device.type == "cuda":
        return "nibbles" if _tinygemm_refusal(device, shape, group) else "cuda"
    return "nibbles"


def _tinygemm_refusal(device: torch.device, shape: tuple, group: int) -> str | None:
    """Why tinygemm's CUDA kernel cannot multiply this matrix here, or None."""
    rows, inputs = shape
    if group not in TINYGEMM_GROUPS:
        return f"tinygemm takes groups of {', '.join(map(str, TINYGEMM_GROUPS))} inputs, not {group}"
    if rows % 8 or inputs % 32:
        return f"tinygemm takes rows in eights and inputs in multiples of 32, not {rows} × {inputs}"
    return _tinygemm_missing(torch.device(device))


@functools.lru_cache(maxsize=8)
def _tinygemm_missing(device: torch.device) -> str | None:
    """Why this GPU or torch build has no tinygemm kernel, or None (checked once per device: an 8 × 64 product)."""
    if torch.version.hip:
        return "tinygemm's tiles differ on ROCm"
    if torch.cuda.get_device_capability(device) < (8, 0):
        return "tinygemm needs compute capability 8.0 or newer"
    try:
        packed = _tile_pack(torch.zeros(8, 32, dtype=torch.uint8, device=device), 2)
        aten._weight_int4pack_mm(torch.zeros(1, 64, dtype=torch.bfloat16, device=device), packed, 32,
                                 torch.zeros(2, 8, 2, dtype=torch.bfloat16, device=device))
    except (RuntimeError, NotImplementedError) as error:
        return f"this torch build's tinygemm failed: {(str(error).splitlines() or ['?'])[0][:80]}"
    return None


def _inner_k_tiles(inputs: int) -> int:
    """tinygemm's inner k-tiles for ``inputs`` (a multiple of 32): the most of 8, 4, 2 that divide it in 16s."""
    return next(tiles for tiles in (8, 4, 2) if inputs % (16 * tiles) == 0)


def _tile_pack(pairs: torch.Tensor, inner_k_tiles: int) -> torch.Tensor:
    """tinygemm's CUDA packing of [N, K/2] bytes (value 2j high, 2j+1 low) into int32 [N/8, K/(16·t), 32, t/2]."""
    return aten._convert_weight_to_int4pack(pairs.contiguous(), inner_k_tiles)


def _pack(values: torch.Tensor, packing: str) -> torch.Tensor:
    """int4 values [N, K] packed for a kernel (N·K/2 bytes in each packing), or as plain nibble pairs."""
    unsigned = (values.to(torch.int32) + 8)
    if packing == "cpu":
        return aten._convert_weight_to_int4pack_for_cpu(unsigned, 1)
    if packing == "cuda":  # torchao's byte order for this op: the even input in the high nibble
        return _tile_pack((unsigned[:, 0::2] << 4 | unsigned[:, 1::2]).to(torch.uint8), _inner_k_tiles(values.shape[1]))
    return (unsigned[:, 0::2] | (unsigned[:, 1::2] << 4)).to(torch.uint8)


def _nibbles(packed: torch.Tensor) -> torch.Tensor:
    """Every 4-bit field of ``packed``'s bytes in memory order, low nibble first: [2 · bytes] uint8."""
    flat = packed.contiguous().view(torch.uint8).reshape(-1)
    return torch.stack([flat & 15, flat >> 4], -1).reshape(-1)


def _unpack(packed: torch.Tensor, shape, packing: str) -> torch.Tensor:
    """int8 values [N, K] from their packed bytes; a kernel's packing is read back by packing each position's base-16
    digits (it moves whole nibbles, in an order that depends on the CPU's instruction set or the GPU's tiles)."""
    nibbles = _nibbles(packed).to(torch.int8) - 8
    if packing == "nibbles":
        return nibbles.reshape(shape)
    rows, inputs = shape
    block = _block_positions(inputs, packing, packed.device) if rows % BLOCK == 0 else None
    blocks = rows // BLOCK if block is not None else 1
    where = block if block is not None else _positions(rows, inputs, packing, packed.device)
    values = torch.empty_like(nibbles).view(blocks, -1)
    values[:, where] = nibbles.view(blocks, -1)
    return values.view(shape)


@functools.lru_cache(maxsize=32)
def _block_positions(inputs: int, packing: str, device: torch.device) -> torch.Tensor | None:
    """:func:`_positions` of a block of :data:`BLOCK` rows, when the packing keeps each such block in its own bytes in
    the same order (checked on two blocks: then the first block's bytes hold only its own rows); else None."""
    two = _positions(2 * BLOCK, inputs, packing, device)
    first, second = two.view(2, -1)
    return first.clone() if torch.equal(second, first + BLOCK * inputs) else None


def _positions(rows: int, inputs: int, packing: str, device: torch.device) -> torch.Tensor:
    """For each nibble of a kernel's packing (in the order :func:`_unpack` reads them), the weight position it holds."""
    index = torch.arange(rows * inputs, device=device).view(rows, inputs)
    found = torch.zeros(rows * inputs, dtype=torch.int64, device=device)
    for digit in range(math.ceil(math.log2(max(rows * inputs, 2)) / 4)):
        found += _nibbles(_pack(((index >> (4 * digit)) & 15) - 8, packing)).to(torch.int64) << (4 * digit)
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
            if id(found) not in made:  # a tied head's weight is packed once
                made[id(found)] = nn.Parameter(from_torchao(found), requires_grad=False)
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
    """Whether ``tensor`` is a weight in kernel form (a projection's, or a stack of experts': it converts back to
    torchao's form to be saved)."""
    return callable(getattr(tensor, "to_torchao", None))
