"""Resuming cuts from the original's residual stream is exact; the sweep measures every cut."""

from __future__ import annotations

import os

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import math

import numpy as np
import pytest
from lm_eval.models.huggingface import HFLM

import prune
from evaluation.quality.fast_lm import FastLM, head_input, score_batch
from evaluation.quality.reuse import make_fast_pair, score_cuts
from evaluation.sweeps.cuts import (SweepResult, evaluate_loaded, load_task, rank_agreement,
                                     sweep, sweeping, task_metrics)
from prune.depth.result import blocks_from_layers

from conftest import tiny_model
from test_fast_lm import _recorded, assert_same, requests_for


def token_requests(lm, requests):
    """lm-eval's (strings, context tokens, continuation tokens) triples, as HFLM builds them."""
    triples = []
    lm._loglikelihood_tokens = lambda reqs, **_: triples.extend(reqs) or [(0.0, False)] * len(reqs)
    lm.loglikelihood(requests, disable_tqdm=True)
    del lm._loglikelihood_tokens
    return triples


# ---------------------------------------------------------------- exactness of the reuse path


@pytest.mark.parametrize("arch", ["llama", "gpt2", "qwen2"])
@pytest.mark.parametrize("budget", [1 << 30, 1])  # 1 byte: every batch alone, the prefix rerun per start
def test_score_cuts_equals_scoring_each_cut_model(arch, budget, tiny_tokenizer):
    model = tiny_model(arch, layers=6)
    lm = FastLM(model, tiny_tokenizer, batch_size=2, batch_tokens=48)
    _, _, batches = lm.plan(token_requests(lm, requests_for()))
    assert len(batches) > 2
    cuts = [(s, s + k) for k in (1, 2, 5) for s in range(7 - k)]  # includes cuts ending at the last layer
    base, per_cut = score_cuts(model, batches, cuts, memory_budget_bytes=budget)
    for i, batch in enumerate(batches):
        assert_same(base[i], score_batch(model, batch, head_input(model, batch)), tol=1e-5)
    for start, end in cuts:
        pruned = prune.cut(model, start, end)
        for i, batch in enumerate(batches):
            assert_same(per_cut[(start, end)][i], score_batch(pruned, batch, head_input(pruned, batch)), tol=1e-5)


@pytest.mark.parametrize("budget", [1 << 30, 0])  # 0: nothing kept, the cut is recomputed
def test_pair_path_equals_a_plain_run_of_the_cut(budget, tiny_tokenizer):
    model = tiny_model("llama", layers=5)
    requests = requests_for()
    original, resumed = make_fast_pair(model, tiny_tokenizer, 1, 3, batch_size=2, memory_budget_bytes=budget)
    base = original.loglikelihood(requests, disable_tqdm=True)
    kept = original.hidden_store.used_bytes
    answers = resumed.loglikelihood(requests, disable_tqdm=True)
    assert (kept > 0) == (budget > 0) and original.hidden_store.used_bytes == 0  # each state used once
    assert_same(base, FastLM(model, tiny_tokenizer, 2).loglikelihood(requests, disable_tqdm=True), tol=1e-5)
    pruned = prune.cut(model, 1, 3)
    assert_same(answers, HFLM(pretrained=pruned, tokenizer=tiny_tokenizer, batch_size=2).loglikelihood(
        requests, disable_tqdm=True), tol=1e-5)


# ---------------------------------------------------------------- the sweep and the rank agreement


def _result(acc, baseline=0.5, metric="acc", higher=True):
    return SweepResult(task="t", block_size=2, num_layers=len(acc) + 1, limit=10, starts=list(range(len(acc))),
                       metrics={metric: list(acc)}, baseline={metric: baseline}, higher_is_better={metric: higher})


def _importance(name, layer_scores, protected=()):
    return prune.ImportanceResult(name, blocks_from_layers(np.asarray(layer_scores, float), set(protected)), "s")


def test_rank_agreement_known_answers():
    # acc after removing [s, s+2) for s = 0…3 of a 5-layer model: block 2 is harmless, block 0 ruinous
    result = _result([0.1, 0.3, 0.5, 0.4])
    layers = [5.0, 3.0, 1.0, 0.5, 0.7]  # block sums 8, 4, 1.5, 1.2: orders blocks 0 > 1 > 2 > 3
    agreement = rank_agreement(result, [_importance("good", layers), _importance("bad", layers[::-1]),
                                        _importance("flat", [1.0] * 5)])
    assert agreement["good"] == pytest.approx(0.8)  # swaps only the two mildest blocks
    assert agreement["bad"] < 0
    assert math.isnan(agreement["flat"])
    # a protected layer's blocks are left out of the ranking; a mapping works too
    assert rank_agreement(result, {"p": _importance("p", layers, protected=[4])})["p"] == pytest.approx(1.0)
    # perplexity: lower is better, so the loss is the increase
    ppl = _result([40.0, 25.0, 12.0, 15.0], baseline=10.0, metric="word_perplexity", higher=False)
    assert rank_agreement(ppl, [_importance("good", layers)])["good"] == pytest.approx(0.8)


def test_sweep_result_round_trips_through_json():
    result = _result([0.1, float("nan"), 0.5])
    again = SweepResult.from_json(result.to_json())
    assert again.starts == result.starts and again.acc[0] == 0.1 and math.isnan(again.acc[1])
    assert result.best_start() == 2 and result.worst_start() == 0


def test_sweep_equals_evaluating_each_cut_on_a_tiny_model(tiny_tokenizer, data_dir):
    model = tiny_model("llama", layers=4)
    result = sweep(model, tiny_tokenizer, "hellaswag", 2, limit=6, data_dir=data_dir, batch_size=4,
                   memory_budget_bytes=1)  # forces chunks of one batch and prefix reruns
    assert result.starts == [0, 1, 2] and set(result.metrics) == {"acc", "acc_norm"}
    loaded, name = load_task("hellaswag", data_dir)
    baseline, _ = task_metrics(evaluate_loaded(HFLM(pretrained=model, tokenizer=tiny_tokenizer, batch_size=4),
                                               loaded, 6), name)
    assert result.baseline == baseline
    for i, start in enumerate(result.starts):
        lm = HFLM(pretrained=prune.cut(model, start, start + 2), tokenizer=tiny_tokenizer, batch_size=4)
        measured, _ = task_metrics(evaluate_loaded(lm, loaded, 6), name)
        assert {m: v[i] for m, v in result.metrics.items()} == measured


def test_a_sweep_under_way_yields_the_original_then_each_cut_as_the_finished_sweep_has_it(tiny_tokenizer, data_dir):
    model = tiny_model("llama", layers=4)
    steps = [found[1] for found in sweeping(model, tiny_tokenizer, "hellaswag", [1], limit=6, data_dir=data_dir,
                                            batch_size=4)]
    final = sweep(model, tiny_tokenizer, "hellaswag", 1, limit=6, data_dir=data_dir, batch_size=4)
    assert [step.starts for step in steps] == [[], [0], [0, 1], [0, 1, 2], [0, 1, 2, 3]]
    assert [step.complete for step in steps] == [False] * 4 + [True]
    for step in steps:
        assert step.baseline == final.baseline and step.documents == 6
        assert step.metrics == {m: values[:len(step.starts)] for m, values in final.metrics.items()}


def test_perplexity_sweep_equals_evaluating_each_cut(tiny_tokenizer, data_dir):
    """Rolling log-likelihood tasks sweep too: word perplexity per cut, lower is better."""
    model = tiny_model("llama", layers=3)
    result = sweep(model, tiny_tokenizer, "wikitext", 1, limit=1, data_dir=data_dir, batch_size=4)
    assert result.primary_metric == "word_perplexity" and not result.higher_is_better["word_perplexity"]
    loaded, name = load_task("wikitext", data_dir)
    for start in result.starts:
        lm = HFLM(pretrained=prune.cut(model, start, start + 1), tokenizer=tiny_tokenizer, batch_size=4)
        measured, _ = task_metrics(evaluate_loaded(lm, loaded, 1), name)
        assert {m: v[start] for m, v in result.metrics.items()} == pytest.approx(measured, rel=1e-5)

# ---------------------------------------------------------------- the default model


@pytest.mark.slow
def test_reuse_path_equals_hflm_on_the_cut_default_model(default_model, data_dir):
    model, tokenizer = default_model
    loaded, name = load_task("hellaswag", data_dir)
    original, resumed = make_fast_pair(model, tokenizer, 10, 16)
    evaluate_loaded(original, loaded, 16)
    resumed, answers = _recorded(resumed)
    reused, _ = task_metrics(evaluate_loaded(resumed, loaded, 16), name)
    assert original.hidden_store.refused == 0  # everything came from the kept states

    hflm, reference = _recorded(HFLM(pretrained=prune.cut(model, 10, 16), tokenizer=tokenizer, batch_size=16))
    plain, _ = task_metrics(evaluate_loaded(hflm, loaded, 16), name)
    assert_same(answers, reference)
    assert reused == plain


@pytest.mark.slow
def test_sweep_on_the_default_model_equals_independent_cuts(default_model, data_dir):
    model, tokenizer = default_model
    result = sweep(model, tokenizer, "hellaswag", 20, limit=12, data_dir=data_dir)  # big blocks: cheap suffixes
    assert result.starts == list(range(11)) and len(result.acc) == len(result.acc_norm) == 11
    loaded, name = load_task("hellaswag", data_dir)
    for start in (0, 10):  # the first cut, and one reaching the last layer
        lm = FastLM(prune.cut(model, start, start + 20), tokenizer, 16)
        measured, _ = task_metrics(evaluate_loaded(lm, loaded, 12), name)
        assert {m: v[start] for m, v in result.metrics.items()} == measured
