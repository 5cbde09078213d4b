"""Tokens the fast scorer runs per question of each benchmark task, on the default model's tokenizer.

    python -m benchmarks.task_tokens            # the first 40 questions of every task, 0-shot (cloze tasks too)

The cost table of ``evaluation.measure.estimate`` (``TASKS``) is this script's output: per task, the packed
tokens per document (contexts once, continuations behind them, padding included), the documents one unit of
the page's question limit takes (MMLU: one of each of its 57 subjects) and the documents of the whole test set.
Nothing runs the model: requests are recorded, then planned. Writes ``benchmarks/results/task_tokens.json`` and,
unless ``LAYERCUT_RESULTS_DIR`` sends it elsewhere (a trial run), the same file as ``evaluation/measure``'s package
data, which the estimates read (an installed LayerCut has no benchmarks folder).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import prune
from benchmarks import harness
from benchmarks.record import RESULTS, results_dir, write_result
from evaluation.core.settings import BATCH_SIZE
from evaluation.measure import estimate
from evaluation.quality import lm_eval_adapter
from evaluation.quality.fast_lm import Answer, FastLM
from evaluation.sweeps.cuts import evaluate_loaded
from prune.core.errors import InvalidInput
from prune.core.paths import default_data_dir


class Recorder(FastLM):
    """Records lm-eval's token requests and answers nothing real."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.requests = []

    def _answers(self, requests, quiet: bool = False) -> list[Answer]:  # loglikelihood and cloze requests
        self.requests += list(requests)
        return [Answer(0.0, False, 0.0)] * len(requests)


def packed_tokens(lm: Recorder) -> int:
    _pairs, _where, batches = lm.plan(lm.requests)
    return sum(batch.num_tokens for batch in batches)


def main() -> None:
    parser = harness.parser(__doc__)
    parser.add_argument("--limit", type=int, default=40)
    args = parser.parse_args()
    model, tokenizer = prune.load_model()
    found = {}
    for task in lm_eval_adapter.TASKS:
        try:
            request = lm_eval_adapter.check_request([task], limit=args.limit, data_dir=default_data_dir())
        except InvalidInput as err:  # the hub's CBT, offline
            print(f"    # {task}: {err}")
            found[task] = {"skipped": str(err)}
            continue
        lm = Recorder(model, tokenizer, BATCH_SIZE)
        loaded = lm_eval_adapter.load_tasks(request)
        evaluate_loaded(lm, loaded, args.limit)
        parts = [len(t.eval_docs) for t in loaded["tasks"].values()]
        read = sum(min(args.limit, n) for n in parts)
        print(f'    "{task}": Task({packed_tokens(lm) / read:.0f}, {len(parts)}, {sum(parts)}),')
        found[task] = {"tokens_per_document": packed_tokens(lm) / read, "documents_per_unit": len(parts),
                       "documents": sum(parts)}
    path = write_result("task_tokens", {"limit": args.limit, "tasks": found}, model="the default model's tokenizer",
                        how=f"lm-eval's requests for the first {args.limit} documents of each task, 0-shot, recorded "
                            "and packed as the fast scorer packs them (padding included); nothing runs the model")
    if results_dir().resolve() == RESULTS.resolve():  # a measured run: the estimates read it from now on
        shutil.copyfile(path, Path(estimate.__file__).with_name(estimate.SIZES))


if __name__ == "__main__":
    main()
