"""A mixture of experts' stacked experts quantized as first-class weights: every expert's matrix holds the rule computed
by hand, multiplies through the kernels, is saved with no expert matrix in floating point, reloads with the same
logits and the same lm-eval scores, is counted in bytes stored and bytes read per token as a hand count gives them,
and GPTQ solves each expert on the tokens the router sent to it."""

from __future__ import annotations

import copy

import pytest
import torch
from lm_eval.api.instance import Instance
from lm_eval.models.huggingface import HFLM
from safetensors import safe_open
from torch import nn
from transformers import AutoModelForCausalLM

import prune
from evaluation.measure.bandwidth import weights_read
from evaluation.measure.memory import save_checkpoint
from evaluation.quality.fast_lm import FastLM
from evaluation.serving.variants import estimated_bytes, own_bytes
from prune.core.architectures import decoder_layers
from prune.core.calibration import Calibration, token_windows
from prune.core.errors import UnsupportedArchitecture
from prune.core.experts import decoder_experts, expert_stacks
from prune.core.recipe import Recipe
from prune.core.storage import weight_bytes
from prune.quantize import calibrated
from prune.quantize.experts import LAYERCUT, PackedExperts
from prune.quantize.packed import INT4_KERNEL, INT8_KERNEL
from prune.quantize.step import Quantize
from prune.quantize.weights import kernel_of
from test_quantize import by_hand
from tiny_architectures import tiny

MOES = ["mixtral", "qwen3_moe", "gpt_oss", "deepseek_v3", "olmoe"]
IDS = torch.tensor([[5, 6, 7, 8, 9, 10, 11, 12]])
CAL = Calibration(n_samples=4, seq_len=32)


def stacks(model):
    return [stack for layer in decoder_layers(model) for stack in expert_stacks(layer)]


@pytest.mark.parametrize("model_type", MOES)
@pytest.mark.parametrize("bits, group", [(8, None), (4, 32)])
def test_every_expert_holds_the_rule_by_hand_and_no_expert_matrix_stays_float(model_type, bits, group):
    model = tiny(model_type)
    before = {name: p.clone() for name, p in model.named_parameters()}
    variant = Quantize.of(bits).apply(model)
    found = stacks(variant)
    assert found and all(isinstance(s.weight, PackedExperts) for s in found)
    assert all(isinstance(p, PackedExperts) for _, p in decoder_experts(variant))  # no expert stack left float
    for original, quantized in zip(stacks(model), found):
        for expert, rows in enumerate(original.rows()):  # [outputs, inputs], transposed back for gpt-oss
            values, scales = by_hand(rows, bits, group)
            kept = quantized.weight.expert(expert)
            assert torch.equal(kept.values(), values)
            torch.testing.assert_close(kept.scales().float(), scales.to(kept.scales().dtype).float())
    assert {s.weight.kernel() for s in found} == {INT8_KERNEL if bits == 8 else INT4_KERNEL}  # every expert's
    assert (INT8_KERNEL if bits == 8 else INT4_KERNEL) in kernel_of(variant)
    for name, p in model.named_parameters():  # the original is untouched
        assert torch.equal(p, before[name]), name
    assert variant.config.layercut_quantized["expert_stacks"] == len(found)


@pytest.mark.parametrize("model_type", ["mixtral", "gpt_oss"])
@pytest.mark.parametrize("bits", [8, 4])
def test_the_packed_experts_compute_transformers_forward_of_their_dequantized_numbers(model_type, bits):
    """An independent route: transformers' own eager experts loop, given the dequantized stacks and the inputs rounded
    to bfloat16 as the kernels take them."""
    variant = Quantize.of(bits).apply(tiny(model_type))
    packed = decoder_layers(variant)[0].mlp.experts
    assert packed.config._experts_implementation == LAYERCUT
    plain = copy.copy(packed)
    plain._parameters = {name: nn.Parameter(p.dequantize() if isinstance(p, PackedExperts) else p)
                         for name, p in packed._parameters.items()}
    plain.config = copy.copy(packed.config)
    plain.config._experts_implementation = "eager"
    torch.manual_seed(0)
    x, chosen, weights = torch.randn(12, 64), torch.stack([torch.randperm(4)[:2] for _ in range(12)]), torch.rand(12, 2)
    with torch.no_grad():
        expected = plain(x.bfloat16().float(), chosen, weights)
        torch.testing.assert_close(packed(x, chosen, weights), expected, rtol=0.02, atol=2e-3 * expected.abs().max())


@pytest.mark.parametrize("model_type", ["mixtral", "gpt_oss", "deepseek_v3"])
@pytest.mark.parametrize("bits", [8, 4])
def test_the_export_stores_no_float_expert_and_reloads_with_the_same_logits_and_lm_eval_scores(
        model_type, bits, tmp_path, tiny_tokenizer):
    model = tiny(model_type)
    variant = Recipe((prune.DepthCut.of(4, [2]), Quantize.of(bits))).apply(model)
    save_checkpoint(variant, None, tmp_path)
    tiny_tokenizer.save_pretrained(tmp_path)
    with safe_open(tmp_path / "model.safetensors", "pt") as stored:
        experts = {key: stored.get_slice(key).get_dtype() for key in stored.keys() if ".experts." in key
                   and "_bias" not in key}
    assert experts and all(dtype in ("I8", "BF16", "F32") for dtype in experts.values())
    assert all(key.rsplit("_", 1)[-1] in ("qdata", "scale", "point") for key in experts)  # integers, scales, zeros
    assert all(dtype == "I8" for key, dtype in experts.items() if key.endswith("_qdata"))
    again = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32)  # transformers reads the stacks
    assert {type(p).__name__ for _, p in decoder_experts(again)} == {"Int8Tensor" if bits == 8 else
                                                                     "IntxUnpackedToInt8Tensor"}
    loaded, tokenizer = prune.load_model(str(tmp_path), device="cpu")  # LayerCut packs them again
    assert all(isinstance(p, PackedExperts) for _, p in decoder_experts(loaded)) and len(decoder_layers(loaded)) == 3
    with torch.no_grad():
        assert torch.equal(loaded(IDS).logits, variant(IDS).logits)
    requests = [Instance("loglikelihood", {}, (context, ending), i) for i, (context, ending) in enumerate(
        [("The cat sat on the", " mat."), ("In the beginning", " the model was small"), ("Layers", " can go")])]
    slow = HFLM(pretrained=loaded, tokenizer=tokenizer, batch_size=2).loglikelihood(requests, disable_tqdm=True)
    fast = FastLM(variant, tiny_tokenizer, batch_size=2).loglikelihood(requests, disable_tqdm=True)
    for ours, theirs in zip(fast, slow):
        assert abs(ours[0] - theirs[0]) <= 1e-3 and ours[1] == theirs[1]


@pytest.mark.parametrize("bits, group", [(8, None), (4, 32)])
def test_bytes_stored_and_read_per_token_are_a_hand_count(bits, group):
    model = tiny("mixtral")  # 4 layers, 4 experts of which 2 a token, hidden 64, experts' intermediate 128
    variant = Quantize.of(bits).apply(model)
    weights = 4 * 4 * (256 * 64 + 64 * 128)  # 4 layers × 4 experts × (gate_up 256 × 64 + down 64 × 128)
    rows = 4 * 4 * (256 + 64)  # every expert's output rows
    if bits == 8:
        stored_experts = weights + rows * 4  # a byte a weight, a float32 scale per row
    else:
        groups = 4 * 4 * (256 * 64 // 32 + 64 * 128 // 32)  # every row's inputs in groups of 32
        stored_experts = weights // 2 + groups * 2 * 2  # two a byte; a bfloat16 scale and zero per group
    expert_bytes = sum(p.numel() * p.element_size() for _, p in decoder_experts(model))
    assert weight_bytes(variant) - weight_bytes(model) == stored_experts - expert_bytes + _projection_change(model,
                                                                                                            variant)
    assert len(stacks(variant)) == 4 * 2
    read_change = weights_read(variant) - weights_read(model)  # a token reads 2 of each layer's 4 experts
    assert read_change == (stored_experts - expert_bytes) // 2 + _projection_change(model, variant)
    recipe = Recipe((Quantize.of(bits),))
    assert estimated_bytes(model, recipe) == own_bytes(variant, model)


def _projection_change(model, variant) -> int:
    """The attention projections' bytes after minus before (counted by the dense tests): what is not experts."""
    def projections(m):
        return sum(weight_bytes(module) for layer in decoder_layers(m) for module in layer.modules()
                   if isinstance(module, nn.Linear))
    return projections(variant) - projections(model)


def test_gptq_solves_each_expert_on_the_tokens_routed_to_it_and_an_unreached_one_on_every_token(tiny_tokenizer,
                                                                                                 monkeypatch):
    model = tiny("gpt_oss")  # its router has a bias: expert 3 of layer 0 is never chosen
    model.model.layers[0].mlp.router.bias.data[3] = -1e4
    captured = []  # the first layer's experts' inputs and choices, read from the original model
    handle = model.model.layers[0].mlp.experts.register_forward_pre_hook(
        lambda _module, args: captured.append((args[0].clone(), args[1].clone())))
    with torch.no_grad():
        model(token_windows(tiny_tokenizer, CAL))
    handle.remove()
    seen: dict[int, torch.Tensor] = {}  # data_ptr of the rows GPTQ was given → the Hessian it got
    solve = calibrated.gptq

    def recording(weight, hessian, grid, **options):
        seen[weight.data_ptr()] = hessian
        return solve(weight, hessian, grid, **options)

    monkeypatch.setattr(calibrated, "gptq", recording)
    Quantize.of(8, method="gptq", calibration=CAL).apply(model, tiny_tokenizer)
    hidden = torch.cat([h for h, _ in captured]).reshape(-1, 64).float()
    chosen = torch.cat([c for _, c in captured]).reshape(hidden.shape[0], -1)
    assert not (chosen == 3).any() and (chosen == 0).any()
    up = expert_stacks(model.model.layers[0])[0].rows()  # the original's gate_up as [E, 2I, D] views: the variant's
    for expert in range(4):  # rows until GPTQ replaces them
        x = hidden[(chosen == expert).any(-1)] if expert != 3 else hidden  # unreached: every token, as if routed
        torch.testing.assert_close(seen[up[expert].data_ptr()], x.T @ x, rtol=1e-4, atol=1e-3)


def test_experts_transformers_does_not_drive_are_refused_in_one_line(tiny_tokenizer):
    for model_type in ("llama4_text", "jetmoe"):
        model = tiny(model_type)
        for build in (lambda: Quantize.of(8).apply(model),
                      lambda: prune.sparsify(model, tiny_tokenizer, "magnitude", 0.5)):
            with pytest.raises(UnsupportedArchitecture, match=r"does not reach the experts of \w+ \(\d+ %") as refused:
                build()
            assert "\n" not in str(refused.value) and "% of this model's parameters" in str(refused.value)
