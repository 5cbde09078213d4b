"""Words about judged answers (MT-Bench): the help, the judge's field, the run's summary, and the viewer's question,
answers and verdicts (each verdict the judge's own text, "unparsable" said where no rating or winner was found)."""

from __future__ import annotations

from evaluation.serving import LOSS, MT_BENCH, MT_BENCH_COLUMNS, ORIGINAL, OVERALL, parse_winner, SELF_JUDGED, TIE, WIN

MT_BENCH_HELP = (
    "FastChat's MT-Bench: each compared model answers the questions greedily through its chat template, then a judge "
    "grades every answer from 1 to 10 and plays each compressed model against the original, twice (once in each "
    "order; two verdicts that disagree make a tie). **The judge**: left empty, the original itself "
    "(*self-judged*) — a small model's verdicts are mostly unparsable and mean little, so a self-judged run shows the "
    "path working, not a measurement; name a strong model, or an OpenAI-compatible endpoint where this server allows "
    f"one (its key from `{MT_BENCH.key_env}` on the server, never stored), before reading anything into the scores. "
    "Answers and verdicts are cached: a rerun, or another judge of the same answers, generates nothing twice."
)
SELF_JUDGED_PLACEHOLDER = SELF_JUDGED
SELF_JUDGED_NOTE = ("**Self-judged**: the original grades its own answers and the compressed models'. A small model's "
                    "verdicts are mostly unparsable and mean little: judge with a strong model or an endpoint before "
                    "reading anything into the scores.")
MT_BENCH_HEADERS = ("group", "model", *MT_BENCH_COLUMNS)
WINNERS = {"A": "A", "B": "B", "tie": "tie", None: "unparsable"}
RULE = "\n\n" + "─" * 24 + "\n\n"


def judge_label(endpoints: bool) -> str:
    """The judge field's label: what it takes on this server."""
    url = "or an OpenAI-compatible URL (http://host:8000/v1)" if endpoints else "no endpoint URL on this shared server"
    return f"Judge: empty = the original (self-judged), or a model (a Hugging Face id); {url}"


def mt_bench_summary(run) -> str:
    """Who judged, what was asked, how many verdicts could not be read, and what was generated now."""
    request, tally = run.request, run.tally()
    lines = [f"**Judged by {request.judge.words()}** · {len(request.questions)} question(s) × {request.turns} "
             f"turn(s) · answers up to {request.answer_tokens} tokens (greedy)."]
    if request.judge.self_judged:
        lines.append(SELF_JUDGED_NOTE)
    counts = []
    for label, groups in tally.items():
        overall = groups[OVERALL]
        part = f"{label} {overall['unparsable_scores']} of {overall['scored'] + overall['unparsable_scores']} ratings"
        if label != ORIGINAL:
            games = sum(overall[o] for o in (WIN, TIE, LOSS)) + overall["unparsable_games"]
            part += f", {overall['unparsable_games']} of {games} games"
        counts.append(part)
    lines.append(f"Unparsable (left out of the scores and win rates): {'; '.join(counts)}.")
    lines.append(f"Generated now: {run.done['answers']} answers, {run.done['judgments']} verdicts; the rest came from "
                 "the cache.")
    return "  \n".join(lines)


def mt_bench_question_title(question) -> str:
    first = " ".join(question.turns[0].split())
    return f"{question.id} · {question.category} · {first[:70]}{'…' if len(first) > 70 else ''}"


def mt_bench_question(question, turns: int) -> str:
    """The question's turns asked, in order."""
    asked = "\n\n".join(f"**Turn {i}:** {turn}" for i, turn in enumerate(question.turns[:turns], start=1))
    return f"**Question {question.id} · {question.category}**\n\n{asked}"


def mt_bench_answers(answers) -> str:
    """A model's answers: the one answer as it is, two turns each under its name."""
    if len(answers) == 1:
        return answers[0]
    return "\n\n".join(f"Turn {i}:\n{answer}" for i, answer in enumerate(answers, start=1))


def mt_bench_verdicts(run, label: str, question: int) -> str:
    """The judge's verdicts on ``label``'s answers to ``question``: each rating (or "unparsable") with the judge's
    text, then, for a compressed model, each game against the original with both orders' texts."""
    parts = []
    for graded in (g for g in run.graded if g.model == label and g.question == question):
        rating = "unparsable (no [[rating]] in the verdict)" if graded.score is None else f"rating {graded.score:g}"
        parts.append(f"Turn {graded.turn}: {rating}\n{graded.judgment}")
    for game in (g for g in run.games if g.model == label and g.question == question):
        first, second = (WINNERS[parse_winner(t)] for t in (game.first, game.second))
        outcome = game.outcome or "unparsable"
        parts.append(f"Turn {game.turn} against the original: {outcome} ({label}'s answer as A → {first}; the "
                     f"original's as A → {second})\n{label}'s answer as A:\n{game.first}\n\nThe original's answer as "
                     f"A:\n{game.second}")
    return RULE.join(parts)
