"""Disjoint search and test splits for the surgical rank search (``prune.lowrank.rank_search``), as scores of a model.

* ``perplexity_splits`` — the WikiText-2 test windows of :mod:`evaluation.quality.perplexity`: the first ``share``
  of them the search split, the rest the test split (the authors' ``perplexity_test.py``: rows 0–20 %
  and 20–100 % of the test split). Lower is better.
* ``task_splits`` — a task's evaluation documents (validation or test, as lm-eval evaluates it)
  shuffled with seed 42 as the authors' evaluator does, the first ``share`` the search split, the
  rest the test split; accuracy in %, ``acc_norm`` where the task has it (the authors' metric),
  else ``acc``. Higher is better.

``criterion_splits`` picks one of them by name (:data:`WIKITEXT` or a task) with its tolerance;
``format_search`` prints a finished search.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from pathlib import Path

from prune.core.errors import InvalidInput, quoted
from prune.lowrank.rank_search import SearchResult, Tolerance

from evaluation.quality import lm_eval_adapter, perplexity

Score = Callable[[object], float]
WIKITEXT = "wikitext2"  # the perplexity criterion's name beside the task names
PPL_SEQ_LEN = 256  # the perplexity criterion's window: short, so that a CPU scores a candidate in about a second
SEARCH_SHARE = 0.2  # the search split's share of the windows or questions (the rest is the test split)


def _check_share(share: float) -> float:
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 < share < 1:
        raise InvalidInput(f"The search split's share is a fraction between 0 and 1 (0.2: a fifth), "
                           f"not {quoted(share)}.")
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
                      share: float = SEARCH_SHARE) -> tuple[Score, Score]:
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


def task_splits(task: str, tokenizer, data_dir: Path | None, *, share: float = SEARCH_SHARE,
                limit: int | None = None, batch_size: int = 16, seed: int = 42) -> tuple[Score, Score]:
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


def criterion_splits(criterion: str, tolerance: float, tokenizer, data_dir: Path | None, *, limit: int | None,
                     share: float = SEARCH_SHARE, batch_size: int = 16) -> tuple[Score, Score, Tolerance]:
    """(search, test, tolerance) for a named criterion: :data:`WIKITEXT` (``limit`` windows of
    :data:`PPL_SEQ_LEN` tokens; ``tolerance`` the perplexity growth allowed per projection, in %) or a task
    (``limit`` documents; ``tolerance`` the accuracy points below the original allowed)."""
    if criterion == WIKITEXT:
        search, test = perplexity_splits(tokenizer, data_dir, seq_len=PPL_SEQ_LEN, windows=limit, share=share)
    else:
        search, test = task_splits(criterion, tokenizer, data_dir, share=share, limit=limit, batch_size=batch_size)
    return search, test, tolerance_for(criterion, tolerance)


def tolerance_for(criterion: str, tolerance: float) -> Tolerance:
    """Perplexity (:data:`WIKITEXT`): ``tolerance`` % growth per projection; a task: accuracy points."""
    if criterion == WIKITEXT:
        return Tolerance(higher_is_better=False, growth=tolerance / 100)
    return Tolerance(higher_is_better=True, delta=tolerance)


def metric_name(criterion: str) -> str:
    return "WikiText-2 perplexity" if criterion == WIKITEXT else f"{criterion} accuracy (%)"


def format_search(result: SearchResult, criterion: str) -> str:
    """A markdown table of the original against the searched model, the path after each layer, and the ranks."""
    what = metric_name(criterion)
    lines = [f"| surgical rank search ({result.space} space) | parameters | search-split {what} | "
             f"test-split {what} |", "|---|---:|---:|---:|",
             f"| original | {result.params[0]:,} | {result.search[0]:.2f} | {result.test[0]:.2f} |",
             f"| searched | {result.params[1]:,} ({100 * result.params[1] / result.params[0]:.1f} %) | "
             f"{result.search[1]:.2f} | {result.test[1]:.2f} |", ""]
    lines.append("after each layer: " + "; ".join(f"layer {p.layer}: {p.params:,} parameters, test {p.test:.2f}"
                                                   for p in result.points if p.test is not None))
    lines.append("ranks: " + (", ".join(f"{layer}.{path.rpartition('.')[2]} {rank}"
                                        for (layer, path), rank in sorted(result.ranks.items())) or "none (all dense)"))
    return "\n".join(lines)
