"""Bootstrap stability of a block choice: exact fractions on a handmade stream, a sure winner on an identity layer."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import prune
from prune.core.architectures import decoder_layers
from prune.core.calibration import Calibration
from prune.depth.stability import Stability, block_stability, resample_indices

from conftest import tiny_model

# Per-window turn of the stream at each of 3 layers, in units of π. Window kind A barely
# turns at layer 0, kind B at layer 2; angular distance averages over the drawn windows.
TURNS = {"A": [0.0, 0.5, 0.2], "B": [0.3, 0.5, 0.0]}
KINDS = ["A", "A", "B"]


def handmade_context(kinds: list[str]) -> prune.Context:
    """A context whose residual stream [4, N, 1, 2] is unit vectors turned by TURNS per layer."""
    angles = torch.tensor(np.array([np.concatenate([[0.0], np.cumsum(TURNS[k])]) for k in kinds])).T * math.pi  # [4, N]
    ctx = prune.Context(None, None, Calibration())
    ctx.residuals = [torch.stack([angles.cos(), angles.sin()], dim=-1).unsqueeze(2).float()]  # [4, N, 1, 2]
    ctx.input_ids = torch.zeros(len(kinds), 1, dtype=torch.long)
    return ctx


def winner_by_hand(kinds: list[str]) -> tuple[int, int]:
    """The single layer with the smallest mean turn over these windows."""
    mean = np.mean([TURNS[k] for k in kinds], axis=0)
    layer = int(np.argmin(mean))
    return layer, layer + 1


def test_the_winner_flips_with_the_windows_and_fractions_are_exact():
    stability = block_stability(handmade_context(KINDS), "angular", 1, resamples=40, seed=3)

    draws = resample_indices(len(KINDS), 40, seed=3)
    expected = {}
    for draw in draws.tolist():
        block = winner_by_hand([KINDS[i] for i in draw])
        expected[block] = expected.get(block, 0) + 1
    assert set(expected) == {(0, 1), (2, 3)}  # both outcomes occur with this seed
    assert dict(stability.wins) == expected
    assert [count for _, count in stability.wins] == sorted(expected.values(), reverse=True)
    assert sum(stability.fractions.values()) == pytest.approx(1.0)
    assert stability.chosen == winner_by_hand(KINDS) == (0, 1)  # A outnumbers B on all windows
    assert stability.windows == 3 and stability.resamples == 40


def test_two_a_windows_of_three_decide_by_hand():
    """Layer 0 wins exactly when at least two of the three drawn windows are of kind A."""
    for kinds, block in [(["A", "A", "A"], (0, 1)), (["A", "A", "B"], (0, 1)), (["A", "B", "B"], (2, 3)),
                         (["B", "B", "B"], (2, 3))]:
        assert winner_by_hand(kinds) == block
        assert block_stability(handmade_context(kinds), "angular", 1, resamples=5).chosen == block


def test_resamples_are_deterministic_and_drawn_with_replacement():
    draws = resample_indices(8, 50, seed=0)
    assert draws.shape == (50, 8) and draws.min() >= 0 and draws.max() < 8
    assert torch.equal(draws, resample_indices(8, 50, seed=0))
    assert not torch.equal(draws, resample_indices(8, 50, seed=1))
    assert any(len(set(row)) < 8 for row in draws.tolist())  # repeats: with replacement
    first = block_stability(handmade_context(KINDS), "angular", 1, resamples=12, seed=7)
    assert first == block_stability(handmade_context(KINDS), "angular", 1, resamples=12, seed=7)


def test_summary_line():
    stability = Stability("angular", 5, chosen=(13, 18), wins=(((13, 18), 17), ((14, 19), 3)), resamples=20,
                          windows=32)
    assert stability.summary() == "[13, 18) wins 17 of 20 resamples (85 %); runner-up [14, 19) 15 %"
    assert stability.agreement == pytest.approx(0.85)
    other = Stability("angular", 5, chosen=(14, 19), wins=(((13, 18), 20),), resamples=20, windows=32)
    assert other.summary() == "[13, 18) wins 20 of 20 resamples (100 %); without resampling [14, 19)"
    assert other.agreement == 0.0


@pytest.mark.parametrize("method", ["angular", "block_influence", "relative_magnitude"])
def test_an_identity_layer_wins_every_resample(tiny_tokenizer, method):
    model = tiny_model("llama", layers=6, seed=3)
    for p in decoder_layers(model)[2].parameters():
        p.data.zero_()  # layer 2 adds exactly nothing: it is the best single layer on any window
    context = prune.Context(model, tiny_tokenizer, Calibration(n_samples=8, seq_len=32))
    stability = block_stability(context, method, 1, resamples=10)
    assert stability.wins == (((2, 3), 10),)
    assert stability.summary() == "[2, 3) wins 10 of 10 resamples (100 %)"


def test_resampled_views_share_the_residual_stream(tiny_tokenizer, monkeypatch):
    import prune.depth.methods.context as context_module

    calls = []
    real = context_module.residual_streams
    monkeypatch.setattr(context_module, "residual_streams", lambda *a, **k: calls.append(1) or real(*a, **k))
    context = prune.Context(tiny_model("llama", layers=3), tiny_tokenizer, Calibration(n_samples=4, seq_len=16))
    view = context.resample(torch.tensor([3, 3, 0, 1]))
    assert torch.equal(view.input_ids, context.input_ids[[3, 3, 0, 1]])
    assert torch.equal(view.residual[:, 1], context.residual[:, 3])
    block_stability(context, "block_influence", 2, resamples=3)
    assert calls == [1]


def test_zigzag_reads_no_windows_so_it_gets_a_reason(tiny_tokenizer):
    context = prune.Context(tiny_model("llama", layers=4), tiny_tokenizer, Calibration(n_samples=4, seq_len=16))
    stability = block_stability(context, "zigzag", 1, texts=40, max_tokens=8)
    assert stability.resamples == 0 and stability.wins == () and "reads whole texts" in stability.reason
    assert stability.summary().startswith(f"[{stability.chosen[0]}, {stability.chosen[1]}); zigzag reads")


def test_bad_requests_are_clear_errors():
    with pytest.raises(prune.core.errors.InvalidInput, match="at least one resample"):
        block_stability(handmade_context(KINDS), "angular", 1, resamples=0)
    with pytest.raises(prune.core.errors.UnknownMethod):
        block_stability(handmade_context(KINDS), "magic", 1)


@pytest.mark.parametrize("method", ["angular", "block_influence", "relative_magnitude", "ppl", "taylor"])
def test_a_resample_of_every_window_in_order_scores_as_the_context_does(tiny_tokenizer, method):
    context = prune.Context(tiny_model("llama", layers=4), tiny_tokenizer, Calibration(n_samples=6, seq_len=16))
    func = prune.METHODS[method].func
    whole = func(context).block_scores
    np.testing.assert_array_equal(func(context.resample(torch.arange(6))).block_scores, whole)
