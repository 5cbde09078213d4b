"""CBT-style questions: the book's sentences, the word kinds and the questions, by the documented rule."""

from __future__ import annotations

import random

import pytest

from evaluation.quality import cbt_style
from evaluation.quality.cbt_style import BLANK, Kinds, chapters, sentences, words


def test_a_sentence_ends_at_a_stop_before_a_capital_and_keeps_its_closing_quote():
    text = "'Oh dear!' said the Rabbit. 'I shall be late!' (when she thought it over) It was. Then Alice ran."
    assert sentences(text) == ["'Oh dear!' said the Rabbit.",
                               "'I shall be late!' (when she thought it over) It was.",
                               "Then Alice ran."]


def test_chapters_drop_the_front_matter_the_titles_and_the_decoration():
    text = ("A BOOK\n\nBy Someone\n\nCHAPTER I\n\nThe First Title\n\nOne here. Two there.\n\n* * * *\n\n"
            "Three now.\n\nCHAPTER II\n\nAnother Title\n\nFour.\n\nTHE END\n")
    assert chapters(text) == [["One here.", "Two there.", "Three now."], ["Four."]]


def test_words_are_runs_of_letters():
    assert [m.group() for m in words("Alice's rabbit-hole, 'VERY' odd!")] == ["Alice", "s", "rabbit", "hole",
                                                                               "VERY", "odd"]


def test_the_kinds_follow_the_rules_counted_by_hand():
    book = [[
        "Then Dinah came.", "She saw Dinah and Dinah saw her.",  # Dinah: 3 times capitalised inside a sentence
        "He met the Rabbit, the Rabbit and a Rabbit.", "It was a rabbit.",  # 3 capitalised, 1 lowercase: a name
        "She saw the Queen and the Queen.",  # only twice: not a name
        "Alice ran.",  # only first in its sentence: not a name
        "She found the table. It was the table, again.",  # 'the table.' and 'the table,': a noun
        "The little door and the little cat ran.",  # 'little' before a word twice, never before a stop
        "It was a little.",  # once before a stop: 1 < 2, not a noun
        "His cat sat upon the mat in the cat box.",  # 'his cat' + 'sat': other; 'the mat in': noun-like once
    ]]
    kinds = Kinds(book)
    assert kinds.names == {"Dinah", "Rabbit"}
    # table: 2 noun-like; mat: 1 (< 2); cat: 'his cat sat' and 'the cat box' → other; little: 1 vs 2
    assert kinds.nouns == {"table"}
    assert [kinds.of(w) for w in ("Dinah", "table", "upon", "cat", "Alice")] == ["NE", "CN", "P", None, None]


CONTEXT_PREPOSITIONS = ["about", "above", "across", "after", "against", "along", "among", "into", "at", "with",
                        "behind", "below"]


def _context(prepositions: list[str]) -> list[str]:
    """20 context sentences, one per preposition, the rest without any."""
    return [f"She looked {p} the hill." for p in prepositions] + ["It rained."] * (20 - len(prepositions))


def test_a_question_blanks_the_last_word_of_the_kind_the_context_has_and_offers_nine_others():
    context = _context(CONTEXT_PREPOSITIONS)
    query = "Then she went into the garden with her sister over there."
    kinds = Kinds([context + [query]])
    question = cbt_style._question(context, query, "P", kinds, random.Random(0))
    # the query's prepositions: into, with, over; the context has into and with, so 'with' is the last
    assert question["answer"] == "with"
    assert question["question"] == "Then she went into the garden XXXXX her sister over there."
    assert question["sentences"] == context
    options = question["options"]
    assert len(set(options)) == 10 and options == sorted(options) and "with" in options
    assert set(options) <= set(CONTEXT_PREPOSITIONS) | {"over"}  # drawn from the context and the query
    assert cbt_style._question(context, query, "P", kinds, random.Random(0)) == question  # the draw is seeded


def test_no_question_without_an_answer_in_the_context_or_without_nine_other_candidates():
    context = _context(CONTEXT_PREPOSITIONS)
    kinds = Kinds([context])
    assert cbt_style._question(context, "Nothing to see here.", "P", kinds, random.Random(0)) is None
    few = _context(CONTEXT_PREPOSITIONS[:9])  # the answer and 8 others
    assert cbt_style._question(few, "She went about it.", "P", Kinds([few]), random.Random(0)) is None
    enough = _context(CONTEXT_PREPOSITIONS[:10])  # the answer and 9 others
    assert cbt_style._question(enough, "She went about it.", "P", Kinds([enough]), random.Random(0)) is not None


@pytest.mark.parametrize("kind", cbt_style.KINDS)
def test_every_question_from_the_shipped_book_keeps_the_rule(kind):
    book = chapters(cbt_style.BOOK.read_text(encoding="utf-8"))
    kinds = Kinds(book)
    found = cbt_style.build(kind)
    assert found and found == cbt_style.build(kind)  # some, and the same each time
    for q in found:
        assert len(q["sentences"]) == 20 and q["question"].count(BLANK) == 1
        context_words = {m.group() for s in q["sentences"] for m in words(s)}
        query_words = {m.group() for m in words(q["question"].replace(BLANK, q["answer"]))}
        assert q["answer"] in context_words
        assert len(set(q["options"])) == 10 and q["options"] == sorted(q["options"]) and q["answer"] in q["options"]
        assert all(kinds.of(o) == kind and o in context_words | query_words for o in q["options"])
