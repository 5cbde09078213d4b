"""WikiText-2 perplexity over fixed, non-overlapping windows (Shortened LLaMA: 128, SLEB: 2048).

The text is the raw test split joined as the usual recipe does (``"\\n\\n".join`` of the
dataset's rows, whose blank lines are empty strings), tokenized once without special
tokens. Without BOS a window is ``seq_len`` consecutive tokens; with BOS it is the BOS
token followed by ``seq_len − 1`` text tokens (the BOS itself is never predicted), as
Shortened LLaMA does for models trained with a BOS on every sequence. A trailing partial
window is dropped. Perplexity = exp(total NLL / predicted tokens).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from prune.core.architectures import check_causal
from prune.core.chunked_loss import summed_nll
from prune.core.devices import input_device
from prune.core.errors import InvalidInput

from evaluation.core.jobs import Job
from evaluation.measure.measurement import Measurement

GROUP = "perplexity"
RAW_TEST = Path("wikitext2") / "wiki.test.raw"
_TOKEN_BUDGET = 4096  # tokens per forward batch


def wikitext2_rows(data_dir: Path | None) -> list[str]:
    """The wikitext-2-raw-v1 test rows, as the hub dataset has them (local file, else the hub)."""
    if data_dir is not None:
        path = Path(data_dir) / RAW_TEST
        if not path.is_file():
            raise InvalidInput(f"WikiText-2 is missing: {path} does not exist (set LAYERCUT_DATA_DIR "
                               "to a folder laid out like shared/benchdata).")
        with path.open(encoding="utf-8") as f:
            return [line if line.strip() else "" for line in f]
    if os.environ.get("HF_HUB_OFFLINE") == "1" or os.environ.get("HF_DATASETS_OFFLINE") == "1":
        raise InvalidInput("WikiText-2 perplexity offline needs a benchmark data folder (LAYERCUT_DATA_DIR).")
    import datasets

    return list(datasets.load_dataset("Salesforce/wikitext", "wikitext-2-raw-v1", split="test")["text"])


def token_ids(tokenizer, rows: list[str]) -> torch.Tensor:
    """[N] ids of the joined text, without special tokens."""
    return torch.tensor(tokenizer("\n\n".join(rows), add_special_tokens=False)["input_ids"])


def windows(ids: torch.Tensor, seq_len: int, bos_id: int | None) -> torch.Tensor:
    """[W, seq_len] non-overlapping windows; with ``bos_id`` each starts with it."""
    body = seq_len if bos_id is None else seq_len - 1
    count = ids.numel() // body
    chunks = ids[: count * body].view(count, body)
    if bos_id is not None:
        chunks = torch.cat([torch.full((count, 1), bos_id, dtype=chunks.dtype), chunks], dim=1)
    return chunks


@torch.no_grad()
def window_nll(model, batch: torch.Tensor) -> tuple[float, int]:
    """(summed NLL, predicted tokens) of a [B, T] batch: every token after the first is predicted."""
    nll, predicted = summed_nll(model, batch.to(input_device(model)))  # the head on a chunk of positions at a time
    return float(nll), predicted


def check_seq_lens(model, seq_lens) -> None:
    """A causal model (an encoder has no perplexity), and every window must fit the model's positions."""
    check_causal(model, "Perplexity")
    limit = getattr(model.config, "max_position_embeddings", None)
    too_long = [s for s in seq_lens if limit and s > limit]
    if too_long or not seq_lens or min(seq_lens) < 2:
        raise InvalidInput(f"Sequence lengths must be 2…{limit or '∞'} tokens for this model, not {list(seq_lens)}.")


def measure_perplexity(model, tokenizer, ids: torch.Tensor, *, label: str, seq_lens=(128, 2048), bos=(False, True),
                       max_windows: int | None = None, job: Job | None = None) -> list[Measurement]:
    """One perplexity per (sequence length, BOS setting) for one model; ``ids`` from :func:`token_ids`."""
    check_seq_lens(model, seq_lens)
    settings = [(s, b) for s in seq_lens for b in bos if not (b and tokenizer.bos_token_id is None)]
    if not settings:
        raise InvalidInput("This tokenizer has no BOS token: measure perplexity without BOS.")
    out = []
    for index, (seq_len, with_bos) in enumerate(settings):
        chunks = windows(ids, seq_len, tokenizer.bos_token_id if with_bos else None)
        if max_windows is not None:
            chunks = chunks[:max_windows]
        message = f"{label}: perplexity at {seq_len} tokens{' with BOS' if with_bos else ''}"
        report = None if job is None else (
            lambda done, index=index, message=message: job.update((index + done) / len(settings), message))
        nll, count = mean_nll(model, chunks, report=report)
        name = f"WikiText-2 perplexity (seq {seq_len}{', BOS' if with_bos else ''})"
        out.append(Measurement(name, math.exp(nll), "", False, model=label, group=GROUP,
                               details={"windows": len(chunks), "tokens": count, "seq_len": seq_len, "bos": with_bos,
                                        "nll": nll}))
    return out


def mean_nll(model, chunks: torch.Tensor, *, batch: int | None = None,
             report: Callable[[float], object] | None = None, known: Sequence[float] = ()) -> tuple[float, int]:
    """Mean negative log-likelihood per predicted token over the windows ``chunks`` [N, T], and that token count.

    ``batch`` windows at a time (None: as many as fit the token budget); ``report(fraction of the
    windows done)`` after each batch. ``known``: the mean NLLs of the first windows, read before (a frontier's
    screen reads them): counted as given (each window predicts T − 1 tokens), not read again.
    """
    if len(chunks) == 0:
        raise InvalidInput(f"The text is shorter than one window of {chunks.shape[1]} tokens.")
    known = known[:len(chunks)]
    step = batch or max(1, _TOKEN_BUDGET // chunks.shape[1])
    total, count = sum(known) * (chunks.shape[1] - 1), len(known) * (chunks.shape[1] - 1)
    for start in range(len(known), len(chunks), step):
        nll, n = window_nll(model, chunks[start: start + step])
        total, count = total + nll, count + n
        if report is not None:
            report((start + step) / len(chunks))
    return total / count, count
