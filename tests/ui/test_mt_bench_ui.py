"""Judged answers (MT-Bench) and C4 perplexity in the Benchmarks tab, through the page's handlers on a tiny chat model:
the per-category table against the tally worked out by hand from a scripted judge's verdicts, the viewer's answers
and judge texts, unparsable verdicts counted, a shared server's refusals, two visitors' runs kept apart, and C4
against the backend's own result or the one line saying where its file goes."""

from __future__ import annotations

import math
from types import SimpleNamespace

import gradio as gr
import pytest

from evaluation.measure import estimate
from evaluation.quality import c4
from evaluation.serving.backend import Backend
from ui.inputs import Policy
from ui.judge_text import judge_label
from ui.page.estimates import Seconds, columns
from ui.handlers import Context
from ui.session import Session

from conftest import handlers_on, tiny_model, update_of
from own_tasks import chat_tokenizer, preferred, rating, score, scripted_judge, write_shard

TOKENS = 8  # an answer cap at which the scripted judge rates two answers of each model and not a third (its length
# a multiple of 3)
C4_TEXT = "The cat sat on the mat and looked at the door for a long while."


@pytest.fixture(scope="module")
def data(tmp_path_factory, data_dir):
    """A data folder with FastChat's MT-Bench files and a small C4 shard."""
    folder = tmp_path_factory.mktemp("data")
    (folder / "mt_bench").symlink_to(data_dir / "mt_bench", target_is_directory=True)
    write_shard(folder / c4.LOCAL, [C4_TEXT] * 200)
    return folder


@pytest.fixture(scope="module")
def served(data):
    """A backend serving a tiny 4-layer chat Llama, and a visitor's session with layers 1–2 cut in A."""
    backend = Backend(data_dir=str(data), device="cpu")
    spec = backend.models.adopt(tiny_model("llama", 4), chat_tokenizer(), name="tiny-chat-llama")
    return backend, Session().for_model(spec, backend.models.load(spec)).with_block(1, 3, "by hand")


@pytest.fixture(scope="module")
def judge():
    with scripted_judge() as found:
        yield found


@pytest.fixture(scope="module")
def ran(page, served, judge):
    """The run's outputs: 3 questions, the first turn, judged by the scripted endpoint."""
    backend, session = served
    return handlers_on(page, backend).mt_bench.run(session, 3, 1, judge[0], "", TOKENS, 8)


def by_hand(answers: dict) -> dict:
    """The table's rows worked out from the scripted judge's rule: each answer's rating, and each game the longer
    answer wins in both orders, else a tie."""
    rows = {}
    for label, title in (("original", "Original model"), ("A", "A: cut 1–2")):
        scores = [score(found[0]) for found in answers[label].values()]
        parsed = [s for s in scores if s is not None]
        mean = sum(parsed) / len(parsed)
        spread = math.sqrt(sum((s - mean) ** 2 for s in parsed) / (len(parsed) - 1) / len(parsed))
        row = [title, f"{mean:.2f} ± {spread:.2f}", f"{scores.count(None)} of 3"]
        assert len(parsed) == 2  # the cap's point: two rated, one unparsable
        if label == "original":
            rows[label] = row + ["—"] * 4
            continue
        outcomes = []
        for question, (mine,) in answers["A"].items():
            theirs = answers["original"][question][0]
            outcomes.append({("[[A]]", "[[B]]"): "win", ("[[B]]", "[[A]]"): "loss"}.get(
                (preferred(mine, theirs), preferred(theirs, mine)), "tie"))
        wins, ties, losses = (outcomes.count(o) for o in ("win", "tie", "loss"))
        rows[label] = row + [f"{wins} / {ties} / {losses}", f"{100 * wins / 3:.1f} %",
                             f"{100 * (wins + ties / 2) / 3:.1f} %", "0"]
    return rows


def test_the_table_per_category_is_the_scripted_judges_tally_by_hand(page, ran):
    box = page.benchmarks.mt_bench
    answers = ran[box.shown].run.answers
    assert set(answers) == {"original", "A"} and [len(a) for a in answers.values()] == [3, 3]
    expected = by_hand(answers)
    table = ran[box.table]["value"]
    assert list(table.columns)[:3] == ["group", "model", "score (1–10)"]
    rows = table.values.tolist()
    assert [row[0] for row in rows] == ["writing"] * 2 + ["turn 1"] * 2 + ["overall"] * 2  # the first 3 are writing
    for row in rows:
        assert row[1:] == expected["original" if row[1] == "Original model" else "A"]
    summary = ran[box.summary]
    assert summary.startswith("**Judged by gpt-4 at http://127.0.0.1:") and "Self-judged" not in summary
    assert f"3 question(s) × 1 turn(s) · answers up to {TOKENS} tokens" in summary


def test_unparsable_ratings_are_counted_and_said_in_the_viewer(page, served, ran):
    box = page.benchmarks.mt_bench
    run = ran[box.shown].run
    unparsable = {label: [q for q, (answer,) in found.items() if score(answer) is None]
                  for label, found in run.answers.items()}
    assert all(unparsable.values())  # at these caps each model has an answer the script cannot rate
    assert (f"original {len(unparsable['original'])} of 3 ratings; A {len(unparsable['A'])} of 3 ratings, 0 of 3 "
            "games") in ran[box.summary]
    shown = handlers_on(page, served[0]).mt_bench.question(ran[box.shown], unparsable["A"][0])
    verdict = update_of(shown, box.columns["A"].verdict)["value"]
    assert verdict.startswith("Turn 1: unparsable (no [[rating]] in the verdict)\nNo rating, sorry.")


def test_the_viewer_shows_each_columns_exact_answer_and_the_judges_text(page, served, ran):
    box = page.benchmarks.mt_bench
    judged = ran[box.shown]
    run, question = judged.run, judged.run.request.questions[1]
    shown = handlers_on(page, served[0]).mt_bench.question(judged, question.id)
    assert shown[box.asked] == f"**Question {question.id} · writing**\n\n**Turn 1:** {question.turns[0]}"
    mine, theirs = run.answers["A"][question.id][0], run.answers["original"][question.id][0]
    for label, answer in (("original", theirs), ("A", mine)):
        column = box.columns[label]
        assert shown[column.answer]["value"] == answer and shown[column.answer]["visible"]
        assert rating(answer) in shown[column.verdict]["value"]  # the judge's own text under its rating
    assert shown[box.columns["A"].answer]["label"] == "A: cut 1–2"
    games = shown[box.columns["A"].verdict]["value"]
    assert f"A's answer as A:\nCompared. {preferred(mine, theirs)}" in games
    assert f"The original's answer as A:\nCompared. {preferred(theirs, mine)}" in games
    assert shown[box.columns["B"].answer]["visible"] is False  # an empty slot shows no column
    assert "original" not in shown[box.columns["original"].verdict]["value"]  # the original plays no games


def test_the_first_question_shows_when_the_run_ends_and_the_dropdown_lists_those_answered(page, ran):
    box = page.benchmarks.mt_bench
    questions = ran[box.shown].run.request.questions
    assert ran[box.question]["value"] == questions[0].id
    assert [value for _title, value in ran[box.question]["choices"]] == [q.id for q in questions]
    assert ran[box.question]["choices"][0][0].startswith(f"{questions[0].id} · writing · ")
    assert ran[box.columns["A"].answer]["value"] == ran[box.shown].run.answers["A"][questions[0].id][0]


def test_a_self_judged_run_says_so_beside_the_results(page, served):
    backend, session = served
    out = handlers_on(page, backend).mt_bench.run(session, 1, 1, "", "", 4, 4)
    box = page.benchmarks.mt_bench
    assert out[box.shown].run.request.judge.words() == "the original itself (self-judged)"
    assert "**Self-judged**" in out[box.summary] and "mean little" in out[box.summary]
    assert out[box.measured.note] == "Measured on **tiny-chat-llama** · Original · A: cut 1–2"


def test_a_shared_server_refuses_a_judge_url_unless_its_operator_allows_it(page, served, judge, monkeypatch):
    backend, session = served
    monkeypatch.delenv("LAYERCUT_ALLOW_JUDGE_URL", raising=False)
    shared = handlers_on(page, backend, Policy(shared=True)).mt_bench
    with pytest.raises(gr.Error, match="This shared server calls no judge endpoint") as caught:
        shared.run(session, 1, 1, judge[0], "", TOKENS, 8)
    assert "\n" not in str(caught.value)
    with pytest.raises(gr.Error, match="is not a model this server can load"):
        shared.run(session, 1, 1, "/etc", "", TOKENS, 8)  # no server folder as a judge either
    monkeypatch.setenv("LAYERCUT_ALLOW_JUDGE_URL", "1")
    out = shared.run(session, 1, 1, judge[0], "", TOKENS, 8)
    assert out[page.benchmarks.mt_bench.shown].run.request.judge.url.startswith("http://127.0.0.1:")
    assert "no endpoint URL on this shared server" in judge_label(False) and "http://" in judge_label(True)


@pytest.mark.parametrize("settings, words", [
    ((2.5, 1, "", "", 4, 4), "Questions must be a whole number"),
    ((1, 3, "", "", 4, 4), "Turns must be 1…2"),
    ((1, 1, "", "", 0, 4), "Answer tokens must be 1…4,096"),
    ((81, 1, "", "", 4, 4), "Questions must be 0…80"),
    ((1, 1, "http://u:p@host/v1", "", 4, 4), "without a user, password or query"),
])
def test_bad_settings_are_one_line(page, served, settings, words):
    backend, session = served
    with pytest.raises(gr.Error, match=words) as caught:
        handlers_on(page, backend).mt_bench.run(session, *settings)
    assert "\n" not in str(caught.value)


def test_a_missing_mt_bench_folder_names_no_server_folder(page, tmp_path, served):
    _backend, session = served
    empty = Backend(data_dir=str(tmp_path), device="cpu")
    with pytest.raises(gr.Error, match="MT-Bench is missing") as caught:
        handlers_on(page, empty).mt_bench.run(session, 1, 1, "", "", 4, 4)
    assert str(tmp_path) not in str(caught.value) and "<data folder>/mt_bench/question.jsonl" in str(caught.value)


def test_two_visitors_keep_their_own_runs(page, served, judge):
    backend, session = served
    handlers, box = handlers_on(page, backend).mt_bench, page.benchmarks.mt_bench
    other = session.with_cut(None, "A").with_block(0, 2, "another visitor")
    mine = handlers.run(session, 2, 1, judge[0], "", TOKENS, 8, request=SimpleNamespace(session_hash="visitor-1"))
    theirs = handlers.run(other, 2, 1, judge[0], "", TOKENS, 8, request=SimpleNamespace(session_hash="visitor-2"))
    assert mine[box.shown].titles["A"] == "A: cut 1–2" and theirs[box.shown].titles["A"] == "A: cut 0–1"
    assert set(mine[box.table]["value"]["model"]) == {"Original model", "A: cut 1–2"}
    assert set(theirs[box.table]["value"]["model"]) == {"Original model", "A: cut 0–1"}
    first = mine[box.shown].run.request.questions[0].id
    shown = handlers.question(mine[box.shown], first)  # the first visitor's viewer, after the second one's run
    assert shown[box.columns["A"].answer]["value"] == mine[box.shown].run.answers["A"][first][0]
    assert shown[box.columns["A"].answer]["label"] == "A: cut 1–2"


def test_the_estimate_is_the_runs_work_over_this_machines_rates(page, served):
    backend, session = served
    seconds = Seconds(Context(backend))
    found = seconds.mt_bench(session, 2, 1, "", "", 16, 8)
    assert found == estimate.mt_bench(session.info.rates, columns(session), questions=2, turns=1, answer_tokens=16,
                                      judge_tokens=8) > 0
    assert seconds.mt_bench(session, 0, 2, "", "", 16, 8) == estimate.mt_bench(  # 0: the first of 8 categories
        session.info.rates, columns(session), questions=8, turns=2, answer_tokens=16, judge_tokens=8)
    other = seconds.mt_bench(session, 2, 1, "some/judge", "", 16, 8)
    assert other == estimate.mt_bench(session.info.rates, columns(session), questions=2, turns=1, answer_tokens=16,
                                      judge_tokens=None) < found  # another judge's speed is not known here
    lines = handlers_on(page, backend).estimates
    line = next(line for line in lines.lines if line.job == "mt_bench")
    assert "the judge not counted" in lines.line(line)(session, 2, 1, "some/judge", "", 16, 8)
    assert lines.line(line)(session, 2, 1, "", "", 16, 8).startswith("Estimate: at most")


def test_c4_in_the_perplexity_choice_equals_the_backends_c4_results(page, served):
    backend, session = served
    out = handlers_on(page, backend).benchmarks.perplexity(session, "512", 1, "c4")
    found = update_of(out, page.session).results
    expected = backend.measure.c4_results(session.spec, session.variants(), limit=1)
    c4_rows = {m.model: m for m in found if m.name == "c4 perplexity"}
    assert set(c4_rows) == {"original", "A"}
    for label, measured in c4_rows.items():
        assert measured.value == expected[label]["results"]["perplexity,none"] and measured.higher_is_better is False
    table = out[page.benchmarks.results.table]["value"]
    assert "c4 perplexity" in set(table["Metric"])


def test_c4_offline_without_its_file_is_one_line_saying_where_it_goes(page, served, tmp_path, monkeypatch):
    _backend, session = served
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    empty = Backend(data_dir=str(tmp_path), device="cpu")
    with pytest.raises(gr.Error) as caught:
        handlers_on(page, empty).benchmarks.perplexity(session, "512", 1, "c4")
    assert caught.value.message == ("C4 perplexity needs allenai/c4's en/c4-validation.00000-of-00008.json.gz: the Hub "
                                 "cannot be reached, so download it and put it at <data folder>/c4/"
                                 "c4-validation.00000-of-00008.json.gz.")


def test_the_window_is_wikitexts_to_choose(page):
    from ui.page.benchmarks import window_for

    assert window_for("c4")["interactive"] is False and window_for("wikitext2")["interactive"] is True
    assert page.benchmarks.ppl_text.value == "wikitext2"
