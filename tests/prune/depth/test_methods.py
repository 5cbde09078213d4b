"""Every importance method, known-answer: a layer made an exact identity is the most removable."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import prune
from prune.core.architectures import decoder_layers
from prune.core.calibration import Calibration, token_windows
from prune.core.errors import InvalidInput, UnknownMethod
from prune.depth.result import ImportanceResult, blocks_from_layers

from conftest import tiny_model

IDENTITY = 5  # not among Taylor+'s protected layers (first 4, last 2) of an 8-layer model
CAL = Calibration(n_samples=8, seq_len=48)


def make_identity(layer: torch.nn.Module) -> None:
    """All-zero weights: every sublayer then adds exactly zero to the residual stream."""
    for p in layer.parameters():
        p.data.zero_()


def train_with_identity(arch: str, tokenizer, steps: int = 300):
    """A tiny model trained on the calibration text with one layer frozen as an identity.

    Training makes every other layer matter (a random model's layers are interchangeable
    noise, so perplexity-based methods would have no right answer).
    """
    model = tiny_model(arch, layers=8, seed=1)
    make_identity(decoder_layers(model)[IDENTITY])
    frozen = set(decoder_layers(model)[IDENTITY].parameters())
    trainable = [p for p in model.parameters() if p not in frozen]
    opt = torch.optim.Adam(trainable, lr=3e-3)
    ids = token_windows(tokenizer, Calibration(n_samples=64, seq_len=48))
    model.train()
    gen = torch.Generator().manual_seed(0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: thread barriers cost more than they save, badly so on a busy CPU
    try:
        for _ in range(steps):
            batch = ids[torch.randint(len(ids), (16,), generator=gen)]
            loss = model(input_ids=batch, labels=batch).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
    finally:
        torch.set_num_threads(threads)
    model.eval()
    model.zero_grad(set_to_none=True)
    assert all(torch.count_nonzero(p) == 0 for p in frozen)
    return model


@pytest.fixture(scope="module", params=["llama", "gpt2"])
def identity_model(request, tiny_tokenizer):
    return train_with_identity(request.param, tiny_tokenizer), tiny_tokenizer


# zigzag reads each layer's norm output, which an all-zero layer (norm weights included) makes
# 0 for every text: its known answers are in test_topology.py.
@pytest.mark.parametrize("method", sorted(set(prune.METHODS) - {"zigzag"}))
def test_every_method_finds_the_identity_layer(identity_model, method):
    model, tokenizer = identity_model
    before = {k: v.clone() for k, v in model.state_dict().items()}
    result = prune.score(model, tokenizer, method, calibration=CAL, use_cache=False)

    assert result.num_layers == 8
    assert result.best_block(1) == (IDENTITY, IDENTITY + 1)
    assert int(np.argmin(result.layer_scores)) == IDENTITY
    assert result.best_layers(1) == [IDENTITY]
    for k, v in model.state_dict().items():  # scoring never changes the model
        assert torch.equal(v, before[k]), k
    assert all(p.grad is None for p in model.parameters())


def test_taylor_plus_protects_first_four_and_last_two(identity_model):
    model, tokenizer = identity_model
    plus = prune.score(model, tokenizer, "taylor", calibration=CAL, use_cache=False)
    assert plus.params["protected"] == [0, 1, 2, 3, 6, 7]
    assert np.isinf(plus.block_scores[0, [0, 1, 2, 3, 6, 7]]).all()
    assert plus.best_block(2) == (4, 6)
    with pytest.raises(prune.core.errors.InvalidCut, match="protected"):
        plus.best_block(3)
    plain = prune.score(model, tokenizer, "taylor", calibration=CAL, use_cache=False, plus=False)
    assert np.isfinite(plain.block_scores[0]).all() and plain.layer_scores[IDENTITY] == 0.0


def test_identity_block_of_two_is_found_by_hidden_state_methods(tiny_tokenizer):
    """Two adjacent identity layers: the 2-layer block starting at the first is the best."""
    model = tiny_model("llama", layers=6, seed=3)
    for i in (2, 3):
        make_identity(decoder_layers(model)[i])
    for method in ("angular", "block_influence", "relative_magnitude"):
        result = prune.score(model, tiny_tokenizer, method, calibration=CAL, use_cache=False)
        assert result.best_block(2) == (2, 4), method
        assert result.block_scores[1, 2] == pytest.approx(0.0, abs=1e-3)


def test_angular_distance_by_hand(tiny_tokenizer):
    """The matrix entry for block [l, l+n) is arccos(cos(h_l, h_{l+n}))/π at the last token."""
    from prune.core.hidden import residual_streams

    model = tiny_model("mistral", layers=4, seed=2)
    result = prune.score(model, tiny_tokenizer, "angular", calibration=CAL, use_cache=False)
    (h,) = residual_streams(model, token_windows(tiny_tokenizer, CAL))  # [5, N, T, D]
    for n, start in [(1, 0), (2, 1), (4, 0), (3, 1)]:
        cos = torch.nn.functional.cosine_similarity(h[start, :, -1], h[start + n, :, -1], dim=-1)
        expected = (torch.arccos(cos.clamp(-1, 1)) / torch.pi).mean().item()
        assert result.block_scores[n - 1, start] == pytest.approx(expected, rel=1e-5)
    assert np.isnan(result.block_scores[2, 2])  # block [2, 5) runs past layer 3
    assert result.best_block(2)[1] - result.best_block(2)[0] == 2


def test_cosine_scores_by_hand(tiny_tokenizer, monkeypatch):
    """Block Influence (every token) and angular distance (mean token), read off one matrix of depth-by-depth cosines
    in chunks of tokens smaller than the calibration, equal ``cosine_similarity`` of each pair of depths."""
    from prune.core.hidden import residual_streams
    from prune.depth.methods import similarity

    monkeypatch.setattr(similarity, "COSINE_CHUNK", 7)  # the chunks end mid-window, the last one short
    model = tiny_model("llama", layers=5, seed=4)
    influence = prune.score(model, tiny_tokenizer, "block_influence", calibration=CAL, use_cache=False)
    angular = prune.score(model, tiny_tokenizer, "angular", calibration=CAL, use_cache=False, token="mean")
    (h,) = residual_streams(model, token_windows(tiny_tokenizer, CAL))  # [6, N, T, D]
    assert h.shape[1] * h.shape[2] % 7
    for n, start in [(1, 0), (1, 4), (2, 3), (5, 0), (3, 1)]:
        cos = torch.nn.functional.cosine_similarity(h[start], h[start + n], dim=-1)  # [N, T]
        assert influence.block_scores[n - 1, start] == pytest.approx((1 - cos).mean().item(), rel=1e-5)
        expected = (torch.arccos(cos.clamp(-1, 1)) / torch.pi).mean().item()
        assert angular.block_scores[n - 1, start] == pytest.approx(expected, rel=1e-5)
    assert np.isnan(influence.block_scores[1, 4]) and np.isnan(angular.block_scores[4, 1])


def test_ppl_exact_blocks_match_a_real_cut(identity_model):
    """The PPL criterion's prefix reuse equals running the actually pruned model."""
    from prune.depth.methods.ppl import _nll

    model, tokenizer = identity_model
    result = prune.score(model, tokenizer, "ppl", calibration=CAL, use_cache=False, exact_blocks=True, max_samples=3)
    ids = token_windows(tokenizer, CAL)[:3]
    for start, end in [(0, 1), (2, 5), (6, 8), (1, 7)]:
        with torch.no_grad():
            direct = np.exp(_nll(prune.cut(model, start, end)(input_ids=ids).logits, ids))
        assert result.block_scores[end - start - 1, start] == pytest.approx(direct, rel=1e-4)


def test_results_are_cached_on_disk_and_round_trip(tiny_tokenizer, monkeypatch):
    model = tiny_model("llama", layers=4)
    calls = []
    spec = prune.depth.methods.METHODS["block_influence"]
    monkeypatch.setitem(prune.depth.methods.METHODS, "block_influence",
                        prune.depth.methods.Method(spec.name, spec.label, lambda ctx: calls.append(1) or spec.func(ctx),
                                             spec.description))
    first = prune.score(model, tiny_tokenizer, "block_influence", calibration=CAL)
    second = prune.score(model, tiny_tokenizer, "block_influence", calibration=CAL)
    assert calls == [1]
    np.testing.assert_array_equal(first.block_scores, second.block_scores)
    assert not first.from_cache and second.from_cache and second.elapsed_s == first.elapsed_s
    assert first.timing() == f"scored in {first.elapsed_s:.1f} s"
    assert second.timing() == f"read from the cache (scored in {first.elapsed_s:.1f} s earlier)"
    assert "from_cache" not in second.to_json()
    other = tiny_model("llama", layers=4, seed=9)  # same name and config, other weights
    prune.score(other, tiny_tokenizer, "block_influence", calibration=CAL)
    assert calls == [1, 1]


def test_result_json_keeps_nan_and_inf():
    result = ImportanceResult("x", blocks_from_layers([3.0, 1.0, 2.0], protected={0}), "s",
                              layer_scores=np.array([3.0, 1.0, 2.0]), cuts={"10%": [1]})
    back = ImportanceResult.from_json(result.to_json())
    np.testing.assert_array_equal(back.block_scores, result.block_scores)
    assert back.cuts == {"10%": [1]} and back.best_block(1) == (1, 2) and back.best_block(2) == (1, 3)


def test_unknown_method_and_option_are_clear_errors(tiny_tokenizer):
    model = tiny_model("llama", layers=2)
    with pytest.raises(UnknownMethod, match="Known methods: angular"):
        prune.score(model, tiny_tokenizer, "magic")
    with pytest.raises(InvalidInput, match="no option"):
        prune.score(model, tiny_tokenizer, "angular", window=3)


def test_score_refuses_an_option_value_the_method_does_not_take_before_any_work(tiny_tokenizer):
    model = tiny_model("llama", layers=2)
    with pytest.raises(InvalidInput, match="PPL criterion \\(Shortened LLaMA\\): max_samples must be a whole number "
                                           "1…4,096, not 0"):
        prune.score(model, tiny_tokenizer, "ppl", max_samples=0, use_cache=False)
    with pytest.raises(InvalidInput, match="token must be one of last, mean, not 'first'"):
        prune.score(model, tiny_tokenizer, "angular", token="first", use_cache=False)


def test_every_whole_number_option_of_every_method_declares_its_values():
    for method in prune.METHODS.values():
        for name, default in method.options.items():
            if isinstance(default, int) and not isinstance(default, bool):
                assert default in method.allowed[name], (method.name, name)
    assert prune.METHODS["sublayer"].sublayers and not prune.METHODS["angular"].sublayers


def test_a_method_registered_without_its_option_values_fails_at_import():
    from prune.depth.methods import register

    def undeclared(ctx, *, steps: int = 3):
        """A method whose option has no range."""

    def outside(ctx, *, steps: int = 3):
        """A method whose default is not among its values."""

    with pytest.raises(ValueError, match="declare the values of its option 'steps'"):
        register("undeclared-test", "Undeclared")(undeclared)
    with pytest.raises(ValueError, match="the default of 'steps' is not among its declared values"):
        register("outside-test", "Outside", allowed={"steps": range(1, 3)})(outside)
    assert "undeclared-test" not in prune.METHODS and "outside-test" not in prune.METHODS


def test_a_shared_context_computes_the_residual_stream_once(tiny_tokenizer, monkeypatch):
    import prune.depth.methods.context as context_module

    calls = []
    real = context_module.residual_streams
    monkeypatch.setattr(context_module, "residual_streams", lambda *a, **k: calls.append(1) or real(*a, **k))
    context = prune.Context(tiny_model("llama", layers=3), tiny_tokenizer, CAL)
    for method in ("angular", "block_influence", "relative_magnitude", "ppl"):
        prune.score(None, None, method, context=context, use_cache=False)
    assert calls == [1]
