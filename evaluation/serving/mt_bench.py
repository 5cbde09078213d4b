"""MT-Bench as a visitor's job: every compared model answers, a judge grades each answer and compares each
compressed model with the original in both orders (:mod:`evaluation.quality.mt_bench`).

A part of :class:`~evaluation.serving.backend.Backend`. Answers are cached per compared model (its recipe), turn
and question; judgments per judge (its identity, never an endpoint's key), prompt and the filled prompt's text, so
a second run generates and judges nothing it has done before.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from prune.core.architectures import check_causal
from prune.core.errors import InvalidInput
from prune.core.paths import digest
from prune.core.recipe import Recipe

from evaluation.measure import estimate
from evaluation.measure.measurement import ORIGINAL
from evaluation.quality import chat, judge as judges, mt_bench
from evaluation.quality.judge import JudgeChoice
from evaluation.core.jobs import Job, Progress
from evaluation.core.pool import Loaded, ModelSpec
from evaluation.core.store import ResultStore
from evaluation.serving.models import Models, Variants
from evaluation.serving.variants import Side
from evaluation.core.settings import MT_BENCH

MAX_TOKENS = 32_768  # past any cap a chat model takes


@dataclass(frozen=True)
class MtBenchRequest:
    """What an MT-Bench run asks, checked once where it enters."""

    bench: mt_bench.Bench
    questions: tuple[mt_bench.Question, ...]
    turns: int
    judge: JudgeChoice
    answer_tokens: int
    judge_tokens: int  # a local judge's cap (an endpoint's is MT_BENCH.remote_tokens)

    def seconds_at_most(self, rates, weights: list[float]) -> float:
        """``estimate.mt_bench`` of this request for compared models of ``weights`` (the original's 1) with this
        machine's ``rates``: the judge counted only when it is the original, whose rates are known."""
        return estimate.mt_bench(rates, weights, questions=len(self.questions), turns=self.turns,
                                 answer_tokens=self.answer_tokens,
                                 judge_tokens=self.judge_tokens if self.judge.self_judged else None)


def check_request(data_dir, *, limit: int | None = None, turns: int = MT_BENCH.turns,
                  judge: JudgeChoice = JudgeChoice(), answer_tokens: int = MT_BENCH.answer_tokens,
                  judge_tokens: int = MT_BENCH.judge_tokens) -> MtBenchRequest:
    """The request, or one line on what is wrong (data, a limit, turns or a cap)."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise InvalidInput("MT-Bench's limit is a number of questions ≥ 1 (or none: the first of each category).")
    if turns not in (1, 2):
        raise InvalidInput(f"MT-Bench has 2 turns: answer and judge 1 or 2, not {turns}.")
    for what, value in (("An answer's", answer_tokens), ("A judge's", judge_tokens)):
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_TOKENS:
            raise InvalidInput(f"{what} token cap must be 1…{MAX_TOKENS:,}, not {value}.")
    bench = mt_bench.load(data_dir)
    return MtBenchRequest(bench, bench.select(limit), turns, judge, answer_tokens, judge_tokens)


@dataclass
class MtBenchRun:
    """What a run found: the answers, the judgments, their tally and the time they took."""

    request: MtBenchRequest
    answers: dict[str, dict[int, list[str]]]  # label → question id → the answers to its turns
    graded: list[mt_bench.Graded] = field(default_factory=list)
    games: list[mt_bench.Game] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=lambda: {"answering": 0.0, "judging": 0.0})
    done: dict[str, int] = field(default_factory=lambda: {"answers": 0, "judgments": 0})  # not from the cache

    def tally(self) -> dict[str, dict[str, dict]]:
        return mt_bench.tally([*self.graded, *self.games])

    def entries(self) -> dict[str, dict]:
        """Per model, its results in lm-eval's layout (the overall score; a compressed model's win rates)."""
        out = {}
        for label, groups in self.tally().items():
            overall = groups[mt_bench.OVERALL]
            results = {"score,none": overall["score"], "score_stderr,none": overall["score_stderr"]}
            if label != ORIGINAL and overall["win_rate"] is not None:
                results |= {"win_rate,none": overall["win_rate"],
                            "win_rate_adjusted,none": overall["win_rate_adjusted"]}
            out[label] = {"results": {**results, "alias": mt_bench.TASK},
                          "higher_is_better": {"score": True, "win_rate": True, "win_rate_adjusted": True},
                          "n-samples": {"original": len(self.request.bench.questions),
                                        "effective": len(self.request.questions)},
                          "n-shot": 0, "version": None}
        return out

    def to_json(self) -> dict:
        request = self.request
        return {"judge": request.judge.to_json(), "turns": request.turns, "answer_tokens": request.answer_tokens,
                "judge_tokens": request.judge_tokens if request.judge.url is None else MT_BENCH.remote_tokens,
                "questions": [q.id for q in request.questions], "tally": self.tally(), "seconds": self.seconds,
                "done": self.done, "answers": self.answers,
                "graded": [vars(g) | {"score": g.score} for g in self.graded],
                "games": [vars(g) | {"outcome": g.outcome} for g in self.games]}


class MtBench:
    """MT-Bench as a visitor's job."""

    def __init__(self, models: Models):
        self.models = models

    def run(self, spec: ModelSpec, variants: Variants, request: MtBenchRequest, *, use_cache: bool = True,
                 progress: Progress | None = None, owner: str | None = None) -> MtBenchRun:
        """Every compared model answers ``request``'s questions turn by turn (greedy, through the chat template);
        the judge grades each answer and, for each compressed model, each game against the original twice."""
        store = ResultStore(enabled=use_cache)
        with self.models.jobs.run("MT-Bench", progress, owner=owner) as job:
            base, sides = self.models.sides(spec, variants, job)
            check_causal(base.model, "MT-Bench")
            chat.chat_ids(base.tokenizer, [{"role": "user", "content": "?"}])  # a chat template, or one line now
            run = MtBenchRun(request, {})
            steps = len(request.questions) * request.turns * (2 * len(sides) + 2 * (len(sides) - 1))
            tick = _ticker(job, steps)
            for side in sides:
                self.models.ready(base, [side], job)
                run.answers[side.label] = self._answers(base, side, request, store, run, job, tick)
            judge = self._judge(spec, base, request, job)
            for item in _judgments(request, sides, run.answers):
                texts = [self._judged(store, judge, prompt, run, tick) for prompt in item.pop("prompts")]
                if len(texts) == 1:
                    run.graded.append(mt_bench.Graded(**item, judgment=texts[0]))
                else:
                    run.games.append(mt_bench.Game(**item, first=texts[0], second=texts[1]))
            job.update(1.0, "MT-Bench judged.")
        return run

    def _answers(self, base: Loaded, side: Side, request: MtBenchRequest, store: ResultStore, run: MtBenchRun,
                 job: Job, tick) -> dict[int, list[str]]:
        """``side``'s answers to each question's turns, each turn cached on its own (the earlier answers it
        follows are this model's own)."""
        found = {}
        for question in request.questions:
            answers: list[str] = []
            for turn in range(1, request.turns + 1):
                key = {"kind": "mt_bench_answer", **self.models.key(base, side.recipe), "question": question.id,
                       "turns": digest(question.turns[:turn]), "max_new_tokens": request.answer_tokens}
                if (cached := store.get(key)) is None:
                    started = time.perf_counter()
                    messages = chat.conversation(question.turns[:turn], answers)
                    cached = {"answer": chat.reply(side.model, base.tokenizer, messages, request.answer_tokens,
                                                   job.check)}
                    run.seconds["answering"] += time.perf_counter() - started
                    run.done["answers"] += 1
                    store.put(key, cached)
                answers.append(cached["answer"])
                tick(f"{side.label}: answered question {question.id}, turn {turn}")
            found[question.id] = answers
        return found

    def _judge(self, spec: ModelSpec, base: Loaded, request: MtBenchRequest, job: Job):
        """The judge ``request`` names, ready: an endpoint, the original (brought onto the device), or a model
        loaded into the pool beside it."""
        choice = request.judge
        if choice.url is not None:
            return judges.HttpJudge(choice.url, choice.remote_model)
        loaded = base if choice.model is None else self.models.base(ModelSpec(choice.model, token=spec.token), job)
        self.models.ready(loaded, [Side(ORIGINAL, Recipe(), loaded.model)], job)
        check_causal(loaded.model, "An MT-Bench judge")
        return judges.LocalJudge(loaded.model, loaded.tokenizer, self.models.key(loaded, Recipe()),
                                 request.judge_tokens, job.check)

    @staticmethod
    def _judged(store: ResultStore, judge, prompt: mt_bench.Prompt, run: MtBenchRun, tick) -> str:
        """The judge's text for ``prompt``, cached by the judge, the prompt's name and its filled text."""
        key = {"kind": "mt_bench_judgment", "judge": judge.identity, "prompt": prompt.name,
               "messages": digest(prompt.messages())}
        if (cached := store.get(key)) is None:
            started = time.perf_counter()
            cached = {"judgment": judge(prompt.messages())}
            run.seconds["judging"] += time.perf_counter() - started
            run.done["judgments"] += 1
            store.put(key, cached)
        tick(f"judged ({prompt.name})")
        return cached["judgment"]


def _judgments(request: MtBenchRequest, sides: list[Side], answers: dict[str, dict[int, list[str]]]):
    """What the judge is asked, in order: each model's answers graded, then each compressed model's games against
    the original (the compressed model as assistant A, then as B); each with the fields of its record."""
    bench, original = request.bench, answers[ORIGINAL]
    for question in request.questions:
        for turn in range(1, request.turns + 1):
            for side in sides:
                yield {"model": side.label, "question": question.id, "category": question.category, "turn": turn,
                       "prompt": mt_bench.prompt_name("single", question, turn),
                       "prompts": [mt_bench.single_prompt(bench, question, answers[side.label][question.id], turn)]}
            for side in sides[1:]:
                mine = answers[side.label][question.id]
                yield {"model": side.label, "question": question.id, "category": question.category, "turn": turn,
                       "prompt": mt_bench.prompt_name("pair", question, turn),
                       "prompts": [mt_bench.pair_prompt(bench, question, mine, original[question.id], turn),
                                   mt_bench.pair_prompt(bench, question, original[question.id], mine, turn)]}


def _ticker(job: Job, steps: int):
    """A progress report per answer or judgment (a judged game counts two)."""
    done = [0]

    def tick(message: str) -> None:
        done[0] += 1
        job.update(min(done[0] / max(steps, 1), 0.99), message)

    return tick
