"""Surgical rank search: the candidate ranks, the tolerance, the loop on a score whose answer is known by hand, and a
real perplexity search on disjoint splits of a tiny model."""

from __future__ import annotations

import math

import pytest
import torch

from evaluation.quality import lm_eval_adapter, perplexity
from evaluation.sweeps.search_splits import perplexity_splits, split_indices, task_splits
from prune.lowrank import decomposition as lowrank
from prune.core.architectures import decoder_layers
from prune.core.calibration import BUILTIN_TEXTS, Calibration, token_windows
from prune.core.errors import InvalidInput
from prune.core.factored import Factored
from prune.lowrank.rank_search import Tolerance, candidates, searching, surgical_search
from prune.lowrank.step import Decompose
from prune.core.recipe import Recipe

from conftest import tiny_model

CAL = Calibration(source="text", text=BUILTIN_TEXTS[0].read_text()[:8000], n_samples=8, seq_len=64)
# The tiny Llama (hidden 32, 2 KV heads of 8, MLP 64): break-even ranks d·k/(d + k) and the candidates
# 1, ⌊0.1κ⌋, …, ⌊κ⌋ worked out by hand.
BY_HAND = {
    "self_attn.q_proj": [1, 3, 4, 6, 8, 9, 11, 12, 14, 16],  # κ = 32·32/64 = 16
    "self_attn.k_proj": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10],  # κ = 16·32/48 = 10.67
    "mlp.gate_proj": [1, 2, 4, 6, 8, 10, 12, 14, 17, 19, 21],  # κ = 64·32/96 = 21.33
}


def factored_ranks(model) -> dict[tuple[int, str], int]:
    return {(i, p): m.rank for i, layer in enumerate(decoder_layers(model)) for p, m in layer.named_modules()
            if isinstance(m, Factored)}


def test_candidates_are_one_then_tenths_of_the_break_even_rank():
    assert candidates(32, 32) == BY_HAND["self_attn.q_proj"]
    assert candidates(16, 32) == BY_HAND["self_attn.k_proj"]
    assert candidates(64, 32) == BY_HAND["mlp.gate_proj"]
    assert candidates(64, 32, steps=4) == [1, 5, 10, 16, 21]


def test_the_tolerance_by_hand():
    accuracy = Tolerance(higher_is_better=True, delta=0.02)
    assert accuracy.allows(0.48, 0.50, 7) and not accuracy.allows(0.479, 0.50, 1)
    ppl = Tolerance(higher_is_better=False, growth=0.1)
    assert ppl.allows(12.0, 10.0, 2) and not ppl.allows(12.2, 10.0, 2)  # 10 · 1.1² = 12.1
    assert ppl.allows(12.2, 10.0, 3)  # 13.31
    for bad in (-0.1, True, "0.1", math.inf):
        with pytest.raises(InvalidInput):
            Tolerance(delta=bad)


def test_each_projection_gets_the_lowest_candidate_that_keeps_the_score_last_layer_first():
    """A search score that drops by one for every factored projection below the rank it needs: with delta 0 each
    projection takes the smallest candidate at or above its need, or stays dense when that is κ itself."""
    model = tiny_model("llama", 2)
    need = {"self_attn.q_proj": 5, "self_attn.k_proj": 10, "mlp.gate_proj": 0}
    visited = []

    def search(m):
        return -sum(rank < need[path] for (_, path), rank in factored_ranks(m).items())

    def test(m):
        return float(sum(p.numel() for p in m.parameters()))

    result = surgical_search(model, search=search, test=test, space="weight", projections=list(need),
                             progress=lambda fraction, message: visited.append(message))
    # q_proj: 6 is the first candidate ≥ 5; k_proj: only κ's floor 10 passes, no saving → dense; gate_proj: 1
    assert result.ranks == {(0, "self_attn.q_proj"): 6, (1, "self_attn.q_proj"): 6, (0, "mlp.gate_proj"): 1,
                            (1, "mlp.gate_proj"): 1}
    assert factored_ranks(result.model) == result.ranks and lowrank.ranks_of(result.model) == result.ranks
    assert [(p.layer, p.path) for p in result.points] == [(1, "mlp.gate_proj"), (1, "self_attn.k_proj"),
                                                          (1, "self_attn.q_proj"), (0, "mlp.gate_proj"),
                                                          (0, "self_attn.k_proj"), (0, "self_attn.q_proj")]
    assert [p.rank for p in result.points] == [1, None, 6, 1, None, 6]
    params = [p.params for p in result.points]
    assert params == sorted(params, reverse=True) and params[-1] == result.params[1] < result.params[0]
    saved = 2 * (32 * 32 - 6 * 64) + 2 * (64 * 32 - 1 * 96)  # by hand: two q_proj at rank 6, two gate_proj at 1
    assert result.params[0] - result.params[1] == saved
    assert result.test == (test(model), test(result.model)) and result.search == (0, 0)
    assert not factored_ranks(model) and len(visited) == 8 and visited[-1].endswith("(6 of 6)")


def test_a_perplexity_search_on_disjoint_splits_keeps_the_bound_and_the_original(tiny_tokenizer):
    model = tiny_model("llama", 2)
    reference = {n: t.clone() for n, t in model.state_dict().items()}
    ids = token_windows(tiny_tokenizer, Calibration(source="builtin", n_samples=12, seq_len=64))
    search_ids, test_ids = ids[:4], ids[4:]  # disjoint windows

    def perplexity(windows):
        def score(m):
            with torch.no_grad():
                return math.exp(float(m(input_ids=windows, labels=windows).loss))
        return score

    tolerance = Tolerance(higher_is_better=False, growth=0.002)
    result = surgical_search(model, tiny_tokenizer, search=perplexity(search_ids), test=perplexity(test_ids),
                             tolerance=tolerance, calibration=CAL, test_each_layer=True)
    assert result.ranks and result.params[1] < result.params[0]
    assert result.search[1] <= result.search[0] * 1.002 ** 14
    assert result.search[1] == perplexity(search_ids)(result.model)
    assert result.test == (perplexity(test_ids)(model), perplexity(test_ids)(result.model))
    assert [p.test is not None for p in result.points] == [False] * 6 + [True] + [False] * 6 + [True]
    for visited, point in enumerate(result.points, start=1):
        assert point.search <= result.search[0] * 1.002 ** visited
    assert all(torch.equal(reference[n], t) for n, t in model.state_dict().items())
    # the recipe step of the result rebuilds the searched model exactly: the same bases, read on the original
    step = result.step(CAL)
    assert not step.sequential and step.ranks == tuple((i, p, r) for (i, p), r in sorted(result.ranks.items()))
    rebuilt = Recipe((step,)).apply(model, tiny_tokenizer)
    assert factored_ranks(rebuilt) == result.ranks
    with torch.no_grad():
        assert torch.equal(rebuilt(test_ids).logits, result.model(test_ids).logits)
    sequential = Recipe((Decompose.of("feature", ranks=result.ranks, calibration=CAL),)).apply(model, tiny_tokenizer)
    with torch.no_grad():  # read layer by layer on the decomposed outputs instead: another model
        assert not torch.equal(sequential(test_ids).logits, result.model(test_ids).logits)


def test_the_search_streams_the_original_then_each_projection_then_the_result():
    model = tiny_model("llama", 2)
    items = list(searching(model, search=lambda m: -sum(p.numel() for p in m.parameters()), test=lambda m: 0.0,
                           space="weight", projections=["q_proj"], tolerance=Tolerance(delta=1e12)))
    first, *points, result = items
    assert (first.layer, first.rank, first.params, first.test) == (-1, None, result.params[0], 0.0)
    assert points == list(result.points) and [p.layer for p in points] == [1, 0]
    assert [p.rank for p in points] == [1, 1] and result.params[1] == result.params[0] - 2 * (32 * 32 - 64)


def test_raising_in_progress_stops_the_search(tiny_tokenizer):
    model = tiny_model("llama", 2)

    def cancel(fraction, _message):
        if fraction > 0.2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        surgical_search(model, search=lambda m: 1.0, test=lambda m: 1.0, space="weight", progress=cancel)
    with pytest.raises(InvalidInput, match="steps"):
        surgical_search(model, search=lambda m: 1.0, test=lambda m: 1.0, space="weight", steps=0)
    with pytest.raises(InvalidInput, match="tokenizer"):
        surgical_search(model, search=lambda m: 1.0, test=lambda m: 1.0)


# ---------------------------------------------------------------- the splits from the data folder


def test_split_indices_are_disjoint_shuffled_and_cover_everything():
    search, test = split_indices(50, 0.2)
    assert len(search) == 10 and len(test) == 40 and sorted(search + test) == list(range(50))
    assert split_indices(50, 0.2) == (search, test) and search != list(range(10))
    for bad in (0, 1, 1.5, True):
        with pytest.raises(InvalidInput):
            split_indices(50, bad)


def test_the_task_splits_add_up_to_the_accuracy_on_all_their_documents(tiny_tokenizer, data_dir):
    model = tiny_model("llama", 2)
    search, test = task_splits("arc_easy", tiny_tokenizer, data_dir, share=0.5, limit=20)
    whole = lm_eval_adapter.evaluate(model, tiny_tokenizer, lm_eval_adapter.check_request(
        ["arc_easy"], limit=20, data_dir=data_dir))["arc_easy"]["results"]["acc_norm,none"]
    assert (search(model) * 10 + test(model) * 10) / 20 == pytest.approx(100 * whole)


def test_the_perplexity_splits_are_the_first_windows_and_the_rest(tiny_tokenizer, data_dir):
    model = tiny_model("llama", 2)
    search, test = perplexity_splits(tiny_tokenizer, data_dir, seq_len=64, windows=10, share=0.3)
    ids = perplexity.token_ids(tiny_tokenizer, perplexity.wikitext2_rows(data_dir))

    def measured(windows):
        return perplexity.measure_perplexity(model, tiny_tokenizer, ids, label="m", seq_lens=(64,), bos=(False,),
                                             max_windows=windows)[0].value

    assert search(model) == pytest.approx(measured(3), rel=1e-6)
    nll = (3 * math.log(search(model)) + 7 * math.log(test(model))) / 10  # every window predicts 63 tokens
    assert math.exp(nll) == pytest.approx(measured(10), rel=1e-6)
