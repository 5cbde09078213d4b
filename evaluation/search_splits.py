"""Disjoint search and test splits for the surgical rank search (``prune.rank_search``), as scores of a model.

* ``perplexity_splits`` — the WikiText-2 test windows of :mod:`evaluation.perplexity`: the first ``share``
  of them the search split, the rest the test split (the authors' ``perplexity_test.py``: rows 0–20 %
  and 20–100 % of the test split). Lower is better.
* ``task_splits`` — a task's evaluation documents (validation or test, as lm-eval evaluates it)
  shuffled with seed 42 as the authors' evaluator does, the first ``share`` the search split, the
  rest the test split; accuracy in %, ``acc_norm`` where the task has it (the authors' metric),
  else ``acc``. Higher is better.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from pathlib import Path

from prune.errors import InvalidInput

from . import lm_eval_adapter, perplexity

Score = Callable[[object], float]


def _check_share(share: float) -> float:
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 < share < 1:
        raise InvalidInput(f"The search split's share is a fraction between 0 and 1 (0.2: a fifth), not {share!r}.")
    return float(share)


def split_indices(count: int, share: float, seed: int = 42) -> tuple[list[int], list[int]]:
    """(search, test): ``count`` indices shuffled with ``seed``, the first ⌊share · count⌋ and the rest."""
    share = _check_share(share)
    order = list(range(count))
    random.Random(seed).shuffle(order)
    cut = int(share * count)
    if not 0 < cut < count:
        raise InvalidInput(f"{count} examples cannot be split {share:.0%} / {1 - share:.0%}: both splits need one.")
    return order[:cut], order[cut:]


def perplexity_splits(tokenizer, data_dir: Path | None, *, seq_len: int = 512, windows: int | None = None,
                      share: float = 0.2) -> tuple[Score, Score]:
    """(search, test) WikiText-2 perplexities over the first ``windows`` windows (None: all), split in order."""
    chunks = perplexity.windows(perplexity.token_ids(tokenizer, perplexity.wikitext2_rows(data_dir)), seq_len, None)
    chunks = chunks[:windows] if windows is not None else chunks
    cut = int(_check_share(share) * len(chunks))
    if not 0 < cut < len(chunks):
        raise InvalidInput(f"{len(chunks)} windows cannot be split {share:.0%} / {1 - share:.0%}.")

    def score(part):
        def measure(model) -> float:
            return math.exp(perplexity.mean_nll(model, part, batch=8)[0])
        return measure

    return score(chunks[:cut]), score(chunks[cut:])


def task_splits(task: str, tokenizer, data_dir: Path | None, *, share: float = 0.2, limit: int | None = None,
                batch_size: int = 16, seed: int = 42) -> tuple[Score, Score]:
    """(search, test) accuracies in % on disjoint shuffled parts of ``task``'s first ``limit`` documents (None: all)."""
    request = lm_eval_adapter.check_request([task], data_dir=data_dir)
    loaded = lm_eval_adapter.load_tasks(request)
    (name, task_obj), = loaded["tasks"].items()
    count = len(task_obj.eval_docs)
    count = min(count, limit) if limit is not None else count
    search, test = split_indices(count, share, seed)

    def score(indices: list[int]):
        def measure(model) -> float:
            lm = lm_eval_adapter.get_scorer(lm_eval_adapter.DEFAULT_SCORER)(model, tokenizer, batch_size)
            out = lm_eval_adapter.run(lm, loaded, limit=None, samples={name: sorted(indices)}, bootstrap_iters=0)
            metrics = next(iter(out["results"].values()))
            key = "acc_norm,none" if "acc_norm,none" in metrics else "acc,none"
            return 100.0 * float(metrics[key])
        return measure

    return score(search), score(test)
