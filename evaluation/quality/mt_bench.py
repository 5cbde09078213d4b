"""MT-Bench as FastChat's ``llm_judge`` defines it: its questions and judge prompts, the verdicts and their tally.

Read from FastChat's own files in the data folder (``mt_bench/question.jsonl``, ``judge_prompts.jsonl``,
``reference_answer/gpt-4.jsonl``). Following ``fastchat/llm_judge/common.py``, ``gen_judgment.py`` and
``show_result.py``:

- **Which prompt.** Questions of the categories in :data:`NEED_REF_CATS` are judged with the ``-math-`` prompts,
  which quote GPT-4's reference answers; the others with ``single-v1`` / ``pair-v2``. The second turn uses the
  ``-multi-turn`` prompt, which shows the whole conversation. Each template is filled by ``str.format`` with
  FastChat's field names; the judge gets the prompt's system message, then the filled template as the user's.
- **Single-answer grading.** The rating is the first ``[[x]]`` in the judgment, else the first ``[x]``;
  a judgment with neither is unparsable (FastChat's -1) and left out of the mean.
- **Pairwise against the original.** Each game is judged twice, the compressed model first as assistant A, then
  as B. ``[[A]]``, ``[[B]]`` and ``[[C]]`` (a tie) are looked for in that order. Two verdicts that name the same
  winner give that winner; a tie in the first order, or verdicts that disagree, count as a tie; a game with an
  unparsable verdict in either order is left out and counted as unparsable.
- **The tally.** Win rate = wins / (wins + ties + losses); the adjusted win rate counts a tie as half a win.

Where LayerCut differs: a rating is read with ``float`` (FastChat's ``ast.literal_eval`` fails on "[[07]]"); the
reference answers are GPT-4's whichever model judges (FastChat keeps them per judge and ships only GPT-4's).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from prune.core.errors import InvalidInput
from prune.core.paths import digest

TASK = "mt_bench"
FOLDER = Path("mt_bench")
FILES = ("question.jsonl", "judge_prompts.jsonl", "reference_answer/gpt-4.jsonl")
NEED_REF_CATS = ("math", "reasoning", "coding")  # FastChat's categories judged against a reference answer
PROMPTS = {"single": ("single-v1", "single-math-v1"), "pair": ("pair-v2", "pair-math-v1")}  # (general, reference)
MULTI_TURN = "-multi-turn"
ONE_SCORE = re.compile(r"\[\[(\d+\.?\d*)\]\]")  # FastChat's one_score_pattern
ONE_SCORE_BACKUP = re.compile(r"\[(\d+\.?\d*)\]")  # ... and its fallback
VERDICTS = (("[[A]]", "A"), ("[[B]]", "B"), ("[[C]]", "tie"))  # looked for in this order
WIN, TIE, LOSS = "win", "tie", "loss"
OVERALL = "overall"


@dataclass(frozen=True)
class Question:
    id: int
    category: str
    turns: tuple[str, ...]  # the user's turns, in order
    reference: tuple[str, ...] | None = None  # GPT-4's answers to the turns (NEED_REF_CATS only)


@dataclass(frozen=True)
class JudgePrompt:
    name: str
    system: str
    template: str


@dataclass(frozen=True)
class Prompt:
    """One filled judge prompt: what a judge is asked."""

    name: str
    system: str
    user: str

    def messages(self) -> list[dict]:
        return [{"role": "system", "content": self.system}, {"role": "user", "content": self.user}]


@dataclass(frozen=True)
class Bench:
    questions: tuple[Question, ...]
    prompts: Mapping[str, JudgePrompt]
    fingerprint: str  # of the three files' contents

    def select(self, limit: int | None) -> tuple[Question, ...]:
        """The first ``limit`` questions in file order; None: the first question of each category."""
        if limit is not None:
            return self.questions[:limit]
        firsts: dict[str, Question] = {}
        for question in self.questions:
            firsts.setdefault(question.category, question)
        return tuple(firsts.values())


def load(data_dir: Path | None) -> Bench:
    """FastChat's files from ``data_dir/mt_bench``, checked once here: a missing or malformed file is one line."""
    if data_dir is None:
        raise InvalidInput("MT-Bench reads FastChat's files from a benchmark data folder (mt_bench/ in it): set "
                           "LAYERCUT_DATA_DIR or --data_dir.")
    folder = Path(data_dir) / FOLDER
    texts = {}
    for name in FILES:
        try:
            texts[name] = (folder / name).read_text(encoding="utf-8")
        except OSError:
            raise InvalidInput(f"MT-Bench is missing: {folder / name} cannot be read (the data folder needs "
                               "FastChat's mt_bench/ files).") from None
    try:
        return _parse(texts)
    except (ValueError, KeyError, TypeError, IndexError) as err:
        raise InvalidInput(f"MT-Bench's files in {folder} are not FastChat's layout ({type(err).__name__}: "
                           f"{' '.join(str(err).split())[:120]}).") from None


def _rows(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _parse(texts: dict[str, str]) -> Bench:
    question_rows, prompt_rows, reference_rows = (_rows(texts[name]) for name in FILES)
    references = {int(r["question_id"]): tuple(str(t) for t in r["choices"][0]["turns"]) for r in reference_rows}
    questions = []
    for row in question_rows:
        qid, category = int(row["question_id"]), str(row["category"])
        turns = tuple(str(t) for t in row["turns"])
        needs = category in NEED_REF_CATS
        if len(turns) != 2 or (needs and len(references.get(qid, ())) != 2):
            raise ValueError(f"question {qid} needs 2 turns" + (" and GPT-4's 2 reference answers" if needs else ""))
        questions.append(Question(qid, category, turns, references[qid] if needs else None))
    prompts = {str(r["name"]): JudgePrompt(str(r["name"]), str(r["system_prompt"]), str(r["prompt_template"]))
               for r in prompt_rows}
    wanted = [base + end for kind in PROMPTS.values() for base in kind for end in ("", MULTI_TURN)]
    if missing := [name for name in wanted if name not in prompts]:
        raise KeyError(f"judge prompts {', '.join(missing)}")
    return Bench(tuple(questions), prompts, digest(texts))


# ---------------------------------------------------------------- prompts


def prompt_name(kind: str, question: Question, turn: int) -> str:
    """FastChat's judge prompt for a ``kind`` ("single" or "pair") of judgment of ``question``'s ``turn`` (1, 2)."""
    general, reference = PROMPTS[kind]
    return (reference if question.category in NEED_REF_CATS else general) + (MULTI_TURN if turn == 2 else "")


def _references(question: Question) -> dict[str, str]:
    return {} if question.reference is None else {"ref_answer_1": question.reference[0],
                                                   "ref_answer_2": question.reference[1]}


def single_prompt(bench: Bench, question: Question, answers: Sequence[str], turn: int) -> Prompt:
    """The single-answer grading prompt for ``answers`` (the model's answers to turns 1…``turn``)."""
    if turn == 1:
        fields = {"question": question.turns[0], "answer": answers[0]}
    else:
        fields = {"question_1": question.turns[0], "question_2": question.turns[1], "answer_1": answers[0],
                  "answer_2": answers[1]}
    return _filled(bench.prompts[prompt_name("single", question, turn)], {**fields, **_references(question)})


def pair_prompt(bench: Bench, question: Question, answers_a: Sequence[str], answers_b: Sequence[str],
                turn: int) -> Prompt:
    """The pairwise prompt with assistant A's and assistant B's answers to turns 1…``turn``."""
    if turn == 1:
        fields = {"question": question.turns[0], "answer_a": answers_a[0], "answer_b": answers_b[0]}
    else:
        fields = {"question_1": question.turns[0], "question_2": question.turns[1], "answer_a_1": answers_a[0],
                  "answer_b_1": answers_b[0], "answer_a_2": answers_a[1], "answer_b_2": answers_b[1]}
    return _filled(bench.prompts[prompt_name("pair", question, turn)], {**fields, **_references(question)})


def _filled(prompt: JudgePrompt, fields: dict[str, str]) -> Prompt:
    return Prompt(prompt.name, prompt.system, prompt.template.format(**fields))


# ---------------------------------------------------------------- verdicts


def parse_rating(judgment: str) -> float | None:
    """The rating of a single-answer judgment, or None (unparsable)."""
    match = ONE_SCORE.search(judgment) or ONE_SCORE_BACKUP.search(judgment)
    return float(match.group(1)) if match else None


def parse_winner(judgment: str) -> str | None:
    """"A", "B" or "tie" from a pairwise judgment, or None (unparsable)."""
    return next((winner for mark, winner in VERDICTS if mark in judgment), None)


def combine(first: str | None, second: str | None) -> str | None:
    """The compressed model's outcome against the original (WIN, TIE, LOSS; None: unparsable) from the verdict
    with it as assistant A (``first``) and the one with the original as A (``second``)."""
    if first is None or second is None:
        return None
    by_first = {"A": WIN, "B": LOSS}.get(first, TIE)
    by_second = {"A": LOSS, "B": WIN}.get(second, TIE)
    return by_first if by_first != TIE and by_first == by_second else TIE


# ---------------------------------------------------------------- judgments and their tally


@dataclass(frozen=True)
class Graded:
    """One single-answer grading of one model's answer to one turn."""

    model: str
    question: int
    category: str
    turn: int
    prompt: str
    judgment: str

    @property
    def score(self) -> float | None:
        return parse_rating(self.judgment)


@dataclass(frozen=True)
class Game:
    """One pairwise game of a compressed model against the original on one turn, judged in both orders."""

    model: str
    question: int
    category: str
    turn: int
    prompt: str
    first: str  # the judgment with the compressed model as assistant A
    second: str  # ... and as assistant B

    @property
    def outcome(self) -> str | None:
        return combine(parse_winner(self.first), parse_winner(self.second))


@dataclass
class Tally:
    """Scores and games of one model in one group (a category, a turn, or overall)."""

    scores: list[float] = field(default_factory=list)
    unparsable_scores: int = 0
    outcomes: dict[str, int] = field(default_factory=lambda: {WIN: 0, TIE: 0, LOSS: 0})
    unparsable_games: int = 0

    def add(self, item: Graded | Game) -> None:
        if isinstance(item, Graded):
            value = item.score
            self.scores += [] if value is None else [value]
            self.unparsable_scores += value is None
        else:
            outcome = item.outcome
            self.unparsable_games += outcome is None
            if outcome is not None:
                self.outcomes[outcome] += 1

    def to_json(self) -> dict:
        n, games = len(self.scores), sum(self.outcomes.values())
        mean = sum(self.scores) / n if n else None
        spread = math.sqrt(sum((s - mean) ** 2 for s in self.scores) / (n - 1) / n) if n > 1 else None
        return {"score": mean, "score_stderr": spread, "scored": n, "unparsable_scores": self.unparsable_scores,
                **self.outcomes, "unparsable_games": self.unparsable_games,
                "win_rate": self.outcomes[WIN] / games if games else None,
                "win_rate_adjusted": (self.outcomes[WIN] + 0.5 * self.outcomes[TIE]) / games if games else None}


COLUMNS = ("score (1–10)", "ratings unparsable", "win / tie / loss vs original", "win rate", "adjusted win rate",
           "games unparsable")  # a tally's cells (:func:`cells`), as the page and the command line show them


def cells(found: dict, games: bool) -> list[str]:
    """One group's tally (a value of :func:`tally`'s) as the :data:`COLUMNS`; ``games``: a compressed model's, whose
    games against the original are counted ("—" for the original's)."""
    def percent(value) -> str:
        return "—" if value is None else f"{100 * value:.1f} %"

    score = "—" if found["score"] is None else f"{found['score']:.2f}" + (
        "" if found["score_stderr"] is None else f" ± {found['score_stderr']:.2f}")
    return [score, f"{found['unparsable_scores']} of {found['scored'] + found['unparsable_scores']}",
            f"{found[WIN]} / {found[TIE]} / {found[LOSS]}" if games else "—", percent(found["win_rate"]),
            percent(found["win_rate_adjusted"]), str(found["unparsable_games"]) if games else "—"]


def tally(items: Sequence[Graded | Game]) -> dict[str, dict[str, dict]]:
    """Per model: per category (in order of appearance), per turn and overall, the :class:`Tally` as JSON."""
    found: dict[str, dict[str, Tally]] = {}
    for item in items:
        groups = found.setdefault(item.model, {})
        for group in (item.category, f"turn {item.turn}", OVERALL):
            groups.setdefault(group, Tally()).add(item)
    def order(group: str) -> tuple[int, str]:
        return (2, "") if group == OVERALL else (1, group) if group.startswith("turn ") else (0, "")

    return {model: {group: groups[group].to_json() for group in sorted(groups, key=order)}  # a stable sort
            for model, groups in found.items()}
