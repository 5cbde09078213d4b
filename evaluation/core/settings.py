"""Defaults the command line and the page both read: one home for each."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Perplexity:
    """WikiText-2 test perplexity over fixed, non-overlapping windows."""

    seq_len: int = 512  # tokens per window
    windows: int = 16  # windows read


@dataclass(frozen=True)
class RankSearch:
    """The surgical rank search's stopping rule."""

    tolerance: float = 0.5  # points of the search score a projection may cost (or % of perplexity)
    limit: int = 40  # search examples (0: all)


@dataclass(frozen=True)
class MtBench:
    """MT-Bench, small enough by default for a CPU (FastChat answers up to 1024 tokens and asks GPT-4 for 2048)."""

    turns: int = 1  # the user turns answered and judged (MT-Bench has 2)
    answer_tokens: int = 128  # an answer's cap (greedy; FastChat's is 1024)
    judge_tokens: int = 128  # a local judge's cap (greedy)
    remote_tokens: int = 2048  # an endpoint's max_tokens (FastChat's, at temperature 0)
    remote_model: str = "gpt-4"  # the model an endpoint is asked for (FastChat's judge)
    key_env: str = "LAYERCUT_JUDGE_API_KEY"  # the endpoint's key, sent as a Bearer token, never stored
    allow_url_env: str = "LAYERCUT_ALLOW_JUDGE_URL"  # a shared server's operator allows endpoints with 1
    timeout_s: float = 300.0  # one request to an endpoint


@dataclass(frozen=True)
class C4:
    """C4 perplexity as SparseGPT and Wanda compute it."""

    documents: int = 1100  # the validation shard's first documents, joined with ' '
    windows: int = 256  # non-overlapping windows of the model's length
    seq_len: int = 2048  # the papers' window (at most the model's positions)


PERPLEXITY = Perplexity()
MT_BENCH = MtBench()
C4_PERPLEXITY = C4()
RANK_SEARCH = RankSearch()
BATCH_SIZE = 16  # sequences per forward pass when scoring tasks
