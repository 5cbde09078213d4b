"""Cloze tasks scored by the sparsity study's rule, as lm-eval tasks.

The rule (the seed study that pruned GPT-2, ELECTRA and T5 and scored them on the Children's Book
Test): put one candidate word in the blank; take the softmax at the candidate's token positions,
the mean over its tokens when it has several; the candidate with the highest value is the answer.
It is neither lm-eval's ``acc`` (the sum of log-probabilities) nor ``acc_norm`` (that sum per byte),
so a cloze task asks its own kind of request, ``cloze``, with ``(left, candidate, right)`` text; lm-eval's
evaluator hands each request kind to the scorer's method of that name, and LayerCut's scorers
(:class:`evaluation.quality.fast_lm.FastLM` and those built on it) answer it. A causal model reads the
left text and the candidate. The lm-eval task is :class:`evaluation.quality.cloze_task.ClozeTask`.

Differences from the study's own code (its ``main.py``), on purpose: the candidate goes into the blank (the
study appends it after the question, ``XXXXX`` left in); each token's probability is read from the
distribution that predicts it (the study reads the softmax at the token's own position, which in a causal
model predicts the next token); each candidate's own tokens are read (the study reuses the first candidate's
token range for all ten); the 20 sentences are always read.

Tasks (:data:`CLOZE_TASKS`): CBT itself from the hub (``cam-cst/cbt``, test split, four word kinds)
when a network is there, and CBT-style questions built offline from the shipped book
(:mod:`evaluation.quality.cbt_style`), which are not CBT and are named so.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

from prune.core import loading
from prune.core.errors import InvalidInput

from evaluation.quality import cbt_style

HUB_DATASET = "cam-cst/cbt"


@dataclass(frozen=True)
class ClozeSource:
    """Where one cloze task's questions come from, and the words the UI shows beside its name."""

    label: str
    docs: Callable[[], list[dict]]  # questions in CBT's field layout: sentences, question, answer, options


def _hub(kind: str) -> Callable[[], list[dict]]:
    def docs() -> list[dict]:
        import datasets

        offline = ", ".join(f"cbt_style_{k.lower()}" for k in cbt_style.KINDS)
        if not loading.hub_reachable():  # at once, not after the datasets library's retries
            raise InvalidInput(f"CBT ({kind}) is on the Hugging Face hub, which cannot be reached; without a network, "
                               f"{offline} ask CBT-style questions built from the shipped book.")
        try:
            rows = datasets.load_dataset(HUB_DATASET, kind, split="test")
        except Exception as err:  # the hub refused: one line, no path
            raise InvalidInput(f"CBT ({kind}) could not be loaded from the hub ({type(err).__name__}); "
                               f"{offline} ask CBT-style questions built from the shipped book.")
        return [dict(row) for row in rows]

    return docs


def _book(kind: str) -> Callable[[], list[dict]]:
    return lambda: cbt_style.build(kind)


CLOZE_TASKS: dict[str, ClozeSource] = {
    **{f"cbt_{kind.lower()}": ClozeSource("CBT, from the hub", _hub(kind)) for kind in ("CN", "NE", "P", "V")},
    **{f"cbt_style_{kind.lower()}": ClozeSource("CBT-style, not CBT", _book(kind)) for kind in cbt_style.KINDS},
}


@cache
def questions(name: str) -> tuple[dict, ...]:
    """A known cloze task's questions, built or loaded once per process."""
    return tuple(CLOZE_TASKS[name].docs())


@cache
def fingerprint(name: str) -> str:
    """Identifies a cloze task's questions in cache keys: a changed rule or dataset is measured afresh."""
    return hashlib.sha256(json.dumps(questions(name), sort_keys=True).encode()).hexdigest()[:16]


def load(name: str):
    """A fresh lm-eval task object for a known cloze task name."""
    from evaluation.quality.cloze_task import ClozeTask  # lm-eval's Task imports datasets: seconds

    return ClozeTask(name, list(questions(name)))
