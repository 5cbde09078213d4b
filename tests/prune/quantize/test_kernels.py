"""The kernel form of quantized weights: torchao's integers and scales kept (int4's scales rounded to bfloat16), the
int4 packing read back exactly, each kernel's product within the bound that bfloat16 activations allow (int8's long
products widened, computing what its kernel does), the fallback off the kernels' shapes, and nothing that holds an
autograd graph."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import prune  # noqa: F401  (registers the steps)
from prune.core.architectures import decoder_layers
from prune.core.surgery import clone_layers
from prune.quantize import packed
from prune.quantize.packed import FALLBACK, INT4_KERNEL, INT8_KERNEL, Int4Groups, Int8Rows, _pack, _unpack
from prune.quantize.step import Quantize
from prune.quantize.weights import kernel_of, torchao_config

from conftest import tiny_model

UNIT = 2.0 ** -9  # bfloat16's unit roundoff (8 significant bits)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("bits, group", [(8, None), (4, 32), (4, 64)])
def test_the_stored_integers_and_scales_are_torchaos(bits, group, dtype):
    from torchao.quantization import quantize_

    model = tiny_model("llama", 2).to(dtype)
    theirs = clone_layers(model)
    quantize_(decoder_layers(theirs), torchao_config(bits, group),
              filter_fn=lambda m, _: isinstance(m, nn.Linear) and (group is None or m.in_features % group == 0))
    ours = Quantize.of(bits, group).apply(model)
    for mine, torchao in zip(decoder_layers(ours), decoder_layers(theirs)):
        for (name, module), (_, reference) in zip(mine.named_modules(), torchao.named_modules()):
            if isinstance(module, nn.Linear) and hasattr(reference.weight, "qdata"):
                weight, expected = module.weight, reference.weight
                scales = expected.scale.reshape(weight.shape[0], -1).to(dtype if bits == 8 else torch.bfloat16)
                assert torch.equal(weight.values(), expected.qdata) and torch.equal(weight.scales(), scales), name
                assert not expected.zero_point.any()  # symmetric: the zero points LayerCut leaves out are zeros
                assert weight.dequantize().dtype == dtype


@pytest.mark.parametrize("rows, inputs", [(64, 256), (48, 64), (16, 32), (2048, 96)])
def test_the_cpu_packing_is_read_back_exactly(rows, inputs):
    values = torch.randint(-8, 8, (rows, inputs), dtype=torch.int8, generator=torch.Generator().manual_seed(rows))
    for packing in ("cpu", "nibbles"):
        packed = _pack(values, packing)
        assert packed.dtype == torch.uint8 and packed.shape == (rows, inputs // 2)  # two values a byte
        assert torch.equal(_unpack(packed, values.shape, packing), values)


def kernel_and_reference(weight: torch.Tensor, bias: torch.Tensor | None, dtype: torch.dtype, tokens: int = 5):
    """(the quantized linear's output, the exact float64 product of its input and its dequantized weight, and the bound
    on their difference) for a 3-D input of 2 × ``tokens`` rows."""
    x = torch.randn(2, tokens, weight.shape[1], generator=torch.Generator().manual_seed(1)).to(dtype)
    layer = nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None).to(dtype)
    layer.weight = nn.Parameter(weight, requires_grad=False)
    if bias is not None:
        layer.bias = nn.Parameter(bias.to(dtype), requires_grad=False)
    dense = weight.dequantize().double()
    exact = x.double() @ dense.T + (0 if bias is None else layer.bias.double())
    # bfloat16 input (≤ UNIT·|x|), float32 accumulation (≤ K·2⁻²⁴ of the sum), a bfloat16 output (≤ UNIT·|y|), the
    # bias added in the model's dtype: each term relative to Σ|x||w| (+ |b|)
    size = x.double().abs() @ dense.abs().T + (0 if bias is None else layer.bias.double().abs())
    bound = (2 * UNIT + weight.shape[1] * 2.0 ** -23) * size * (1 + 2 * UNIT)
    with torch.inference_mode():
        return layer(x), exact, bound


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("bits, group, kernel, tokens", [(8, None, INT8_KERNEL, 5), (8, None, INT8_KERNEL, 150),
                                                         (4, 32, INT4_KERNEL, 5), (4, 128, INT4_KERNEL, 5)])
def test_each_kernels_product_is_the_dequantized_product_to_bfloat16_rounding(bits, group, kernel, tokens, dtype):
    model = tiny_model("llama", 1)
    layer = decoder_layers(model)[0]
    layer.mlp.down_proj = nn.Linear(256, 64, bias=True)  # 64 outputs: the int4 packing's 64-row blocks
    variant = Quantize.of(bits, group).apply(model.to(dtype))
    linear = decoder_layers(variant)[0].mlp.down_proj
    assert linear.weight.kernel() == kernel
    assert (2 * tokens >= packed.WIDEN_ROWS) == (tokens == 150)  # int8's 300 rows take the widened product
    out, exact, bound = kernel_and_reference(linear.weight, linear.bias, dtype, tokens)
    assert out.dtype == dtype and not out.requires_grad
    assert bool(((out.double() - exact).abs() <= bound).all())


@pytest.mark.parametrize("native", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_long_int8_product_widens_the_rows_and_computes_what_the_kernel_does(monkeypatch, native, dtype):
    """From WIDEN_ROWS rows the kernel is not called; the widened product (bfloat16 or float32 rows, in blocks) gives
    the kernel's own output for the same rows but in a few elements, by one bfloat16 step (the order of the sums)."""
    generator = torch.Generator().manual_seed(0)
    values = torch.randint(-127, 128, (200, 96), dtype=torch.int8, generator=generator)
    weight = Int8Rows(values, (torch.rand(200, generator=generator) / 50).to(dtype), dtype)
    x = torch.randn(packed.WIDEN_ROWS, 96, generator=generator).to(dtype)
    kernel = packed._int8_mm
    expected = weight.product(x[:packed.WIDEN_ROWS - 1])  # one row short: the kernel
    expected = torch.cat([expected, weight.product(x[-1:])])
    calls = []
    monkeypatch.setattr(packed, "_int8_mm", lambda *args: calls.append(args) or kernel(*args))
    monkeypatch.setattr(packed, "NATIVE_BF16", native)
    monkeypatch.setattr(packed, "WIDEN_BYTES", 64 * 96 * 4)  # blocks of 64 rows: 4 blocks, the last short
    out = weight.product(x)
    assert not calls and out.dtype == dtype and out.shape == expected.shape
    weight.product(x[:3])
    assert len(calls) == 1  # a short product still runs the kernel
    differ = out != expected
    step = expected.abs().to(torch.bfloat16).float() * 2.0 ** -7 + 1e-30  # one bfloat16 step (and some), per element
    assert bool(((out.float() - expected.float()).abs() <= step * 1.01).all())
    assert differ.float().mean().item() < 0.01


@pytest.mark.parametrize("rows", [192, 48])  # whole blocks of the packing's 64 rows, and not
def test_a_long_int4_product_with_avx2_code_is_dequantized_and_computes_what_the_kernel_does(monkeypatch, rows):
    """Where the int4 kernel is the slower (AVX2 code), a product of INT4_WIDEN_ROWS rows or more does not call it: the
    rows dequantized to float32 (in blocks of 64 here) give the kernel's own output but in a few elements, by one
    bfloat16 step; elsewhere (AVX-512), or for fewer rows, the kernel runs."""
    generator = torch.Generator().manual_seed(0)
    values = torch.randint(-8, 8, (rows, 96), dtype=torch.int8, generator=generator)
    weight = Int4Groups.of(values, torch.rand(rows, 3, generator=generator) / 50, 32, torch.float32)
    assert weight.packing == "cpu"
    x = torch.randn(packed.INT4_WIDEN_ROWS, 96, generator=generator)
    kernel = packed._int4_mm
    expected = kernel(x.bfloat16(), weight.packed, 32, weight.scale_and_zero).float()
    calls = []
    monkeypatch.setattr(packed, "_int4_mm", lambda *args: calls.append(args) or kernel(*args))
    monkeypatch.setattr(packed, "WIDEN_BYTES", 64 * 96 * 4)  # blocks of 64 rows
    for widens, short, called in [(True, False, 0), (True, True, 1), (False, False, 2)]:
        monkeypatch.setattr(packed, "INT4_WIDENS", widens)
        weight.product(x[:3] if short else x)
        assert len(calls) == called
    monkeypatch.setattr(packed, "INT4_WIDENS", True)
    out = weight.product(x)
    assert out.dtype == torch.float32 and out.shape == expected.shape
    step = expected.abs().to(torch.bfloat16).float() * 2.0 ** -7 + 1e-30  # one bfloat16 step (and some), per element
    assert bool(((out - expected).abs() <= step * 1.01).all())
    assert (out != expected).float().mean().item() < 0.01


def test_an_int4_matrix_off_the_kernels_rows_is_still_packed_and_multiplies_its_dequantized_values():
    values = torch.randint(-8, 8, (24, 64), dtype=torch.int8, generator=torch.Generator().manual_seed(0))
    scales = torch.rand(24, 2) / 10
    weight = Int4Groups.of(values, scales, 32, torch.float32)
    assert weight.packing == "nibbles" and weight.kernel() == FALLBACK and weight.packed.numel() == 24 * 32
    out, exact, _ = kernel_and_reference(weight, None, torch.float32)
    torch.testing.assert_close(out.double(), exact, rtol=1e-6, atol=1e-6)  # float32 throughout
    assert torch.equal(weight.values(), values)


def test_the_kernels_are_named_and_no_weight_asks_for_gradients():
    model = tiny_model("llama", 2)
    assert kernel_of(model) is None
    for bits, kernel in [(8, INT8_KERNEL), (4, INT4_KERNEL)]:
        variant = Quantize.of(bits).apply(model)
        assert kernel_of(variant) == kernel
        assert not any(p.requires_grad for layer in decoder_layers(variant) for p in layer.parameters()
                       if hasattr(p, "__tensor_flatten__"))
        ids = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6]])
        with torch.no_grad():
            plain = variant(input_ids=ids).logits
        with torch.inference_mode():  # how the speed step runs it
            assert torch.equal(variant(input_ids=ids).logits, plain)


def test_torchao_weights_with_zero_points_are_refused_in_one_line():
    from torchao.quantization import IntxUnpackedToInt8Tensor

    from prune.core.errors import InvalidInput
    from prune.quantize.packed import from_torchao

    values = torch.randint(-8, 8, (16, 32), dtype=torch.int8)
    scales, zeros = torch.ones(16, 1), torch.ones(16, 1, dtype=torch.int8)
    asymmetric = IntxUnpackedToInt8Tensor(values, scales, zeros, torch.int4, (1, 32), torch.float32, None)
    with pytest.raises(InvalidInput, match="symmetric int8 or int4"):
        from_torchao(asymmetric)


@pytest.mark.parametrize("bits, group", [(8, None), (4, 32)])
def test_the_memory_table_counts_the_packed_bytes(bits, group):
    from prune.core.storage import weight_bytes

    model = tiny_model("llama", 2)
    matrices = [m for layer in decoder_layers(model) for m in layer.modules() if isinstance(m, nn.Linear)]
    packed = sum(m.out_features * m.in_features + m.out_features * 4 if bits == 8 else
                 m.out_features * m.in_features // 2 + m.in_features // group * m.out_features * 2 * 2
                 for m in matrices)
    dense = sum(m.weight.numel() * 4 for m in matrices)
    assert weight_bytes(Quantize.of(bits, group).apply(model)) == weight_bytes(model) - dense + packed
