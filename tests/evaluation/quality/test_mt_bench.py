"""MT-Bench as FastChat defines it: prompts filled from the shipped files, verdicts read, games combined, tallied."""

import json

import pytest

from evaluation.quality import mt_bench
from evaluation.quality.mt_bench import LOSS, TIE, WIN, Game, Graded
from prune.core.errors import InvalidInput

ANSWERS = ("First answer with {braces} kept.", "Second answer.")
OTHER = ("Other first.", "Other second.")


@pytest.fixture(scope="module")
def bench(data_dir):
    return mt_bench.load(data_dir)


@pytest.fixture(scope="module")
def raw(data_dir):
    """The judge prompts and questions as plain JSON, read here apart from the module under test."""
    folder = data_dir / "mt_bench"
    prompts = {p["name"]: p for p in map(json.loads, (folder / "judge_prompts.jsonl").read_text().splitlines())}
    questions = {q["question_id"]: q for q in map(json.loads, (folder / "question.jsonl").read_text().splitlines())}
    refs = {r["question_id"]: r["choices"][0]["turns"]
            for r in map(json.loads, (folder / "reference_answer/gpt-4.jsonl").read_text().splitlines())}
    return prompts, questions, refs


def fill(template: str, **fields) -> str:
    """The template filled by plain replacement (not str.format)."""
    for name, value in fields.items():
        template = template.replace("{" + name + "}", value)
    return template


def question(bench, qid):
    return next(q for q in bench.questions if q.id == qid)


def test_the_shipped_files_load_as_fastchats_80_questions_and_8_prompts(bench):
    assert len(bench.questions) == 80 and len(bench.prompts) == 8
    assert [q.category for q in bench.select(None)] == ["writing", "roleplay", "reasoning", "math", "coding",
                                                        "extraction", "stem", "humanities"]
    assert [q.id for q in bench.select(3)] == [81, 82, 83]
    assert sum(q.reference is not None for q in bench.questions) == 30  # math, reasoning, coding: GPT-4's answers


def test_single_v1_first_turn_is_the_template_filled_by_hand(bench):
    prompt = mt_bench.single_prompt(bench, question(bench, 81), ANSWERS, 1)
    assert prompt.name == "single-v1" and prompt.system == "You are a helpful assistant."
    assert prompt.user == (
        "[Instruction]\nPlease act as an impartial judge and evaluate the quality of the response provided by an AI "
        "assistant to the user question displayed below. Your evaluation should consider factors such as the "
        "helpfulness, relevance, accuracy, depth, creativity, and level of detail of the response. Begin your "
        "evaluation by providing a short explanation. Be as objective as possible. After providing your explanation, "
        "you must rate the response on a scale of 1 to 10 by strictly following this format: \"[[rating]]\", for "
        "example: \"Rating: [[5]]\".\n\n[Question]\nCompose an engaging travel blog post about a recent trip to "
        "Hawaii, highlighting cultural experiences and must-see attractions.\n\n[The Start of Assistant's Answer]\n"
        "First answer with {braces} kept.\n[The End of Assistant's Answer]")
    assert prompt.messages() == [{"role": "system", "content": prompt.system}, {"role": "user", "content": prompt.user}]


def test_single_math_quotes_gpt4s_reference(bench, raw):
    prompts, questions, refs = raw
    prompt = mt_bench.single_prompt(bench, question(bench, 111), ANSWERS, 1)
    assert prompt.name == "single-math-v1"
    assert prompt.user == fill(prompts["single-math-v1"]["prompt_template"], question=questions[111]["turns"][0],
                               ref_answer_1=refs[111][0], answer=ANSWERS[0])
    assert refs[111][0] in prompt.user and "{" not in prompt.user.replace("{braces}", "")


def test_multi_turn_prompts_show_the_whole_conversation(bench, raw):
    prompts, questions, refs = raw
    writing, coding = question(bench, 81), question(bench, 121)
    single = mt_bench.single_prompt(bench, writing, ANSWERS, 2)
    assert single.name == "single-v1-multi-turn"
    assert single.system == prompts["single-v1-multi-turn"]["system_prompt"]
    assert single.user == fill(prompts["single-v1-multi-turn"]["prompt_template"], question_1=writing.turns[0],
                               question_2=writing.turns[1], answer_1=ANSWERS[0], answer_2=ANSWERS[1])
    pair = mt_bench.pair_prompt(bench, coding, ANSWERS, OTHER, 2)
    assert pair.name == "pair-math-v1-multi-turn"
    turns = questions[121]["turns"]
    assert pair.user == fill(prompts["pair-math-v1-multi-turn"]["prompt_template"], question_1=turns[0],
                             question_2=turns[1], ref_answer_1=refs[121][0], ref_answer_2=refs[121][1],
                             answer_a_1=ANSWERS[0], answer_a_2=ANSWERS[1], answer_b_1=OTHER[0], answer_b_2=OTHER[1])


def test_pair_v2_puts_a_then_b(bench, raw):
    prompts, questions, _ = raw
    pair = mt_bench.pair_prompt(bench, question(bench, 91), ANSWERS, OTHER, 1)
    assert pair.name == "pair-v2" and pair.system == prompts["pair-v2"]["system_prompt"]
    assert pair.user == (f"[User Question]\n{questions[91]['turns'][0]}\n\n[The Start of Assistant A's Answer]\n"
                         f"{ANSWERS[0]}\n[The End of Assistant A's Answer]\n\n[The Start of Assistant B's Answer]\n"
                         f"{OTHER[0]}\n[The End of Assistant B's Answer]")


@pytest.mark.parametrize("text, rating", [
    ("Good answer. Rating: [[7]]", 7.0), ("[[7.5]]", 7.5), ("Rating: [7]", 7.0), ("[[8]] then [3]", 8.0),
    ("[2] first, [[9]] later", 9.0),  # the double brackets win wherever they are
    ("Rating: 7/10", None), ("[[seven]]", None), ("", None), ("[[A]]", None),
])
def test_ratings_are_read_with_fastchats_patterns(text, rating):
    assert mt_bench.parse_rating(text) == rating


@pytest.mark.parametrize("text, winner", [
    ("[[A]]", "A"), ("so [[B]].", "B"), ("[[C]]", "tie"), ("[[B]] or [[A]]", "A"),  # looked for in the order A, B, C
    ("[A]", None), ("A is better", None), ("[[D]]", None),
])
def test_verdicts_are_read_as_fastchat_reads_them(text, winner):
    assert mt_bench.parse_winner(text) == winner


# (verdict with the compressed model as A, verdict with the original as A) → the compressed model's outcome
COMBINED = {
    ("A", "B"): WIN, ("B", "A"): LOSS,  # consistent: that winner
    ("A", "A"): TIE, ("B", "B"): TIE,  # each order favours position A: inconsistent, a tie
    ("tie", "tie"): TIE, ("tie", "B"): TIE, ("tie", "A"): TIE,  # a first-order tie is a tie
    ("A", "tie"): TIE, ("B", "tie"): TIE,  # winner then tie: inconsistent
    ("A", None): None, (None, "B"): None, (None, None): None, ("tie", None): None,  # unparsable: left out
}


@pytest.mark.parametrize("first, second", COMBINED)
def test_two_orders_combine_by_fastchats_rule(first, second):
    assert mt_bench.combine(first, second) == COMBINED[(first, second)]


def test_the_tally_per_category_turn_and_overall_by_hand():
    def graded(q, category, turn, text):
        return Graded("cut", q, category, turn, "single-v1", text)

    def game(q, category, turn, first, second):
        return Game("cut", q, category, turn, "pair-v2", first, second)

    items = [graded(81, "writing", 1, "[[8]]"), graded(82, "writing", 1, "[[5]]"), graded(81, "writing", 2, "x"),
             graded(111, "math", 1, "[[2.5]]"),
             game(81, "writing", 1, "[[A]]", "[[B]]"), game(82, "writing", 1, "[[C]]", "[[C]]"),
             game(81, "writing", 2, "[[A]]", "nothing"), game(111, "math", 1, "[[B]]", "[[A]]"),
             Graded("original", 81, "writing", 1, "single-v1", "[[6]]")]
    found = mt_bench.tally(items)
    assert list(found["cut"]) == ["writing", "math", "turn 1", "turn 2", "overall"]
    writing, overall = found["cut"]["writing"], found["cut"]["overall"]
    assert writing["score"] == 6.5 and writing["scored"] == 2 and writing["unparsable_scores"] == 1
    assert (writing["win"], writing["tie"], writing["loss"], writing["unparsable_games"]) == (1, 1, 0, 1)
    assert writing["win_rate"] == 0.5 and writing["win_rate_adjusted"] == 0.75
    assert overall["score"] == pytest.approx((8 + 5 + 2.5) / 3) and overall["unparsable_scores"] == 1
    assert (overall["win"], overall["tie"], overall["loss"]) == (1, 1, 1)
    assert overall["win_rate"] == pytest.approx(1 / 3) and overall["win_rate_adjusted"] == pytest.approx(0.5)
    assert found["cut"]["turn 2"]["score"] is None and found["cut"]["turn 2"]["win_rate"] is None
    assert found["cut"]["math"]["score_stderr"] is None  # one score: no spread
    assert writing["score_stderr"] == pytest.approx(((1.5 ** 2 * 2) / 1) ** 0.5 / 2 ** 0.5)
    assert found["original"]["overall"]["score"] == 6 and found["original"]["overall"]["win_rate"] is None


def test_missing_or_malformed_files_say_so_in_one_line(tmp_path, data_dir):
    with pytest.raises(InvalidInput, match="mt_bench/question.jsonl cannot be read"):
        mt_bench.load(tmp_path)
    with pytest.raises(InvalidInput, match="benchmark data folder"):
        mt_bench.load(None)
    folder = tmp_path / "mt_bench"
    (folder / "reference_answer").mkdir(parents=True)
    for name in mt_bench.FILES:
        (folder / name).write_text((data_dir / "mt_bench" / name).read_text())
    (folder / "question.jsonl").write_text('{"question_id": 1, "category": "math", "turns": ["only one"]}\n')
    with pytest.raises(InvalidInput, match="not FastChat's layout.*question 1 needs 2 turns"):
        mt_bench.load(tmp_path)
