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


PERPLEXITY = Perplexity()
RANK_SEARCH = RankSearch()
BATCH_SIZE = 16  # sequences per forward pass when scoring tasks
