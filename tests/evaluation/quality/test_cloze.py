"""Cloze scoring by the seed's rule: each candidate's mean token probability, the best one the answer."""

from __future__ import annotations

import os

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch
from lm_eval.api.instance import Instance

import prune
from conftest import tiny_model
from evaluation.quality import cloze, cloze_request, lm_eval_adapter
from evaluation.quality.fast_lm import FastLM
from evaluation.serving.backend import Backend
from prune.core.errors import InvalidInput
from evaluation.core.jobs import final

TASK = "cbt_style_cn"


def mean_probability_by_hand(model, lm: FastLM, left: str, candidate: str) -> float:
    """The rule on one plain forward pass: tokens as lm-eval cuts them, the window HFLM keeps, no packing."""
    context, continuation = lm._encode_pair(left, candidate)
    whole = (context + continuation)[-(lm.max_length + 1):]
    with torch.no_grad():
        logits = model(torch.tensor([whole[:-1]])).logits[0]
    probs = logits.softmax(-1)[-len(continuation):]  # the positions that predict the candidate's tokens
    return float(probs[torch.arange(len(continuation)), torch.tensor(continuation)].mean())


def best_by_hand(model, lm: FastLM, question) -> str:
    scores = [mean_probability_by_hand(model, lm, *cloze_request.parts(question, option)[:2])
              for option in question["options"]]
    return question["options"][scores.index(max(scores))]


def forget_questions() -> None:
    """Drop the questions (and fingerprints) this process has built or loaded."""
    cloze.questions.cache_clear()
    cloze.fingerprint.cache_clear()


@pytest.fixture
def known_answers(monkeypatch):
    """Make ``cbt_style_cn`` ask the given questions (its cached questions forgotten before and after)."""

    def ask(rows):
        monkeypatch.setitem(cloze.CLOZE_TASKS, TASK, cloze.ClozeSource("test", lambda: rows))
        forget_questions()

    yield ask
    forget_questions()


@pytest.fixture(scope="module")
def model():
    return tiny_model("llama", layers=2)


def test_each_candidate_scores_its_mean_token_probability(model, tiny_tokenizer):
    lm = FastLM(model, tiny_tokenizer, batch_size=4)
    left = "The cat sat on the mat and looked at the "
    candidates = ["dog", "garden gate", "x", "rabbit-hole under the hedge"]  # one and several tokens
    requests = [Instance(cloze_request.REQUEST, {}, (left, c, " again."), i) for i, c in enumerate(candidates)]
    assert any(len(lm._encode_pair(left, c)[1]) > 2 for c in candidates)
    found = lm.cloze(requests)  # packed behind one copy of the left text
    for candidate, score in zip(candidates, found):
        assert score == pytest.approx(mean_probability_by_hand(model, lm, left, candidate), rel=1e-5, abs=1e-9)


def test_the_task_through_lm_eval_picks_the_candidate_the_rule_picks_by_hand(model, tiny_tokenizer, known_answers):
    lm = FastLM(model, tiny_tokenizer, batch_size=4)
    rows = [dict(q) for q in cloze.questions(TASK)[:4]]
    for i, row in enumerate(rows):  # the rule's own pick is right in the first two questions, wrong in the others
        best = best_by_hand(model, lm, row)
        row["answer"] = best if i < 2 else next(o for o in row["options"] if o != best)
    known_answers(rows)
    request = lm_eval_adapter.check_request([TASK])
    entry = lm_eval_adapter.evaluate(model, tiny_tokenizer, request, batch_size=4)[TASK]
    assert entry["results"]["acc,none"] == 0.5
    assert entry["n-samples"]["effective"] == 4 and entry["higher_is_better"] == {"acc": True}


def test_a_question_is_the_twenty_sentences_and_the_query_around_the_candidate():
    question = {"sentences": ["One.", "Two."], "question": "She saw the XXXXX there.", "answer": "cat",
                "options": ["cat", "dog"]}
    assert cloze_request.parts(question, "dog") == ("One. Two. She saw the ", "dog", " there.")


def test_the_cut_sweep_scores_a_cloze_task_as_the_cut_model_does(tiny_tokenizer, known_answers):
    backend = Backend(device="cpu")
    spec = backend.models.adopt(tiny_model("llama", 4), tiny_tokenizer, name="tiny-llama-cloze-sweep")
    base = backend.models.pool.peek(spec).model
    lm = FastLM(base, tiny_tokenizer, batch_size=4)
    rows = [dict(q) for q in cloze.questions(TASK)[:4]]
    for row in rows[:2]:  # the original right in half the questions
        row["answer"] = best_by_hand(base, lm, row)
    for row in rows[2:]:
        row["answer"] = next(o for o in row["options"] if o != best_by_hand(base, lm, row))
    known_answers(rows)
    request = lm_eval_adapter.check_request([TASK])
    report = final(backend.sweeps.cuts(spec, request, 2, methods=[], batch_size=4, use_cache=False))
    by_hand = lambda m: lm_eval_adapter.evaluate(m, tiny_tokenizer, request, batch_size=4)[TASK]["results"]["acc,none"]  # noqa: E731
    assert report.sweep.baseline["acc"] == 0.5
    for start, value in zip(report.sweep.starts, report.sweep.metrics["acc"]):
        assert value == by_hand(prune.cut(base, start, start + 2)), start


def test_cloze_tasks_are_refused_with_few_shot_or_lm_evals_own_scorer(model, tiny_tokenizer):
    for data_dir in (None, "any folder"):  # the same reason offline, before the offline few-shot rule
        with pytest.raises(InvalidInput, match="without few-shot examples"):
            lm_eval_adapter.check_request([TASK], num_fewshot=2, data_dir=data_dir)
    request = lm_eval_adapter.check_request([TASK], limit=1)
    with pytest.raises(InvalidInput, match="scored by the fast scorer only; the 'hflm' scorer") as err:
        lm_eval_adapter.evaluate(model, tiny_tokenizer, request, scorer="hflm")
    assert "\n" not in str(err.value)


def test_cbt_from_the_hub_fails_at_once_in_one_line_without_a_network(monkeypatch):
    monkeypatch.setattr("prune.core.loading.hub_reachable", lambda timeout_s=3.0: False)
    forget_questions()
    with pytest.raises(InvalidInput, match=r"CBT \(CN\) is on the Hugging Face hub, which cannot be reached") as err:
        lm_eval_adapter.check_request(["cbt_cn"])
    assert "cbt_style_cn" in str(err.value) and "\n" not in str(err.value)


def test_cbt_from_the_hub_is_asked_in_its_own_fields(monkeypatch, model, tiny_tokenizer):
    rows = [{"sentences": [f"Sentence {i} about a cat ." for i in range(20)], "question": "The XXXXX sat .",
             "answer": "cat", "options": ["cat", "dog", "hat", "mat", "rat", "bat", "owl", "pig", "cow", "hen"]}]
    asked = []

    def load_dataset(path, name, split):
        asked.append((path, name, split))
        return rows

    monkeypatch.setattr("prune.core.loading.hub_reachable", lambda timeout_s=3.0: True)
    monkeypatch.setattr("datasets.load_dataset", load_dataset)
    forget_questions()
    try:
        request = lm_eval_adapter.check_request(["cbt_v"])
        entry = lm_eval_adapter.evaluate(model, tiny_tokenizer, request, batch_size=4)["cbt_v"]
        lm = FastLM(model, tiny_tokenizer, batch_size=4)
        assert asked == [("cam-cst/cbt", "V", "test")]
        assert entry["results"]["acc,none"] == float(best_by_hand(model, lm, rows[0]) == "cat")
    finally:
        forget_questions()


def test_a_hub_error_is_one_line_without_a_path(monkeypatch):
    def refuse(*_args, **_kwargs):
        raise FileNotFoundError("/secret/server/path/cbt")

    monkeypatch.setattr("prune.core.loading.hub_reachable", lambda timeout_s=3.0: True)
    monkeypatch.setattr("datasets.load_dataset", refuse)
    forget_questions()
    with pytest.raises(InvalidInput) as err:
        cloze.questions("cbt_p")
    assert "/secret" not in str(err.value) and "FileNotFoundError" in str(err.value)
