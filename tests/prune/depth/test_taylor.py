"""Taylor+: the lean backward pass equals a plain one, in float32, and protected layers are never chosen."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

import prune
from prune.core.architectures import decoder_layers
from prune.core.calibration import Calibration, token_windows
from prune.core.errors import InvalidCut
from prune.depth.result import ImportanceResult, blocks_from_layers

from conftest import tiny_model

CAL = Calibration(n_samples=4, seq_len=32)


def reference_saliency(model, ids) -> np.ndarray:
    """The textbook computation: one full backward, every gradient kept, Σ |W·g| over weights in float64."""
    model = copy.deepcopy(model)
    model(input_ids=ids, labels=ids, use_cache=False).loss.backward()
    return np.array([
        sum(float((p.detach().double() * p.grad.double()).abs().sum()) for name, p in layer.named_parameters()
            if name.endswith("weight"))
        for layer in decoder_layers(model)
    ])


def random_biases(model) -> None:
    """Biases start at zero; make them matter, so counting them would change the scores."""
    generator = torch.Generator().manual_seed(5)
    for name, p in model.named_parameters():
        if name.endswith("bias"):
            p.data.copy_(torch.randn(p.shape, generator=generator) * 0.5)


@pytest.mark.parametrize("arch", ["llama", "gpt2", "opt"])
def test_scores_equal_a_plain_backward_pass(arch, tiny_tokenizer):
    model = tiny_model(arch, layers=6, seed=4)
    random_biases(model)
    ids = token_windows(tiny_tokenizer, CAL)
    result = prune.score(model, tiny_tokenizer, "taylor", calibration=CAL, use_cache=False, plus=False)
    np.testing.assert_allclose(result.layer_scores, reference_saliency(model, ids), rtol=1e-5)
    if arch != "llama":  # llama has no biases: elsewhere, counting them would be a visible difference
        with_biases = copy.deepcopy(model)
        with_biases(input_ids=ids, labels=ids).loss.backward()
        bias_part = sum(float((p.detach() * p.grad).abs().sum())
                        for n, p in decoder_layers(with_biases)[2].named_parameters() if n.endswith("bias"))
        assert bias_part > 1e-3 * result.layer_scores[2]
    assert all(p.grad is None and p.requires_grad for p in model.parameters())


def test_products_and_sums_are_float32_for_a_bfloat16_model(tiny_tokenizer):
    model = tiny_model("llama", layers=4, seed=6).to(torch.bfloat16)
    ids = token_windows(tiny_tokenizer, CAL)
    result = prune.score(model, tiny_tokenizer, "taylor", calibration=CAL, use_cache=False, plus=False)
    expected = reference_saliency(model, ids)  # the same bf16 gradients, multiplied and summed in float64
    np.testing.assert_allclose(result.layer_scores, expected, rtol=1e-5)


def test_one_gradient_at_a_time_and_layers_recomputed(tiny_tokenizer, monkeypatch):
    """When a weight's gradient arrives no other gradient is held, and outside the layers none is made."""
    model = tiny_model("llama", layers=4, seed=7)
    mlp_class = type(decoder_layers(model)[0].mlp)
    real_forward = mlp_class.forward
    monkeypatch.setattr(mlp_class, "forward", lambda self, *a, **k: mlp_calls.append(1) or real_forward(self, *a, **k))
    layer_weights = {id(p) for layer in decoder_layers(model) for p in layer.parameters()}
    others = [p for p in model.parameters() if id(p) not in layer_weights]
    held, outside, mlp_calls = [], [], []

    def on_gradient(param):
        held.append(sum(p.grad is not None for p in model.parameters()))

    handles = [p.register_post_accumulate_grad_hook(on_gradient) for p in model.parameters() if id(p) in layer_weights]
    handles += [p.register_post_accumulate_grad_hook(lambda p: outside.append(p)) for p in others]
    try:
        prune.score(model, tiny_tokenizer, "taylor", calibration=CAL, use_cache=False)
    finally:
        for handle in handles:
            handle.remove()
    assert held and set(held) == {1}  # only the one just accumulated (ours are registered first)
    assert outside == []
    assert len(mlp_calls) == 2 * 4  # once forward, once recomputed in backward (module hooks miss the latter)


def test_a_model_with_frozen_parameters_is_scored_and_left_frozen(tiny_tokenizer):
    model = tiny_model("llama", layers=4, seed=8)
    ids = token_windows(tiny_tokenizer, CAL)
    expected = reference_saliency(model, ids)
    for p in model.parameters():
        p.requires_grad_(False)
    result = prune.score(model, tiny_tokenizer, "taylor", calibration=CAL, use_cache=False, plus=False)
    np.testing.assert_allclose(result.layer_scores, expected, rtol=1e-5)
    assert not any(p.requires_grad for p in model.parameters())


def protected_result() -> ImportanceResult:
    """8 layers, 0-3 and 6-7 protected, whose raw scores are the lowest (as Taylor+ often sees at the edges)."""
    scores = np.array([0.1, 0.2, 0.3, 0.4, 5.0, 4.0, 0.05, 0.01])
    protected = {0, 1, 2, 3, 6, 7}
    return ImportanceResult("taylor", blocks_from_layers(scores, protected), "s", layer_scores=scores,
                            params={"protected": sorted(protected)})


@pytest.mark.parametrize("result", [protected_result(), ImportanceResult.from_json(protected_result().to_json())],
                         ids=["fresh", "from-json"])
def test_no_choice_ever_includes_a_protected_layer(result):
    protected = set(result.params["protected"])
    assert result.best_layers(1) == [5]  # raw minimum is layer 7, which is protected
    assert result.best_layers(2) == [4, 5]
    assert result.best_layers(0) == []
    with pytest.raises(InvalidCut, match="Only 2 of 8"):
        result.best_layers(3)
    assert result.best_block(1) == (5, 6) and result.best_block(2) == (4, 6)
    for n in range(3, 8):
        with pytest.raises(InvalidCut, match="protected"):
            result.best_block(n)
    assert result.best_blocks() == {1: (5, 6), 2: (4, 6)}
    for start, end in result.best_blocks().values():
        assert not protected & set(range(start, end))


def test_best_layers_without_protection_ranks_every_layer():
    result = ImportanceResult("x", blocks_from_layers([3.0, 1.0, 2.0, 0.5]), "s",
                              layer_scores=np.array([3.0, 1.0, 2.0, 0.5]))
    assert result.best_layers(2) == [1, 3] and result.best_layers(4) == [0, 1, 2, 3]


@pytest.mark.slow
def test_default_model_taylor_plus_never_picks_a_protected_layer(default_model):
    model, tokenizer = default_model
    # 8 windows, not the default 32 (48 s): which layers are protected does not depend on how many
    result = prune.score(model, tokenizer, "taylor", calibration=prune.Calibration(n_samples=8), use_cache=False)
    protected = set(result.params["protected"])
    assert protected == {0, 1, 2, 3, 28, 29}
    free = sorted(set(range(30)) - protected, key=lambda i: result.layer_scores[i])
    for k in range(1, 25):
        assert result.best_layers(k) == sorted(free[:k])
    for n, (start, end) in result.best_blocks().items():
        assert end - start == n and not protected & set(range(start, end))
