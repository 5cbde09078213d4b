"""C4 perplexity as the pruning papers compute it (SparseGPT's ``datautils.get_c4`` and ``llama_eval``, Wanda's
``lib/data.py``, which copies it).

The evaluation text is ``allenai/c4``'s English validation shard ``en/c4-validation.00000-of-00008.json.gz``: its
first 1100 documents joined with ``' '``, tokenized once as a whole *with* the tokenizer's special tokens (a Llama
tokenizer puts one BOS at the very start), cut to 256 × seqlen tokens, and scored as non-overlapping windows of
seqlen tokens (as many as fit: 256 when the text is long enough); in each window every token after the first is
predicted, and perplexity = exp(total NLL / predicted tokens), which is the papers' mean of per-window mean losses
since every window predicts as many tokens. seqlen is the model's length: both scripts set 2048 (LLaMA's);
LayerCut takes 2048, or the model's positions if fewer.

The shard comes from the data folder (``c4/c4-validation.00000-of-00008.json.gz``), else from the Hub; offline
without the file, one line says where to put it. The papers tokenize with the slow tokenizer (``use_fast=False``);
LayerCut uses the model's own (fast) tokenizer.
"""

from __future__ import annotations

import gzip
import json
import math
import os
from pathlib import Path

import torch

from prune.core.errors import InvalidInput

from evaluation.core.settings import C4_PERPLEXITY

TASK = "c4"
REPO = "allenai/c4"
SHARD = "en/c4-validation.00000-of-00008.json.gz"
LOCAL = Path("c4") / "c4-validation.00000-of-00008.json.gz"


def missing(data_dir: Path | None) -> str:
    """The one line said when the shard can be had neither from the data folder nor from the Hub."""
    where = f"{Path(data_dir) / LOCAL}" if data_dir is not None else f"<data folder>/{LOCAL}"
    return (f"C4 perplexity needs allenai/c4's {SHARD}: the Hub cannot be reached, so download it and put it at "
            f"{where}.")


def shard(data_dir: Path | None) -> Path:
    """The validation shard: the data folder's copy, else the Hub's (downloaded once into its cache)."""
    if data_dir is not None and (Path(data_dir) / LOCAL).is_file():
        return Path(data_dir) / LOCAL
    from prune.core.loading import hub_reachable

    if os.environ.get("HF_DATASETS_OFFLINE") == "1" or not hub_reachable():  # at once, no retries
        raise InvalidInput(missing(data_dir))
    from huggingface_hub import hf_hub_download

    try:
        return Path(hf_hub_download(REPO, SHARD, repo_type="dataset"))
    except Exception as err:  # the Hub refused: one line
        raise InvalidInput(f"{missing(data_dir)} ({type(err).__name__})") from None


def documents(path: Path, count: int = C4_PERPLEXITY.documents) -> list[str]:
    """The ``text`` of the shard's first ``count`` documents, in file order."""
    texts = []
    try:
        with gzip.open(path, "rt", encoding="utf-8") as lines:
            for line in lines:
                if len(texts) == count:
                    break
                if line.strip():
                    texts.append(str(json.loads(line)["text"]))
    except (OSError, EOFError, ValueError, KeyError, TypeError) as err:
        raise InvalidInput(f"{path} is not a C4 shard (gzipped JSON lines with a 'text'): {type(err).__name__}.") \
            from None
    return texts


def seq_len_for(model) -> int:
    """The papers' 2048, or the model's positions if fewer."""
    limit = getattr(model.config, "max_position_embeddings", None)
    return min(C4_PERPLEXITY.seq_len, limit) if limit else C4_PERPLEXITY.seq_len


def windows(tokenizer, texts: list[str], seq_len: int, count: int = C4_PERPLEXITY.windows) -> torch.Tensor:
    """[W, seq_len] ids: the texts joined with ' ', tokenized with special tokens, cut to ``count`` × seq_len
    tokens, split into whole windows (W ≤ ``count``)."""
    ids = torch.tensor(tokenizer(" ".join(texts))["input_ids"])[: count * seq_len]
    whole = ids.numel() // seq_len
    if whole == 0:
        raise InvalidInput(f"The C4 text is shorter than one window of {seq_len} tokens.")
    return ids[: whole * seq_len].view(whole, seq_len)


def entry(nll: float, tokens: int, count: int, seq_len: int) -> dict:
    """The perplexity of a mean NLL per predicted token, as a results entry in lm-eval's layout."""
    return {"results": {"perplexity,none": math.exp(nll), "alias": TASK}, "higher_is_better": {"perplexity": False},
            "n-samples": {"original": C4_PERPLEXITY.windows, "effective": count}, "n-shot": 0, "version": None,
            "seq_len": seq_len, "tokens": tokens}
