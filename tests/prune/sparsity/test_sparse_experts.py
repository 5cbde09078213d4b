"""Sparsity reaches a mixture of experts' stacked experts: each expert's matrices at the asked sparsity, Wanda's scores
from the tokens the router sent to that expert (a known answer computed here), the routers left alone, the zeros
counted, and the export reloading with the same logits."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

import prune
from evaluation.measure.memory import save_checkpoint
from prune.core.architectures import decoder_layers
from prune.core.calibration import Calibration, token_windows
from prune.core.experts import expert_stacks
from prune.sparsity.masks import zero_fraction
from tiny_architectures import tiny

CAL = Calibration(n_samples=4, seq_len=32)
IDS = torch.tensor([[5, 6, 7, 8, 9, 10]])


def expert_matrices(model):
    return [rows for layer in decoder_layers(model) for stack in expert_stacks(layer) for rows in stack.rows()]


@pytest.mark.parametrize("model_type", ["mixtral", "qwen3_moe", "gpt_oss", "deepseek_v3", "olmoe"])
@pytest.mark.parametrize("method", ["magnitude", "wanda", "sparsegpt"])
def test_every_expert_matrix_is_at_the_asked_sparsity_and_the_original_untouched(model_type, method,
                                                                                 tiny_tokenizer):
    model = tiny(model_type)
    before = {name: p.clone() for name, p in model.named_parameters()}
    variant = prune.sparsify(model, tiny_tokenizer, method, 0.5, calibration=CAL)
    for rows in expert_matrices(variant):
        assert int((rows == 0).sum()) == rows.numel() // 2  # each expert's matrix its own half
    assert zero_fraction(variant) == pytest.approx(0.5, abs=0.01)
    for name, p in model.named_parameters():
        assert torch.equal(p, before[name]), name
    router = [p for name, p in variant.named_parameters() if name.endswith(("mlp.gate.weight", "mlp.router.weight"))]
    assert router and all(int((p == 0).sum()) == 0 for p in router)  # the routers choose as before


def test_wandas_scores_read_the_tokens_routed_to_each_expert(tiny_tokenizer):
    model = tiny("mixtral")
    captured = []
    experts = model.model.layers[0].mlp.experts  # the first layer reads the embeddings: the original's inputs
    handle = experts.register_forward_pre_hook(lambda _m, args: captured.append((args[0].clone(), args[1].clone())))
    with torch.no_grad():
        model(token_windows(tiny_tokenizer, CAL))
    handle.remove()
    hidden = torch.cat([h for h, _ in captured]).reshape(-1, 64)
    chosen = torch.cat([c for _, c in captured]).reshape(hidden.shape[0], -1)
    variant = prune.sparsify(model, tiny_tokenizer, "wanda", 0.5, calibration=CAL)
    original = expert_stacks(model.model.layers[0])[0].rows()  # gate_up [E, 256, 64]
    pruned = expert_stacks(variant.model.layers[0])[0].rows()
    for expert in range(4):
        x = hidden[(chosen == expert).any(-1)]
        assert len(x) > 0
        score = original[expert].abs() * x.pow(2).sum(0).sqrt()  # |W_ij| · ‖X_j‖ over the routed tokens
        dropped = score.argsort(dim=1)[:, :32]  # the lowest half of each row
        expected = original[expert].scatter(1, dropped, 0.0)
        assert torch.equal(pruned[expert], expected)


def test_a_sparse_mixture_of_experts_exports_and_reloads_with_the_same_logits(tmp_path, tiny_tokenizer):
    variant = prune.sparsify(tiny("qwen3_moe"), tiny_tokenizer, "wanda", None, pattern="2:4", calibration=CAL)
    for rows in expert_matrices(variant):
        assert torch.equal((rows.view(rows.shape[0], -1, 4) == 0).sum(-1), torch.full((rows.shape[0],
                                                                                        rows.shape[1] // 4), 2))
    save_checkpoint(variant, None, tmp_path)
    again = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32)
    with torch.no_grad():
        torch.testing.assert_close(again(IDS).logits, variant(IDS).logits)
    assert zero_fraction(again) == zero_fraction(variant)


def test_a_mixture_of_experts_over_the_memory_budget_is_pruned_layer_by_layer_with_the_same_weights(
        tmp_path, tiny_tokenizer, monkeypatch):
    from prune.core.offload import is_offloaded, named_weights, resident_bytes

    monkeypatch.setenv("LAYERCUT_CACHE", str(tmp_path / "cache"))
    tiny("gpt_oss").save_pretrained(tmp_path / "model")
    tiny_tokenizer.save_pretrained(tmp_path / "model")
    whole, _ = prune.load_model(str(tmp_path / "model"), device="cpu")
    streamed, _ = prune.load_model(str(tmp_path / "model"), device="cpu", budget="1KiB")  # read layer by layer
    expected = prune.sparsify(whole, tiny_tokenizer, "wanda", 0.5, calibration=CAL)
    found = prune.sparsify(streamed, tiny_tokenizer, "wanda", 0.5, calibration=CAL)
    assert is_offloaded(found) and resident_bytes(found) < resident_bytes(expected) / 4
    weights = dict(named_weights(expected))
    for name, tensor in named_weights(found):
        assert torch.equal(tensor, weights[name]), name
    assert zero_fraction(found) == zero_fraction(expected) == pytest.approx(0.5, abs=0.01)
