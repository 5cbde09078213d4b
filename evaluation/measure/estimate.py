"""How long a job will take, said before it starts: its work counted from its settings, over this machine's rates.

A :class:`Rates` is what one loaded model did on this machine (``evaluation.measure.speed.probe_rates``: one
forward pass over a short prompt and a few decode steps, measured once per model by the backend). Each function
here counts a job's work — tokens through forward passes, decode steps — from the same settings the job takes,
scales it by each compared model's compute (``columns``: its parameters as a share of the original's, 1.0 for the
original) and divides by the rates. What does not scale with the model (loading a task, tokenizing WikiText-2,
lm-eval's bookkeeping) is left out, and a result already cached takes no time: an estimate is the model's work.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import resources

from prune.core.errors import InvalidInput

from evaluation.core.timing import Rates

SIZES = "task_tokens.json"  # package data: the result of python -m benchmarks.task_tokens, copied by it


@dataclass(frozen=True)
class Task:
    """A benchmark task's size, measured by ``python -m benchmarks.task_tokens`` (the default model's tokenizer,
    0-shot)."""

    tokens: int  # tokens the fast scorer runs per document (context once, the choices behind it, padding)
    per_limit: int  # documents one unit of the question limit takes (MMLU: one of each of its 57 subjects)
    documents: int  # documents of the whole test set


def measured_tasks() -> dict[str, Task]:
    """Every task ``SIZES`` measured, tokens rounded; one it skipped (the hub's CBT, offline) has no row."""
    found = json.loads(resources.files(__package__).joinpath(SIZES).read_text(encoding="utf-8"))
    return {name: Task(round(size["tokens_per_document"]), size["documents_per_unit"], size["documents"])
            for name, size in found["tasks"].items() if "skipped" not in size}


TASKS = measured_tasks()
BACKWARD_COST = 2  # a backward pass costs about two forward passes (training steps: 1 + this)
CHARS_PER_TOKEN = 4  # an English prompt's characters per token, near enough for a prefill's share of a generation


def forward_s(rates: Rates, tokens: float, compute: float = 1.0) -> float:
    """Seconds for ``tokens`` tokens through forward passes of a model of relative ``compute``."""
    return tokens * compute / rates.forward_tokens_per_s


def decode_s(rates: Rates, steps: float, batch: int = 1, compute: float = 1.0) -> float:
    """Seconds for ``steps`` decode steps of ``batch`` sequences: one step's fixed cost, then each extra sequence's
    token as in a forward pass."""
    return steps * compute * (rates.decode_s_per_token + (batch - 1) / rates.forward_tokens_per_s)


def task_tokens(task: str, limit: int | None, num_fewshot: int = 0) -> float:
    """Tokens one model runs for ``task`` at a question ``limit`` (None: all); each few-shot example adds a
    question's length."""
    if task not in TASKS:
        raise InvalidInput(f"No size is known for {task}: its time cannot be estimated.")
    size = TASKS[task]
    documents = size.documents if limit is None else min(size.documents, limit * size.per_limit)
    return documents * size.tokens * (1 + num_fewshot)


# ---------------------------------------------------------------- the page's jobs


def speed(rates: Rates, columns: Sequence[float], *, batch_sizes: Iterable[int], prompt_len: int, new_tokens: int,
          repeats: int, warmup: int = 1, generates: bool = True) -> float:
    """``evaluation.measure.speed.measure_speed``: per batch size a warm-up of 2 tokens, then ``repeats`` runs
    (``generates=False``: an encoder's, one pass over the prompt each)."""

    def run(batch: int, count: int, compute: float) -> float:  # a prefill, then count − 1 decode steps
        steps = count - 1 if generates else 0
        return forward_s(rates, batch * prompt_len, compute) + decode_s(rates, steps, batch, compute)

    return sum(warmup * run(b, 2, c) + repeats * run(b, new_tokens, c) for c in columns for b in batch_sizes)


def memory(rates: Rates, columns: Sequence[float], *, prompt_len: int, new_tokens: int,
           generates: bool = True) -> float:
    """``backend.measure.memory``: each model generates ``new_tokens`` after a ``prompt_len``-token prompt (an
    encoder: one pass over the prompt)."""
    steps = new_tokens - 1 if generates else 0
    return sum(forward_s(rates, prompt_len, c) + decode_s(rates, steps, 1, c) for c in columns)


def generation(rates: Rates, columns: Sequence[float], *, prompt: str, max_new_tokens: int) -> float:
    """The side-by-side generation at most (an answer that ends sooner takes less), then the divergence: each
    model reads the prompt and the answer once more."""
    prompt_tokens = 1 + len(prompt) // CHARS_PER_TOKEN
    answering = sum(forward_s(rates, prompt_tokens, c) + decode_s(rates, max_new_tokens - 1, 1, c) for c in columns)
    reading = sum(forward_s(rates, prompt_tokens + max_new_tokens, c) for c in columns) if len(columns) > 1 else 0.0
    return answering + reading


def benchmarks(rates: Rates, columns: Sequence[float], *, tasks: Iterable[str], limit: int | None,
               num_fewshot: int = 0) -> float:
    """``backend.measure.benchmarks``: every task on every model."""
    tokens = sum(task_tokens(task, limit, num_fewshot) for task in tasks)
    return sum(forward_s(rates, tokens, c) for c in columns)


def perplexity(rates: Rates, columns: Sequence[float], *, seq_len: int, windows: int) -> float:
    """``backend.measure.perplexity``: ``windows`` windows of ``seq_len`` tokens through every model."""
    return sum(forward_s(rates, seq_len * windows, c) for c in columns)


JUDGE_PROMPT_TOKENS = 400  # an MT-Bench judge prompt's own words (FastChat's instructions, the question)


def mt_bench(rates: Rates, columns: Sequence[float], *, questions: int, turns: int, answer_tokens: int,
             judge_tokens: int | None) -> float:
    """``backend.mt_bench.run`` at most (answers and verdicts that end sooner take less): every model answers each turn
    up to its cap; a local judge (``judge_tokens``; None: an endpoint, not counted) with this machine's rates reads
    each graded answer's prompt and each compressed model's games in both orders, and writes up to its cap."""
    answering = sum(turns * decode_s(rates, answer_tokens, 1, c) for c in columns)
    if judge_tokens is None:
        return questions * answering
    judgments = turns * (len(columns) + 2 * (len(columns) - 1))
    read = JUDGE_PROMPT_TOKENS + 2 * turns * answer_tokens  # a game shows both models' answers
    return questions * (answering + judgments * (forward_s(rates, read) + decode_s(rates, judge_tokens)))


def cut_sweep(rates: Rates, *, num_layers: int, block_size: int, task: str, limit: int | None) -> float:
    """``evaluation.sweeps.cuts``: the original once, then each cut [s, s + K) runs only the layers after it."""
    tokens = task_tokens(task, limit)
    after = sum(num_layers - (start + block_size) for start in range(num_layers - block_size + 1))
    return forward_s(rates, tokens, 1 + after / num_layers)


def sparsity_sweep(rates: Rates, *, task: str, limit: int | None, points: int, seq_len: int, windows: int,
                   calibrated: int = 0, calibration_tokens: int = 0) -> float:
    """``evaluation.sweeps.sparsity``: each point's task and perplexity; ``calibrated`` points (Wanda,
    SparseGPT) first read the calibration text once (SparseGPT's solves are not counted)."""
    per_point = forward_s(rates, task_tokens(task, limit) + seq_len * windows)
    return points * per_point + calibrated * forward_s(rates, calibration_tokens)


def frontier(rates: Rates, *, task: str, limit: int | None, points: int, seq_len: int, windows: int,
             speed_tokens: tuple[int, int, int], repaired: int = 0, repair_s: float = 0.0, screen: int = 0) -> float:
    """``evaluation.frontier`` at most: each of ``points`` candidates screened on ``screen`` perplexity windows (0: no
    screen), then scored on its task and perplexity and timed in turns with the original (``speed_tokens``: prompt,
    new tokens, repeats), ``repaired`` of them trained ``repair_s`` seconds first; builds (a calibration pass for the
    calibrated families) and the analyses not counted: an upper bound in points (a family that reaches no size is
    not measured, and a screened-out one not in full), a lower one in work."""
    prompt, new, repeats = speed_tokens
    timed = 2 * (1 + repeats) * (forward_s(rates, prompt) + decode_s(rates, new - 1))
    full = forward_s(rates, task_tokens(task, limit) + seq_len * (windows + screen)) + timed
    return points * full + repaired * repair_s


def rank_search(rates: Rates, *, candidates: int, layers: int, search_tokens: float, test_tokens: float,
                calibration_tokens: int) -> float:
    """``prune.lowrank.rank_search`` at most: the bases from one calibration pass, the original on both splits,
    each of the ``candidates`` ranks (of every projection) on the search split, the test split after each layer."""
    scored = (1 + candidates) * search_tokens + (1 + layers) * test_tokens
    return forward_s(rates, calibration_tokens + scored)


def healing(rates: Rates, compute: float, *, steps: int, batch: int, seq_len: int, heldout: int, eval_every: int,
            columns: Sequence[float], ppl_tokens: int, budget_s: float | None = None, teacher: bool = False) -> float:
    """``prune.healing.train``: each step's forward and backward (and, distilling, the original's forward), the
    held-out windows before, every ``eval_every`` steps and at the end (all within ``budget_s`` when one is set);
    then the held-out perplexity of every model."""
    training = forward_s(rates, steps * batch * seq_len, compute) * (1 + BACKWARD_COST)
    if teacher:
        training += forward_s(rates, steps * batch * seq_len)
    training += (2 + steps // eval_every) * forward_s(rates, heldout * seq_len, compute)
    if budget_s is not None:
        training = min(training, budget_s)
    return training + perplexity(rates, columns, seq_len=ppl_tokens, windows=1)


def patching(rates: Rates, *, tokens: int, columns: Sequence[float], ppl_tokens: int) -> float:
    """``prune.patch``: the original's forward over the calibration tokens (at most; it stops after the cut), then
    the held-out perplexity of every model."""
    return forward_s(rates, tokens) + perplexity(rates, columns, seq_len=ppl_tokens, windows=1)


RERUNS_MODEL = frozenset({"ppl", "taylor", "sleb"})  # methods that run the model on a resample (prune.depth.stability)
# What re-scoring one resample costs a method that only re-reads the kept residual stream, as a share of its
# analysis (angular on the default model: 0.1–1 s a resample beside a 10–40 s analysis, benchmarks/default_jobs.py)
STREAM_RESAMPLE_SHARE = 0.02


def stability(*, method: str, resamples: int, analysis_s: float) -> float:
    """``prune.depth.stability``: a method that runs the model costs its analysis again on every resample (as long
    as the analysis took here); the others re-read the residual stream the analysis kept, a small share of it."""
    return resamples * analysis_s * (1.0 if method in RERUNS_MODEL else STREAM_RESAMPLE_SHARE)
