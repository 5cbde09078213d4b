"""The backend's MT-Bench job on a tiny chat model: greedy answers through the chat template, cached; a scripted
endpoint's verdicts tallied by hand; its key sent as a Bearer token and nowhere else."""

import json

import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

from evaluation.quality import chat, mt_bench
from evaluation.quality.judge import choose
from evaluation.serving.backend import Backend
from evaluation.serving.mt_bench import check_request
from evaluation.core.pool import ModelSpec
from prune.core.errors import InvalidInput
from prune.core.recipe import Recipe
from own_tasks import chat_folder, greedy_by_hand, preferred, score, scripted_judge

SECRET = "sk-test-SECRET-0123456789"
CUT = {"cut": Recipe.block(4, 1, 3)}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return chat_folder(tmp_path_factory.mktemp("chat-llama"))


@pytest.fixture
def backend(tmp_path, monkeypatch, data_dir):
    monkeypatch.setenv("LAYERCUT_CACHE", str(tmp_path / "cache"))
    return Backend(data_dir=str(data_dir), device="cpu")


def request(backend, url, **settings):
    settings = {"limit": 3, "answer_tokens": 6, **settings}
    return check_request(backend.models.data_dir, judge=choose(url), **settings)


def test_answers_are_greedy_chat_replies_and_the_tally_is_the_scripts_by_hand(backend, folder, monkeypatch):
    monkeypatch.setenv("LAYERCUT_JUDGE_API_KEY", SECRET)
    with scripted_judge() as (url, judge):
        run = backend.mt_bench.run(ModelSpec(folder), CUT, request(backend, url))
    questions = backend_questions(backend)[:3]
    model, tokenizer = AutoModelForCausalLM.from_pretrained(folder).eval(), AutoTokenizer.from_pretrained(folder)
    for q in questions:  # the original's answers: the chat template, greedy, up to the cap, stripped
        assert run.answers["original"][q.id] == [greedy_by_hand(model, tokenizer, chat.conversation(q.turns[:1], []),
                                                                6)]
    assert len(run.graded) == 3 * 2 and len(run.games) == 3  # each model graded, the cut's games (two orders each)
    asked = {json.dumps(r["body"]["messages"]) for r in judge.requests}
    assert judge.calls == len(asked) == run.done["judgments"] <= 12  # an identical prompt is asked once (cached)
    sent = judge.requests[0]
    assert sent["path"] == "/v1/chat/completions" and sent["headers"]["Authorization"] == f"Bearer {SECRET}"
    assert sent["body"]["temperature"] == 0 and sent["body"]["max_tokens"] == 2048 and sent["body"]["model"] == "gpt-4"
    assert sent["body"]["messages"][0] == {"role": "system", "content": "You are a helpful assistant."}
    expected = {"original": [], "cut": []}
    outcomes = []
    for q in questions:
        mine, theirs = run.answers["cut"][q.id][0], run.answers["original"][q.id][0]
        for label in expected:
            expected[label].append(score(run.answers[label][q.id][0]))
        first, second = preferred(mine, theirs), preferred(theirs, mine)  # a consistent judge: the longer wins
        outcomes.append({("[[A]]", "[[B]]"): "win", ("[[B]]", "[[A]]"): "loss"}.get((first, second), "tie"))
    tally = run.tally()
    for label, scores in expected.items():
        parsed = [s for s in scores if s is not None]
        overall = tally[label]["overall"]
        assert overall["scored"] == len(parsed) and overall["unparsable_scores"] == scores.count(None)
        assert overall["score"] == (pytest.approx(sum(parsed) / len(parsed)) if parsed else None)
    cut = tally["cut"]["overall"]
    assert [cut["win"], cut["tie"], cut["loss"]] == [outcomes.count(o) for o in ("win", "tie", "loss")]
    assert cut["win_rate"] == pytest.approx(outcomes.count("win") / 3)
    assert list(tally["cut"]) == ["writing", "turn 1", "overall"]
    entries = run.entries()
    assert "win_rate,none" not in entries["original"]["results"] and entries["cut"]["n-samples"]["effective"] == 3


def test_a_second_run_generates_and_judges_nothing_and_the_key_is_nowhere(backend, folder, monkeypatch, tmp_path,
                                                                          capsys, caplog):
    monkeypatch.setenv("LAYERCUT_JUDGE_API_KEY", SECRET)
    replies = []
    real = chat.reply
    monkeypatch.setattr(chat, "reply", lambda *a, **k: replies.append(1) or real(*a, **k))
    with scripted_judge() as (url, judge):
        first = backend.mt_bench.run(ModelSpec(folder), CUT, request(backend, url, limit=2))
        calls = judge.calls
        second = backend.mt_bench.run(ModelSpec(folder), CUT, request(backend, url, limit=2))
        assert judge.calls == calls == 8
    assert len(replies) == 4 and first.done == {"answers": 4, "judgments": 8}
    assert second.done == {"answers": 0, "judgments": 0} and second.answers == first.answers
    assert second.to_json()["tally"] == first.to_json()["tally"]
    written = [p.read_text(errors="replace") for p in (tmp_path / "cache").rglob("*") if p.is_file()]
    assert written and any("mt_bench_judgment" in text for text in written)
    out, err = capsys.readouterr()
    assert not [t for t in [*written, out, err, caplog.text, json.dumps(first.to_json())] if SECRET in t]


def test_two_turns_answer_the_second_after_the_models_own_first(backend, folder, monkeypatch):
    seen = []
    real = chat.reply
    monkeypatch.setattr(chat, "reply", lambda model, tok, messages, *a: seen.append(messages) or real(model, tok,
                                                                                                    messages, *a))
    with scripted_judge() as (url, judge):
        run = backend.mt_bench.run(ModelSpec(folder), {}, request(backend, url, limit=1, turns=2))
    q = backend_questions(backend)[0]
    answers = run.answers["original"][q.id]
    assert seen[1] == [{"role": "user", "content": q.turns[0]}, {"role": "assistant", "content": answers[0]},
                       {"role": "user", "content": q.turns[1]}]
    prompts = [r["body"]["messages"][-1]["content"] for r in judge.requests]
    assert mt_bench.single_prompt(run.request.bench, q, answers, 2).user == prompts[1]
    graded = run.tally()["original"]
    assert list(graded) == ["writing", "turn 1", "turn 2", "overall"] and graded["overall"]["win_rate"] is None


def test_a_self_judged_run_asks_the_original_greedily(backend, folder):
    run = backend.mt_bench.run(ModelSpec(folder), {}, request(backend, None, limit=1, judge_tokens=5))
    model, tokenizer = AutoModelForCausalLM.from_pretrained(folder).eval(), AutoTokenizer.from_pretrained(folder)
    q = backend_questions(backend)[0]
    prompt = mt_bench.single_prompt(run.request.bench, q, run.answers["original"][q.id], 1)
    assert run.graded[0].judgment == greedy_by_hand(model, tokenizer, prompt.messages(), 5)
    assert run.to_json()["judge"]["judge"] == "the original itself (self-judged)"


@pytest.mark.parametrize("settings, message", [
    ({"turns": 3}, "MT-Bench has 2 turns"), ({"limit": 0}, "number of questions ≥ 1"),
    ({"answer_tokens": 0}, "An answer's token cap must be 1…"),
])
def test_bad_settings_are_one_line(backend, settings, message):
    with pytest.raises(InvalidInput, match=message):
        request(backend, None, **settings)


def test_a_model_without_a_chat_template_is_refused_in_one_line(backend, tiny_folder):
    with pytest.raises(InvalidInput, match="no chat template"):
        backend.mt_bench.run(ModelSpec(tiny_folder), {}, request(backend, None, limit=1))


def backend_questions(backend):
    return mt_bench.load(backend.models.data_dir).questions
