"""The tasks the command line runs beside lm-eval's: ``c4`` (C4 perplexity by the pruning papers' rule) and
``mt_bench`` (answers judged as FastChat judges them), their flags, and their part of the report."""

from __future__ import annotations

import sys
from pathlib import Path

from prune.core.errors import InvalidInput

from evaluation.cli import output
from evaluation.measure.measurement import ORIGINAL
from evaluation.quality import c4, judge as judges, mt_bench
from evaluation.serving.backend import Backend
from evaluation.serving.mt_bench import MtBenchRequest, MtBenchRun, check_request
from evaluation.core.pool import ModelSpec
from evaluation.core.settings import MT_BENCH

TASKS = (c4.TASK, mt_bench.TASK)  # answered by the backend's own methods, not by lm-eval
FLAGS = ("--judge", "--judge_model", "--turns", "--answer_tokens", "--judge_tokens")  # mt_bench's own


def add_arguments(parser) -> None:
    parser.add_argument("--judge", default=None, metavar="MODEL_OR_URL",
                        help="with --task mt_bench: who judges: 'default' (the original itself, self-judged), a "
                             "model LayerCut loads, or an OpenAI-compatible endpoint's URL (http://host:8000/v1; its "
                             f"key from ${MT_BENCH.key_env})")
    parser.add_argument("--judge_model", default=None,
                        help=f"with an endpoint as --judge: the model it serves (default {MT_BENCH.remote_model})")
    parser.add_argument("--turns", type=int, default=None,
                        help=f"with --task mt_bench: turns answered and judged, 1 or 2 (default {MT_BENCH.turns})")
    parser.add_argument("--answer_tokens", type=int, default=None,
                        help=f"with --task mt_bench: an answer's cap in tokens (default {MT_BENCH.answer_tokens})")
    parser.add_argument("--judge_tokens", type=int, default=None,
                        help="with --task mt_bench: a local judge's cap in tokens (default "
                             f"{MT_BENCH.judge_tokens}; an endpoint is asked for {MT_BENCH.remote_tokens})")


def split(tasks: str) -> tuple[list[str], list[str]]:
    """(lm-eval's tasks, this module's) among the comma list ``tasks``, each in the given order."""
    names = [t.strip() for t in tasks.split(",") if t.strip()]
    return [n for n in names if n not in TASKS], [n for n in names if n in TASKS]


def check(args) -> None:
    """What can be checked before loading a model: these tasks go with a comparison, their flags with them."""
    _, own = split(args.task)
    if own and (args.sweep is not None or args.sparsity_sweep or args.frontier is not None or args.explain):
        raise InvalidInput(f"--task {','.join(own)} goes with a comparison (--full, a cut mode, a step or --recipe), "
                           "not with --sweep, --sparsity_sweep, --frontier or --explain.")
    given = [flag for flag in FLAGS if getattr(args, flag[2:]) is not None]
    if given and mt_bench.TASK not in own:
        raise InvalidInput(f"{', '.join(given)} go with --task {mt_bench.TASK}.")
    if args.judge_model is not None and "://" not in (args.judge or ""):
        raise InvalidInput("--judge_model names the model an endpoint serves: give the endpoint's URL as --judge.")


def prepare(args, backend: Backend) -> MtBenchRequest | None:
    """Before any model loads: C4's shard found, and the MT-Bench request the flags make (None without
    ``--task mt_bench``)."""
    own = split(args.task)[1]
    if c4.TASK in own:
        c4.shard(backend.models.data_dir)
    if mt_bench.TASK not in own:
        return None
    choice = judges.choose(args.judge, remote_model=args.judge_model or MT_BENCH.remote_model)
    given = {name: getattr(args, name) for name in ("turns", "answer_tokens", "judge_tokens")}
    return check_request(backend.models.data_dir, limit=args.limit, judge=choice,
                         **{name: getattr(MT_BENCH, name) if value is None else value for name, value in given.items()})


def run(args, backend: Backend, spec: ModelSpec, cuts: dict, results: dict[str, dict], request: MtBenchRequest | None,
        info, out_dir: Path, progress) -> str:
    """Add these tasks' entries to ``results`` (label → task → entry); MT-Bench's report as markdown ('' without)."""
    own = split(args.task)[1]
    if c4.TASK in own:
        for label, entry in backend.measure.c4_results(spec, cuts, limit=args.limit, use_cache=not args.no_cache,
                                                       progress=progress).items():
            results[label][c4.TASK] = entry
    if request is None:
        return ""
    say_estimate(request, info, len(cuts))
    found = backend.mt_bench.run(spec, cuts, request, use_cache=not args.no_cache, progress=progress)
    for label, entry in found.entries().items():
        results[label][mt_bench.TASK] = entry
    output.write_json(out_dir / "mt_bench.json", {"model": info.name, **found.to_json()})
    return report(found)


def say_estimate(request: MtBenchRequest, info, variants: int) -> None:
    """The run's size and, with this machine's rates, its time at most, on stderr before it starts (a judge other
    than the original is not counted: its speed here is not known yet)."""
    local = request.judge.self_judged
    models = 1 + variants
    judgments = request.turns * (models + 2 * variants)
    seconds = None if info.rates is None else request.seconds_at_most(info.rates, [1.0] * models)
    when = "" if seconds is None else (f"; at most about {seconds / 60:.0f} min here (every answer and verdict to its "
                                       f"cap{'' if local else ', the judge not counted'}; cached ones are free)")
    print(f"MT-Bench: {len(request.questions)} questions × {request.turns} turn(s), {models} model(s), judged by "
          f"{request.judge.words()}: {len(request.questions) * request.turns * models} answers and "
          f"{len(request.questions) * judgments} judgments{when}.", file=sys.stderr, flush=True)


def report(found: MtBenchRun) -> str:
    """Per model and group (category, turn, overall): the mean score and, beside the original, wins, ties, losses
    and the win rate; unparsable verdicts counted; how long answering and judging took."""
    request = found.request
    header = ("model", "group", *mt_bench.COLUMNS)
    lines = [f"## MT-Bench, judged by {request.judge.words()}", "", f"| {' | '.join(header)} |",
             "|" + "---|" * len(header)]
    for label, groups in found.tally().items():
        for group, t in groups.items():
            lines.append(f"| {' | '.join([label, group, *mt_bench.cells(t, games=label != ORIGINAL)])} |")
    answered, judged = found.done["answers"], found.done["judgments"]
    lines += ["", f"{len(request.questions)} questions, {request.turns} turn(s), answers up to {request.answer_tokens} "
              f"tokens (greedy). Generated now: {answered} answers ({_each(found.seconds['answering'], answered)}), "
              f"{judged} judgments ({_each(found.seconds['judging'], judged)}); the rest came from the cache."]
    if request.judge.self_judged:
        lines.append("Self-judged: the original grades its own answers and the compressed model's; a small model's "
                     "verdicts mean little.")
    return "\n".join(lines) + "\n"


def _each(seconds: float, count: int) -> str:
    return f"{seconds / count:.1f} s each" if count else "none"
