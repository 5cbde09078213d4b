"""The CUDA form of int4 weights, as far as a CPU can check it: tinygemm's tile layout (written out here in PyTorch from
``matrix_to_m16n8k16_Bint4_layout`` in PyTorch's ``aten/src/ATen/native/cuda/int4mm.cu``) is read back exactly, the
shapes agree with the ops' meta functions, the bytes are the CPU form's, the dequantized values are the same numbers,
and a matrix the kernel cannot take says why instead of failing."""

from __future__ import annotations

import pytest
import torch

from prune.quantize import packed
from prune.quantize.packed import FALLBACK, Int4Groups, Int8Rows, _pack, _tinygemm_refusal, _unpack, _widened_mm


def tile_pack_reference(pairs: torch.Tensor, inner_k_tiles: int) -> torch.Tensor:
    """tinygemm's CUDA packing of [N, K/2] bytes (value 2j in the high nibble): int32 [N/8, K/(16·t), 32, t/2]; lane
    l of an 8-row n-tile holds row l // 4, and a word packs two k-tiles' bytes k, k+4, k+8, k+12 (k = l % 4 in its
    tile pair): their high nibbles in bits 0-15, their low nibbles in bits 16-31."""
    rows, half = pairs.shape
    tiles = inner_k_tiles
    n_tile, k_outer, lane, inner = torch.meshgrid(torch.arange(rows // 8), torch.arange(2 * half // (16 * tiles)),
                                                  torch.arange(32), torch.arange(tiles // 2), indexing="ij")
    row = n_tile * 8 + lane // 4
    base = (k_outer * tiles + 2 * inner) * 8 + lane % 4
    v = [pairs[row, base + offset].to(torch.int64) for offset in (0, 4, 8, 12)]
    word = sum(((v[i] >> 4) << (4 * i)) | ((v[i] & 15) << (16 + 4 * i)) for i in range(4))
    return torch.where(word >= 2**31, word - 2**32, word).to(torch.int32)


@pytest.fixture
def reference_tiles(monkeypatch):
    """The CUDA packing op replaced by its PyTorch reference (a CPU has no kernel for it)."""
    monkeypatch.setattr(packed, "_tile_pack", tile_pack_reference)
    packed._block_positions.cache_clear()
    yield
    packed._block_positions.cache_clear()


def _values(rows: int, inputs: int) -> torch.Tensor:
    return torch.randint(-8, 8, (rows, inputs), dtype=torch.int8, generator=torch.Generator().manual_seed(rows))


@pytest.mark.parametrize("rows, inputs, tiles", [(64, 256, 8), (128, 96, 2), (24, 64, 4), (8, 32, 2)])
def test_tinygemms_tile_layout_is_read_back_exactly_and_holds_the_cpu_forms_bytes(reference_tiles, rows, inputs,
                                                                                   tiles):
    values = _values(rows, inputs)
    assert packed._inner_k_tiles(inputs) == tiles
    tiled = _pack(values, "cuda")
    assert tiled.dtype == torch.int32 and tiled.shape == (rows // 8, inputs // (16 * tiles), 32, tiles // 2)
    assert tiled.numel() * 4 == _pack(values, "nibbles").numel() == rows * inputs // 2  # two values a byte
    assert torch.equal(_unpack(tiled, values.shape, "cuda"), values)


def test_the_packing_and_the_product_have_the_shapes_torchs_meta_functions_give():
    from torch._subclasses.fake_tensor import FakeTensorMode

    rows, inputs, group = 4096, 11008, 128  # Llama-2-7B's down projection
    with FakeTensorMode():  # the real ops through their meta functions (this torch has no CUDA to fake)
        tiled = _pack(torch.empty(rows, inputs, dtype=torch.int8), "cuda")
        scale_and_zero = torch.empty(inputs // group, rows, 2, dtype=torch.bfloat16)
        out = torch.ops.aten._weight_int4pack_mm(torch.empty(3, inputs, dtype=torch.bfloat16), tiled, group,
                                                 scale_and_zero)
    assert tiled.shape == (rows // 8, inputs // 128, 32, 4) and tiled.dtype == torch.int32
    assert out.shape == (3, rows) and out.dtype == torch.bfloat16


def test_a_cuda_packed_weight_dequantizes_to_the_cpu_forms_numbers(reference_tiles):
    values = _values(64, 128)
    scales = torch.rand(64, 4, generator=torch.Generator().manual_seed(2)) + 0.01  # groups of 32
    on_cpu = Int4Groups.of(values, scales, 32, torch.bfloat16)
    pairs = on_cpu.scale_and_zero
    tiled = Int4Groups(_pack(values, "cuda"), pairs, values.shape, 32, torch.bfloat16, "cuda")
    assert torch.equal(tiled.values(), values) and torch.equal(tiled.dequantize(), on_cpu.dequantize())
    assert not pairs[..., 1].any()  # zero 0: tinygemm's (u - 8)·scale + zero is q·scale, on CUDA as on the CPU


@pytest.mark.parametrize("shape, group, reason", [
    ((64, 128), 16, "groups of 32, 64, 128, 256 inputs, not 16"),
    ((60, 128), 32, "rows in eights and inputs in multiples of 32, not 60 × 128"),
    ((64, 80), 16, "not 16"),
])
def test_a_matrix_tinygemm_cannot_take_gets_the_dequantizing_path_and_says_why(shape, group, reason):
    found = _tinygemm_refusal(torch.device("cuda"), shape, group)  # refused before any device is touched
    assert reason in found
    weight = Int4Groups(_pack(_values(*shape), "nibbles"), torch.zeros(shape[1] // group, shape[0], 2), shape, group,
                        torch.bfloat16, "nibbles")
    assert weight.kernel() == FALLBACK  # on a CPU the fallback needs no reason; on CUDA it carries this one


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_int8s_cuda_product_scales_the_output_where_the_dequantized_product_scales_the_weight(dtype):
    generator = torch.Generator().manual_seed(3)
    qdata = torch.randint(-127, 128, (48, 64), dtype=torch.int8, generator=generator)
    scale = (torch.rand(48, generator=generator) / 100).to(dtype)
    x = torch.randn(5, 64, generator=generator).to(dtype)
    weight = Int8Rows(qdata, scale, dtype)
    expected = x.double() @ weight.dequantize().double().T
    bound = 4 * 2.0 ** -8 * (x.double().abs() @ weight.dequantize().double().abs().T) + 1e-6  # bfloat16 roundings
    assert ((_widened_mm(x, qdata, scale).double() - expected).abs() <= bound).all()
