"""CBT-style cloze questions built from the book LayerCut ships: the Children's Book Test's format, not CBT.

The Children's Book Test (Hill et al. 2016, "The Goldilocks Principle") takes 21 consecutive sentences
of a children's book, blanks one word of the 21st and offers 10 candidates of the same kind from the
text. CBT itself (``cam-cst/cbt`` on the hub) is used when a network is there; offline, this module
builds questions in its field layout (``sentences``, ``question`` with ``XXXXX``, ``answer``,
``options``) from ``prune/core/texts/alice.txt`` (*Alice's Adventures in Wonderland*, public domain) by a fixed
rule. CBT chose words by a part-of-speech tagger; LayerCut ships none, so the kinds here are
defined by what can be read off the text alone:

- **P** (prepositions): lowercase words on a closed list (:data:`PREPOSITIONS`), whatever their use;
- **NE** (names): words written with a capital (and not all in capitals) inside a sentence, not as its first
  word, at least :data:`MIN_NAME_USES` times and more often than in lowercase (Alice, Hatter, Rabbit…);
- **CN** (common nouns): lowercase words that follow one of :data:`DETERMINERS` and are then followed by
  punctuation or one of :data:`NOUN_FOLLOWERS` at least :data:`MIN_NOUN_USES` times, and at least as often as
  by other words ("the table." counts; "the little door" makes *little* no noun);
- CBT's fourth kind, verbs, needs a tagger and is not built.

A question: every sentence, within one chapter, that has 20 sentences before it in that chapter is a
query, those 20 its context. Its answer is the *last* word of the kind in the query that also occurs
in the context; the other 9 options are drawn (``random.Random`` seeded by kind, chapter and sentence)
from the other distinct words of that kind in the context and the query. A query with no such word, or
fewer than 9 others, gives no question. Options are listed alphabetically.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from prune.core.calibration import BOOK

KINDS = ("CN", "NE", "P")
CONTEXT_SENTENCES = 20
OPTIONS = 10
BLANK = "XXXXX"  # CBT's own placeholder
MIN_NAME_USES = 3
MIN_NOUN_USES = 2
PREPOSITIONS = frozenset("""about above across after against along among around at before behind below beneath
beside between beyond by down during for from in inside into like near of off on onto out outside over past round
since through till to toward towards under until up upon with within without""".split())
DETERMINERS = ("the", "a", "an", "his", "her", "its", "their", "my", "your", "this")
# Words that may follow a noun directly (besides punctuation and PREPOSITIONS).
NOUN_FOLLOWERS = PREPOSITIONS | {"and", "or", "but", "was", "were", "is", "are", "had", "has", "that", "which", "who"}

_CHAPTER = re.compile(r"^CHAPTER [IVXLC]+$")
_DECORATION = re.compile(r"^[*\s]+$|^THE END$")
# A sentence ends at . ! or ? (and closing quotes or brackets) before whitespace and a capital (maybe quoted).
_SENTENCE_END = re.compile(r"(?<=[.!?])(['\")\]]*)\s+(?=['\"(\[]*[A-Z])")
_WORD = re.compile(r"[A-Za-z]+")
_PUNCTUATION_NEXT = re.compile(r"\s*[.,;:!?]")


def chapters(text: str) -> list[list[str]]:
    """The book's chapters as lists of sentences: front matter, headings, titles and decoration dropped."""
    found: list[list[str]] = []  # each chapter's paragraphs; nothing before the first heading
    title_next = False
    for line in (raw.strip() for raw in text.splitlines()):
        if _CHAPTER.match(line):
            found.append([])
            title_next = True
        elif line and title_next:  # the first line after a heading is the chapter's title
            title_next = False
        elif line and found and not _DECORATION.match(line):
            found[-1].append(line)
    return [sentences(" ".join(paragraphs)) for paragraphs in found if paragraphs]


def sentences(text: str) -> list[str]:
    """``text`` split where a sentence ends (see ``_SENTENCE_END``); closing quotes stay with their sentence."""
    parts, start = [], 0
    for end in _SENTENCE_END.finditer(text):
        parts.append(text[start:end.end(1)])
        start = end.end()
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def words(sentence: str) -> list[re.Match]:
    """The sentence's words: runs of letters (so "Alice's" holds "Alice", "rabbit-hole" two words)."""
    return list(_WORD.finditer(sentence))


class Kinds:
    """Which word forms of a book are of which kind, by the rules in this module's docstring."""

    def __init__(self, book: list[list[str]]):
        capital, lower, noun_like, other = Counter(), Counter(), Counter(), Counter()
        for sentence in (s for chapter in book for s in chapter):
            found = words(sentence)
            for n, match in enumerate(found):
                word = match.group()
                if word.islower():
                    lower[word] += 1
                elif n > 0 and word[0].isupper() and not word.isupper():
                    capital[word] += 1
                if word.islower() and n > 0 and found[n - 1].group().lower() in DETERMINERS:
                    after = found[n + 1].group() if n + 1 < len(found) else ""
                    marked = _PUNCTUATION_NEXT.match(sentence, match.end())
                    (noun_like if marked or after in NOUN_FOLLOWERS else other)[word] += 1
        self.names = frozenset(w for w, n in capital.items() if n >= MIN_NAME_USES and n > lower[w.lower()])
        self.nouns = frozenset(w for w, n in noun_like.items()
                               if n >= MIN_NOUN_USES and n >= other[w] and w not in PREPOSITIONS)

    def of(self, word: str) -> str | None:
        """The kind of one written word form, or None."""
        if word in self.names:
            return "NE"
        if word in self.nouns:
            return "CN"
        return "P" if word in PREPOSITIONS else None


def questions(book: list[list[str]], kind: str) -> Iterator[dict]:
    """Every question of ``kind`` the book gives, in reading order, in CBT's field layout."""
    kinds = Kinds(book)
    for c, chapter in enumerate(book):
        for i in range(CONTEXT_SENTENCES, len(chapter)):
            question = _question(chapter[i - CONTEXT_SENTENCES:i], chapter[i], kind, kinds,
                                 random.Random(f"{kind}-{c}-{i}"))
            if question is not None:
                yield question


def _question(context: list[str], query: str, kind: str, kinds: Kinds, rng: random.Random) -> dict | None:
    """One question, or None when the query has no answer in the context or the context too few options."""
    seen = {m.group() for s in context for m in words(s) if kinds.of(m.group()) == kind}
    blanks = [m for m in words(query) if kinds.of(m.group()) == kind and m.group() in seen]
    if not blanks:
        return None
    answer = blanks[-1]
    pool = seen | {m.group() for m in words(query) if kinds.of(m.group()) == kind}
    others = sorted(pool - {answer.group()})
    if len(others) < OPTIONS - 1:
        return None
    options = sorted([answer.group(), *rng.sample(others, OPTIONS - 1)])
    return {"sentences": list(context), "question": query[:answer.start()] + BLANK + query[answer.end():],
            "answer": answer.group(), "options": options}


def build(kind: str, path: Path = BOOK) -> list[dict]:
    """All questions of one kind from a book file (by default the shipped one)."""
    return list(questions(chapters(path.read_text(encoding="utf-8")), kind))
