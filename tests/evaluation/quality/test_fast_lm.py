"""FastLM gives HFLM's log-likelihoods, greedy flags and metrics, request for request."""

from __future__ import annotations

import os

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
from lm_eval.api.instance import Instance
from lm_eval.models.huggingface import HFLM

from evaluation.quality.fast_lm import FastLM, _split, distinct_pairs, make_fast, plan_batches

from conftest import TINY_CONFIGS, tiny_model

CONTEXTS = [
    "The cat sat on the",
    "In the beginning the model was small and",
    "Layers can be removed from a transformer when ",  # trailing space moves to the continuation
    "",  # empty context: HFLM conditions on the prefix token
]
ENDINGS = [" mat.", " roof of the house", " floor", "x", " mat."]  # a duplicate request too


def requests_for(contexts=CONTEXTS, endings=ENDINGS) -> list[Instance]:
    pairs = [(c, e) for c in contexts for e in endings]
    return [Instance("loglikelihood", {}, pair, i) for i, pair in enumerate(pairs)]


def rolling_requests(texts) -> list[Instance]:
    return [Instance("loglikelihood_rolling", {}, (t,), i) for i, t in enumerate(texts)]


def assert_same(fast, slow, tol=1e-4):
    """Same log-likelihoods and greediness (and mean probabilities, where both are Answers)."""
    assert len(fast) == len(slow)
    for x, y in zip(fast, slow):
        assert abs(x[0] - y[0]) <= tol, (x, y)
        assert x[1] == y[1]
        if len(x) > 2 and len(y) > 2:
            assert abs(x[2] - y[2]) <= tol, (x, y)


# ---------------------------------------------------------------- planning


def test_plan_scores_every_distinct_pair_once_with_its_own_targets():
    requests = [(None, [1, 2, 3], [4, 5]), (None, [1, 2, 3], [6]), (None, [7], [8, 9, 10]),
                (None, [1, 2, 3], [4, 5]), (None, [9, 9, 9, 9, 1, 2, 3], [4, 5])]
    pairs, where = distinct_pairs(requests, max_length=4)
    # the last request is cut to max_length + 1 tokens from the left: same pair as the first
    assert where == [0, 1, 2, 0, 0] and len(pairs) == 3
    batches = plan_batches(pairs, batch_tokens=64)
    scored = sorted(p for b in batches for p in b.pairs)
    assert scored == [0, 1, 2]
    for batch in batches:
        flat = batch.input_ids.flatten()
        for p, (a, b) in zip(batch.pairs, batch.spans):
            assert batch.targets[a:b].tolist() == list(pairs[p][1])
            # each target is predicted by the token before it in the pair's own sequence
            sequence = list(pairs[p][0]) + list(pairs[p][1])
            assert flat[batch.positions[batch.select[a:b]]].tolist() == sequence[len(pairs[p][0]) - 1: -1]


def test_batches_respect_the_token_budget_and_split_long_groups():
    pairs = [((1,) * 10, (2,) * 30 + (i,)) for i in range(8)]
    batches = plan_batches(pairs, batch_tokens=100, row_cap=70)
    assert sorted(p for b in batches for p in b.pairs) == list(range(8))
    assert all(b.input_ids.shape[1] <= 70 for b in batches)
    assert all(b.num_tokens <= 100 or b.input_ids.shape[0] == 1 for b in batches)
    for b in batches:  # the shared context's last position is scored once per row
        scored = len(b.targets) - len(b.spans) + b.input_ids.shape[0]
        assert len(b.positions) == len(set(b.positions.tolist())) == scored


def test_batch_split_minimises_padding():
    assert _split([10, 10, 10, 10], budget=40) == [(0, 4)]
    assert _split([100, 20, 20, 20], budget=1000) == [(0, 1), (1, 4)]  # not one batch 4 × 100 wide
    assert _split([50, 50, 50], budget=100) == [(0, 1), (1, 3)] or _split([50, 50, 50], budget=100) == [(0, 2), (2, 3)]


# ---------------------------------------------------------------- equality with HFLM (tiny models)


@pytest.mark.parametrize("arch", sorted(TINY_CONFIGS))
def test_loglikelihoods_equal_hflm_on_every_architecture(arch, tiny_tokenizer):
    model = tiny_model(arch, layers=3)
    requests = requests_for()
    slow = HFLM(pretrained=model, tokenizer=tiny_tokenizer, batch_size=4).loglikelihood(requests, disable_tqdm=True)
    fast = FastLM(model, tiny_tokenizer, batch_size=4).loglikelihood(requests, disable_tqdm=True)
    assert_same(fast, slow)


def test_truncation_and_rolling_windows_equal_hflm(tiny_tokenizer):
    """Past max_length contexts are cut from the left; long texts become rolling windows."""
    model = tiny_model("llama", layers=2)
    text = (" ".join(CONTEXTS) + " ") * 6
    long_requests = requests_for([text[:300], text[:280]], ENDINGS)
    slow_lm = HFLM(pretrained=model, tokenizer=tiny_tokenizer, batch_size=3, max_length=48)
    fast_lm = FastLM(model, tiny_tokenizer, batch_size=3, max_length=48)
    assert_same(fast_lm.loglikelihood(long_requests, disable_tqdm=True),
                slow_lm.loglikelihood(long_requests, disable_tqdm=True))
    texts = rolling_requests([text, text[:90], "short"])
    slow = slow_lm.loglikelihood_rolling(texts, disable_tqdm=True)
    fast = fast_lm.loglikelihood_rolling(texts, disable_tqdm=True)
    assert fast == pytest.approx(slow, rel=1e-5)


def test_make_fast_builds_a_fastlm(tiny_tokenizer):
    lm = make_fast(tiny_model("llama", layers=2), tiny_tokenizer, 8)
    assert isinstance(lm, FastLM) and lm.batch_size == 8


def test_building_a_scorer_on_an_in_memory_model_prints_no_in_memory_notes(tiny_tokenizer, caplog, capfd):
    """HFLM's two notes about an in-memory ``pretrained`` are dropped while a scorer is built; nothing else is."""
    import logging

    from evaluation.quality.lm_eval_adapter import SCORERS

    logger = logging.getLogger(HFLM.__module__)
    model = tiny_model("llama", layers=2)
    with caplog.at_level(logging.WARNING, logger=HFLM.__module__):
        for make in SCORERS.values():
            make(model, tiny_tokenizer, 4)
        logger.warning("`pretrained` model kwarg is not of type `str` (logged after building: kept)")
    messages = [r.getMessage() for r in caplog.records]
    assert not any("already-initialized" in m for m in messages)
    assert messages.count("`pretrained` model kwarg is not of type `str` (logged after building: kept)") == 1
    assert len(messages) == 1 and not logger.filters  # the filter is gone once the scorer is built
    assert "not of type `str`. Many" not in capfd.readouterr().err


# ---------------------------------------------------------------- the default model, real tasks


def _recorded(lm):
    """Wrap the LM so every loglikelihood answer lm-eval receives is also kept, in order."""
    answers = []
    for name in ("loglikelihood", "loglikelihood_rolling"):
        method = getattr(lm, name)

        def record(requests, disable_tqdm=False, _method=method):
            out = _method(requests, disable_tqdm=True)
            answers.extend(out)
            return out

        setattr(lm, name, record)
    return lm, answers


@pytest.mark.slow
@pytest.mark.parametrize("task,limit,max_length", [("hellaswag", 20, None), ("arc_easy", 20, None),
                                                   ("wikitext", 1, 512)])  # 1,407 tokens: 3 windows
def test_fast_scorer_equals_hflm_on_the_default_model(default_model, task, limit, max_length):
    from evaluation.sweeps.cuts import evaluate_loaded, load_task, task_metrics

    model, tokenizer = default_model
    loaded, name = load_task(task)
    runs = {}
    for label, lm in (("fast", FastLM(model, tokenizer, 16, max_length=max_length)),
                      ("hflm", HFLM(pretrained=model, tokenizer=tokenizer, batch_size=16, max_length=max_length))):
        lm, answers = _recorded(lm)
        metrics, _ = task_metrics(evaluate_loaded(lm, loaded, limit), name)
        runs[label] = metrics, answers
    (fast_metrics, fast), (slow_metrics, slow) = runs["fast"], runs["hflm"]
    if task == "wikitext":
        assert fast == pytest.approx(slow, rel=1e-5)
        assert fast_metrics == pytest.approx(slow_metrics, rel=1e-4)
    else:
        assert_same(fast, slow)
        assert fast_metrics == slow_metrics  # identical accuracies
