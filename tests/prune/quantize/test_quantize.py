"""Weight-only quantization (torchao's numbers in PyTorch's kernels' form): the stored values against the rule computed
by hand, the original untouched, the bytes counted before building equal to those owned after, an export that plain
transformers reloads with the dequantize-then-multiply logits (and LayerCut with the kernels' exactly), a parked variant
that computes the same, and the refusals."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from transformers import AutoModelForCausalLM

import prune  # registers the steps
from evaluation.measure.memory import checkpoint_bytes, folder_bytes, save_checkpoint
from prune.core.storage import weight_bytes
from evaluation.serving.variants import estimated_bytes, own_bytes
from prune.core import parking
from prune.core.architectures import decoder_layers
from prune.core.errors import InvalidInput
from prune.core.recipe import Recipe
from prune.core.storage import dense, is_quantized, nbytes
from prune.core.surgery import clone_layers, shallow_clone
from prune.lowrank.step import Decompose
from prune.quantize.packed import FALLBACK
from prune.quantize.weights import kernel_of
from prune.quantize.step import Quantize
from prune.quantize.weights import QUANTIZED_FIELD
from prune.sparsity.step import Sparsify
from prune.width.step import WidthPrune
from prune.core.calibration import Calibration

from conftest import tied_llama, tiny_model

PROMPT = torch.tensor([[5, 17, 42, 9, 120, 77, 3, 250, 11, 64]])


def logits(model, ids=PROMPT):
    with torch.no_grad():
        return model(input_ids=ids).logits


def by_hand(weight: torch.Tensor, bits: int, group: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric quantization computed here: scale = max |w| / (2^(bits-1) - 0.5) per row or group, q = round(w / scale)
    clamped to the signed range (torchao multiplies by the scale's reciprocal): (q [N, K], scales [N, K/g])."""
    rows = weight.reshape(weight.shape[0], -1, group or weight.shape[1])
    scale = rows.abs().amax(-1, keepdim=True) / (2 ** (bits - 1) - 0.5)
    levels = (rows * (1.0 / scale)).round().clamp(-2 ** (bits - 1), 2 ** (bits - 1) - 1)
    return levels.reshape(weight.shape).to(torch.int8), scale[..., 0]


@pytest.mark.parametrize("bits, group", [(8, None), (4, 32)])
def test_every_layer_matrix_holds_the_rule_computed_by_hand_and_the_original_is_untouched(bits, group):
    model = tiny_model("llama", 3)
    before = {name: (p.detach().clone(), p.data_ptr()) for name, p in model.named_parameters()}
    variant = Quantize.of(bits, group).apply(model)
    original_layers, quantized_layers = decoder_layers(model), decoder_layers(variant)
    for original, quantized in zip(original_layers, quantized_layers):
        for (name, module), (_, mine) in zip(original.named_modules(), quantized.named_modules()):
            if isinstance(module, nn.Linear):
                assert is_quantized(mine.weight) and not is_quantized(module.weight), name
                levels, scales = by_hand(module.weight.detach(), bits, group)
                stored = scales if bits == 8 else scales.to(torch.bfloat16)  # int4: tinygemm's bfloat16 scales
                assert torch.equal(mine.weight.values(), levels) and torch.equal(mine.weight.scales(), stored), name
                grouped = levels.reshape(*stored.shape, -1) * stored[..., None].float()
                torch.testing.assert_close(dense(mine.weight), grouped.reshape(levels.shape), rtol=0, atol=0)
    assert not is_quantized(variant.lm_head.weight)  # the head and embeddings stay as they are
    for name, p in model.named_parameters():
        assert torch.equal(p, before[name][0]) and p.data_ptr() == before[name][1], name
    assert getattr(model.config, QUANTIZED_FIELD, None) is None and getattr(model, "hf_quantizer", None) is None
    assert getattr(variant.config, QUANTIZED_FIELD) == {"bits": bits, "group": group, "quantized": 21, "dense": 0,
                                                      "head": False, "method": "rtn", "embedding": False}


@pytest.mark.parametrize("bits", [8, 4])
def test_a_quantized_head_holds_int8_by_hand_and_a_tied_original_stays_tied_and_untouched(bits):
    model = tied_llama(2)
    head = model.lm_head.weight.detach().clone()
    step = Quantize.of(bits, head=True)
    variant = step.apply(model)
    levels, scales = by_hand(head, 8, None)  # int8 whatever the layers' bits: a scale per row
    assert torch.equal(variant.lm_head.weight.values(), levels) and torch.equal(variant.lm_head.weight.scales(),
                                                                               scales)
    assert variant.model.embed_tokens.weight is model.model.embed_tokens.weight  # the original's rows, shared
    assert model.lm_head.weight is model.model.embed_tokens.weight and torch.equal(model.lm_head.weight, head)
    assert not variant.config.tie_word_embeddings and model.config.tie_word_embeddings
    assert getattr(variant.config, QUANTIZED_FIELD)["head"] and "LM head in int8" in step.describe()
    assert step.short() == ("int8+head" if bits == 8 else "int4 g32+head")
    assert Quantize.from_record(step.record()) == step
    assert "and the LM head (int8" in step.card_line(variant)
    assert torch.allclose(logits(variant), logits(model), atol=0.05)  # a close approximation, not the same numbers
    assert not torch.equal(logits(variant), logits(Quantize.of(bits).apply(model)))  # the head's rounding shows


def test_int8_values_take_one_byte_and_int4_values_half_a_byte():
    """The real bytes, counted by hand: int8 values and a float32 scale per row; int4 values two a byte and a bfloat16
    scale and zero per group of inputs."""
    weight = tiny_model("llama", 1).model.layers[0].mlp.down_proj.weight  # 32 outputs × 64 inputs
    made = {(bits, group): decoder_layers(Quantize.of(bits, group).apply(tiny_model("llama", 1)))[0].mlp.down_proj
            .weight for bits, group in [(8, None), (4, 32), (4, 64)]}
    assert nbytes(made[8, None]) == 32 * 64 + 32 * 4
    assert nbytes(made[4, 32]) == 32 * 64 // 2 + 64 // 32 * 32 * 2 * 2
    assert nbytes(made[4, 64]) == 32 * 64 // 2 + 64 // 64 * 32 * 2 * 2
    assert nbytes(weight) == 32 * 64 * 4


BYTES_CASES = {
    "int8": (Quantize.of(8),),
    "int4": (Quantize.of(4),),
    "int4-g64": (Quantize.of(4, 64),),  # projections with 32 inputs stay dense, counted as such
    "cut-int4": (prune.DepthCut.of(4, [1, 2]), Quantize.of(4)),
    "sparse-int8": (Sparsify.of("magnitude", 0.5), Quantize.of(8)),
    "lowrank-int4": (Decompose.of("weight", ranks=16), Quantize.of(4)),  # first factors quantized, second ones dense
    "int4-head": (Quantize.of(4, head=True),),
    "cut-int8-head": (prune.DepthCut.of(4, [1, 2]), Quantize.of(8, head=True)),
    "width-int8": (WidthPrune.of(0.8, Calibration(n_samples=2, seq_len=16)), Quantize.of(8)),  # sliced biases: owned
}


# Qwen2's q, k and v have biases: the original's unless a low-rank step copied them. After a sparsity or width step
# the count takes them as copied (see quantized_bytes): those cases are Llama's only.
@pytest.mark.parametrize("arch, name", [("llama", name) for name in BYTES_CASES]
                         + [("qwen2", name) for name in BYTES_CASES if name not in ("sparse-int8", "width-int8")])
def test_the_bytes_counted_before_building_are_the_bytes_the_variant_owns(arch, name, tiny_tokenizer):
    model = tiny_model(arch, 4)
    recipe = Recipe(BYTES_CASES[name])
    assert estimated_bytes(model, recipe) == own_bytes(recipe.apply(model, tiny_tokenizer), model)


def test_a_group_wider_than_a_projections_inputs_keeps_it_dense_and_says_so():
    variant = Quantize.of(4, 64).apply(tiny_model("llama", 2))
    layer = decoder_layers(variant)[0]
    assert is_quantized(layer.mlp.down_proj.weight)  # 64 inputs: one group
    assert not is_quantized(layer.mlp.up_proj.weight) and not is_quantized(layer.self_attn.q_proj.weight)  # 32 inputs
    found = getattr(variant.config, QUANTIZED_FIELD)
    assert (found["quantized"], found["dense"]) == (2, 12)
    assert "12 projection(s) kept dense" in Quantize.of(4, 64).card_line(variant)


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gemma2"])
@pytest.mark.parametrize("bits", [8, 4])
def test_a_saved_quantized_folder_reloads_in_plain_transformers_with_the_same_logits(arch, bits, tmp_path,
                                                                                    tiny_tokenizer):
    variant = Recipe((prune.DepthCut.of(4, [2]), Quantize.of(bits))).apply(tiny_model(arch, 4))
    save_checkpoint(variant, None, tmp_path)
    assert folder_bytes(tmp_path) == checkpoint_bytes(variant)  # the size computed without writing
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32)
    assert is_quantized(reloaded.model.layers[0].mlp.down_proj.weight) and kernel_of(reloaded) == FALLBACK
    assert torch.equal(logits(reloaded), logits(in_torchao_form(variant)))  # torchao's products of the same numbers
    tiny_tokenizer.save_pretrained(tmp_path)
    loaded, _ = prune.load_model(str(tmp_path), device="cpu")  # packed again: the kernels, the same numbers
    assert kernel_of(loaded) == kernel_of(variant) is not None
    assert torch.equal(logits(loaded), logits(variant))


def test_a_saved_variant_with_a_quantized_head_reloads_untied_with_the_same_logits(tmp_path, tiny_tokenizer):
    model = tied_llama(2)
    variant = Quantize.of(4, head=True).apply(model)
    save_checkpoint(variant, None, tmp_path)
    assert folder_bytes(tmp_path) == checkpoint_bytes(variant)
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32)
    assert is_quantized(reloaded.lm_head.weight) and not is_quantized(reloaded.model.embed_tokens.weight)
    assert torch.equal(reloaded.model.embed_tokens.weight, model.model.embed_tokens.weight)
    assert torch.equal(logits(reloaded), logits(in_torchao_form(variant)))
    tiny_tokenizer.save_pretrained(tmp_path)
    loaded, _ = prune.load_model(str(tmp_path), device="cpu")
    assert kernel_of(loaded) == kernel_of(variant) and torch.equal(logits(loaded), logits(variant))


def in_torchao_form(variant):
    """A copy of ``variant`` whose kernel-form weights are torchao's plain tensors of the same numbers."""
    reference = clone_layers(variant)
    reference.set_output_embeddings(shallow_clone(variant.get_output_embeddings()))  # its own head module too
    for module in reference.modules():
        if isinstance(module, nn.Linear) and is_quantized(module.weight):
            module.weight = nn.Parameter(module.weight.to_torchao(), requires_grad=False)
    return reference


@pytest.mark.parametrize("bits", [8, 4])
def test_a_quantized_variant_parked_in_a_file_computes_the_same_and_counts_its_real_bytes(bits):
    model = tiny_model("llama", 2)
    variant = Quantize.of(bits).apply(model)
    expected = logits(variant)
    buffers = sum(b.numel() * b.element_size() for b in variant.buffers())
    assert parking.parked_bytes(variant) - buffers == weight_bytes(variant) < weight_bytes(model)
    stored = parking.park(variant, torch.device("cpu"))
    try:
        assert torch.equal(logits(variant), expected)
    finally:
        parking.bring(variant, torch.device("cpu"), stored)
    assert torch.equal(logits(model), logits(tiny_model("llama", 2)))


def test_quantization_is_last_and_checks_its_values():
    with pytest.raises(InvalidInput, match="last step of a recipe"):
        Recipe((Quantize.of(8), Sparsify.of("magnitude", 0.5)))
    with pytest.raises(InvalidInput, match="8 or 4 bits"):
        Quantize.of(3)
    with pytest.raises(InvalidInput, match="no group size"):
        Quantize.of(8, 32)
    with pytest.raises(InvalidInput, match="group size is one of"):
        Quantize.of(4, 48)
    with pytest.raises(InvalidInput, match="already quantized"):
        Quantize.of(8).apply(Quantize.of(4).apply(tiny_model("llama", 1)))
    with pytest.raises(InvalidInput, match="true or false"):
        Quantize.of(8, head="yes")
    with pytest.raises(InvalidInput, match="nn.Linear"):  # GPT-2's projections are Conv1D
        Quantize.of(8).apply(tiny_model("gpt2", 1))
    made = Recipe((prune.DepthCut.of(4, [1]), Quantize.of(4, 64)))
    assert Recipe.from_json(made.to_json()) == made and made.steps[1].short() == "int4 g64"


@pytest.mark.parametrize("inputs", [96, 100, 1219])  # a width pruning's odd widths: torch's int8 kernel crashed on them
def test_an_int8_matrix_of_any_input_width_multiplies_a_batch_to_its_dequantized_product(inputs):
    from prune.quantize.packed import INT8_KERNEL, INT8_UNEVEN, Int8Rows

    torch.manual_seed(0)
    values, scale = torch.randint(-127, 128, (24, inputs), dtype=torch.int8), torch.rand(24) / 100
    weight, x = Int8Rows(values, scale, torch.float32), torch.randn(16, inputs)
    expected = x @ (values.float() * scale[:, None]).T
    bound = (x.abs() @ (values.float().abs() * scale[:, None]).T) * 2**-7  # bfloat16 activations at most
    assert ((weight.product(x) - expected).abs() <= bound).all()
    assert weight.kernel() == (INT8_KERNEL if inputs % 16 == 0 else INT8_UNEVEN)
