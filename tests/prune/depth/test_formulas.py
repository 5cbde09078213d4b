"""Each method's formula, checked against values computed here by another route.

The known-answer test (an identity layer ranks first) passes for almost any formula; these do
not. Hidden states come from ``output_hidden_states`` and a hook on the final norm's input, the
gradients from a plain ``loss.backward()``, and the arithmetic is numpy in float64: none of
LayerCut's helpers is called. Where two readings of a paper differ (last token or all tokens,
residual stream or normed states) the inputs are built so that they choose different blocks.
"""

from __future__ import annotations

import copy
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import prune
from prune.core.calibration import Calibration, token_windows
from prune.depth.methods import get_method
from prune.depth.methods.context import Context

from conftest import tiny_model

CAL = Calibration(n_samples=6, seq_len=24)
LAYERS = 6


@pytest.fixture(scope="module")
def llama(tiny_tokenizer):
    """A tiny Llama whose final norm scales its channels unevenly, as trained models' norms do.

    With all-ones norm weights the normed last state is the residual divided by a scalar, which
    cosines cannot tell apart; uneven weights make reading the wrong one visible.
    """
    model = tiny_model("llama", layers=LAYERS, seed=3)
    generator = torch.Generator().manual_seed(11)
    with torch.no_grad():
        model.model.norm.weight.copy_(torch.rand(model.config.hidden_size, generator=generator) * 3 + 0.1)
    return model, tiny_tokenizer, token_windows(tiny_tokenizer, CAL)


def states_by_hand(model, ids) -> tuple[np.ndarray, np.ndarray]:
    """([L+1, N, T, D] residual stream, [N, T, D] ``output_hidden_states[-1]``) in float64.

    h_0 … h_{L-1} are ``output_hidden_states[:-1]``; h_L is what enters the final norm, because
    on Llama ``output_hidden_states[-1]`` is the final norm's output, not the residual.
    """
    entering_norm = []
    hook = model.model.norm.register_forward_pre_hook(lambda _m, args: entering_norm.append(args[0]))
    try:
        with torch.no_grad():
            hidden = model(input_ids=ids, output_hidden_states=True, use_cache=False).hidden_states
    finally:
        hook.remove()
    residual = [h.double().numpy() for h in hidden[:-1]] + [entering_norm[0].double().numpy()]
    return np.stack(residual), hidden[-1].double().numpy()


def cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))


def angle(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.arccos(np.clip(cosine(a, b), -1, 1)) / np.pi


def score(llama, method: str, **options):
    model, tokenizer, _ = llama
    return prune.score(model, tokenizer, method, calibration=CAL, use_cache=False, **options)


# ---- Block Influence (ShortGPT, arXiv 2403.03853): BI_i = 1 − E_{X,t}[cos(x_{i,t}, x_{i+1,t})] ----

def test_block_influence_is_one_minus_the_mean_cosine_over_all_tokens(llama):
    h, _ = states_by_hand(llama[0], llama[2])
    expected = [1 - cosine(h[i], h[i + 1]).mean() for i in range(LAYERS)]  # mean over windows and positions
    result = score(llama, "block_influence")
    np.testing.assert_allclose(result.layer_scores, expected, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(result.block_scores[0], expected, rtol=1e-5, atol=1e-7)
    # a block [l, l+n) compares the stream before and after it
    assert result.block_scores[2, 1] == pytest.approx(1 - cosine(h[1], h[4]).mean(), rel=1e-5)


# ---- Relative magnitude: ‖f(x)‖ / ‖x + f(x)‖ with f(x) = h_{l+n} − h_l, mean over tokens ----

def test_relative_magnitude_is_the_mean_ratio_of_the_update_to_the_output(llama):
    h, _ = states_by_hand(llama[0], llama[2])

    def ratio(before, after):
        return (np.linalg.norm(after - before, axis=-1) / np.linalg.norm(after, axis=-1)).mean()

    result = score(llama, "relative_magnitude")
    np.testing.assert_allclose(result.layer_scores, [ratio(h[i], h[i + 1]) for i in range(LAYERS)], rtol=1e-5)
    assert result.block_scores[1, 3] == pytest.approx(ratio(h[3], h[5]), rel=1e-5)
    assert result.block_scores[5, 0] == pytest.approx(ratio(h[0], h[6]), rel=1e-5)


# ---- Angular distance (Gromov et al., arXiv 2403.17887): arccos(cos(x_l, x_{l+n}))/π, last token ----

def test_angular_distance_of_one_block_by_hand(llama):
    h, _ = states_by_hand(llama[0], llama[2])
    result = score(llama, "angular")
    # block [2, 5): the last token's state before layer 2 and after layer 4, averaged over the windows
    assert result.block_scores[2, 2] == pytest.approx(angle(h[2][:, -1], h[5][:, -1]).mean(), rel=1e-5)
    np.testing.assert_allclose(result.layer_scores, [angle(h[i][:, -1], h[i + 1][:, -1]).mean() for i in range(LAYERS)],
                               rtol=1e-5)
    every_token = score(llama, "angular", token="mean")
    assert every_token.block_scores[2, 2] == pytest.approx(angle(h[2], h[5]).mean(), rel=1e-5)


# ---- Residual stream, not normed states ----

def test_the_last_layer_is_compared_with_the_residual_not_the_final_norms_output(llama):
    """``output_hidden_states[-1]`` is normed on Llama; the methods must read the state before the norm."""
    h, normed_last = states_by_hand(llama[0], llama[2])
    assert np.abs(normed_last - h[-1]).max() > 0.1  # the two readings differ on this model
    last = LAYERS - 1
    checks = {
        "block_influence": (lambda a, b: 1 - cosine(a, b).mean(), slice(None)),
        "angular": (lambda a, b: angle(a, b).mean(), -1),
        "relative_magnitude": (lambda a, b: (np.linalg.norm(b - a, axis=-1) / np.linalg.norm(b, axis=-1)).mean(),
                               slice(None)),
    }
    for method, (formula, token) in checks.items():
        got = score(llama, method).layer_scores[last]
        residual = formula(h[last][:, token], h[-1][:, token])
        normed = formula(h[last][:, token], normed_last[:, token])
        assert abs(residual - normed) > 1e-3 * abs(residual), method  # the test can tell them apart
        assert got == pytest.approx(residual, rel=1e-5), method


# ---- Last token vs all tokens: states built so that the two readings choose different layers ----

def rotating_stream() -> tuple[torch.Tensor, np.ndarray]:
    """[4, 2, 4, 2] residual stream of 3 layers on 2 windows × 4 tokens in the plane, and the turns.

    Every token starts at (1, 0); each layer turns the earlier tokens and the last token by its own
    angle (degrees) and scales the stream (which no cosine sees):
    layer 0 turns earlier tokens 60°, the last 10°; layer 1: 5° and 40°; layer 2: 30° and 30°.
    Last token only, layer 0 turns least; over all tokens layer 1 does.
    """
    turns = np.array([[60, 10], [5, 40], [30, 30]], float)  # [layer, (earlier, last)]
    angles = np.zeros((4, 4))  # [depth, token]
    for layer, (earlier, last) in enumerate(turns):
        angles[layer + 1] = angles[layer] + np.array([earlier, earlier, earlier, last])
    radians = np.deg2rad(angles)
    plane = np.stack([np.cos(radians), np.sin(radians)], -1) * np.array([1, 2, 0.5, 3])[:, None, None]  # [4, 4, 2]
    stream = np.broadcast_to(plane[:, None], (4, 2, 4, 2)).copy()
    return torch.tensor(stream, dtype=torch.float32), turns


def on_states(states: torch.Tensor) -> Context:
    """A context whose residual stream is ``states`` (read through the resample view)."""
    return Context(None, None, Calibration(), parent=SimpleNamespace(residuals=[states]), windows=slice(None))


def test_angular_distance_reads_the_last_token_as_the_paper_does():
    states, turns = rotating_stream()
    result = get_method("angular").func(on_states(states))
    np.testing.assert_allclose(result.layer_scores, turns[:, 1] / 180, rtol=1e-5)  # 10°, 40°, 30°
    assert result.block_scores[1, 0] == pytest.approx(50 / 180, rel=1e-5)  # [0, 2): 10° + 40°
    assert result.best_block(1) == (0, 1)
    mean = get_method("angular").func(on_states(states), token="mean")
    np.testing.assert_allclose(mean.layer_scores, (3 * turns[:, 0] + turns[:, 1]) / 4 / 180, rtol=1e-5)
    assert mean.best_block(1) == (1, 2)  # the other reading would choose another layer


def test_block_influence_averages_over_all_tokens_as_the_paper_does():
    states, turns = rotating_stream()
    result = get_method("block_influence").func(on_states(states))
    one_minus_cos = 1 - np.cos(np.deg2rad(turns))  # [layer, (earlier, last)]
    all_tokens = (3 * one_minus_cos[:, 0] + one_minus_cos[:, 1]) / 4
    np.testing.assert_allclose(result.layer_scores, all_tokens, rtol=1e-5)
    assert result.best_block(1) == (1, 2)
    assert np.argmin(one_minus_cos[:, 1]) == 0  # last token only would choose layer 0


# ---- Taylor+ (Shortened LLaMA, arXiv 2402.02834; Nota-NetsPresso/shortened-llm) ----

def test_taylor_is_the_authors_sum_of_elementwise_saliency(llama):
    """The authors' ``anal_block_sensitivity_taylor.py``: per weight ``(W * W.grad).abs().sum(1).sum(0)``
    (a norm's vector: ``.abs().sum(0)``) for every parameter named ``weight``, summed per layer."""
    model, _, ids = llama
    copied = copy.deepcopy(model)
    copied(input_ids=ids, labels=ids, use_cache=False).loss.backward()
    expected, signed = np.zeros(LAYERS), np.zeros(LAYERS)
    for name, param in copied.named_parameters():
        parts = name.split(".")
        if parts[:2] != ["model", "layers"] or "weight" not in parts[-1]:
            continue
        salience = (param.detach() * param.grad).double()
        layer = int(parts[2])
        expected[layer] += float(salience.abs().sum(1).sum(0) if salience.dim() == 2 else salience.abs().sum(0))
        signed[layer] += float(salience.sum().abs())  # |Σ W ⊙ g| per matrix: another reading
    result = score(llama, "taylor", plus=False)
    np.testing.assert_allclose(result.layer_scores, expected, rtol=1e-5)
    assert np.all(np.abs(signed - expected) > 1e-2 * expected)  # the test tells the two readings apart
    assert result.best_block(2) == tuple(min(((s, s + 2) for s in range(LAYERS - 1)),
                                             key=lambda b: expected[b[0]] + expected[b[0] + 1]))
