"""How far a compressed model's next tokens are from the original's: the arithmetic, on tensors.

* KL divergence, in nats, of the compressed model's next-token distribution q from the original's p,
  at one position: ``KL(p ‖ q) = Σ_v p(v) · (log p(v) − log q(v))`` — the original is the reference,
  so a token the original finds likely and the cut does not costs much, and the converse little.
* Top-1 agreement at one position: both models' most likely next token is the same token.
* The first divergence of two greedy answers: the first generated token where they differ.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from prune.core.errors import InvalidInput

LOG_FLOOR = -1e30  # log q = −inf becomes this: p = 0 there adds 0 (not NaN), p > 0 a huge KL


@dataclass(frozen=True)
class Reference:
    """The original's next-token distributions at some positions, kept to compare other models with."""

    probs: torch.Tensor  # [..., V] p, float32
    neg_entropy: torch.Tensor  # [...] Σ_v p log p, by the same arithmetic as the cross term (KL(p ‖ p) = 0 exactly)
    top1: torch.Tensor  # [...] argmax of p

    @classmethod
    def of(cls, logits: torch.Tensor) -> Reference:
        logp = F.log_softmax(logits.float(), dim=-1)
        probs = logp.exp()
        return cls(probs, cross(probs, logp), logp.argmax(dim=-1))


def cross(probs: torch.Tensor, logq: torch.Tensor) -> torch.Tensor:
    """Σ_v p(v) log q(v) over the last axis."""
    return (probs * logq.clamp_min(LOG_FLOOR)).sum(dim=-1)


def compare(reference: Reference, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per position: KL(original ‖ other) in nats and whether the top-1 tokens agree; logits [..., V]."""
    kl, agree, _ = scores(reference, logits)
    return kl, agree


def scores(reference: Reference, logits: torch.Tensor, targets: torch.Tensor | None = None):
    """:func:`compare`, and the negative log-likelihood of each of ``targets`` [...] (else None), from one softmax."""
    logq = F.log_softmax(logits.float(), dim=-1)
    kl = (reference.neg_entropy - cross(reference.probs, logq)).clamp_min(0.0)
    nll = None if targets is None else -logq.gather(-1, targets.unsqueeze(-1).to(logq.device)).squeeze(-1)
    return kl, logq.argmax(dim=-1) == reference.top1, nll


def kl_divergence(p_logits: torch.Tensor, q_logits: torch.Tensor) -> torch.Tensor:
    """KL(p ‖ q) per position, in nats, from two models' logits [..., V]."""
    return compare(Reference.of(p_logits), q_logits)[0]


def token_nll(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Negative log-likelihood of each target token; logits [..., V], targets [...]."""
    logp = F.log_softmax(logits.float(), dim=-1)
    return -logp.gather(-1, targets.unsqueeze(-1).to(logp.device)).squeeze(-1)


def first_divergence(original_ids: Sequence[int], other_ids: Sequence[int], prompt_len: int) -> int | None:
    """Index (0 = the first generated token) of the first answer token where ``other_ids`` leaves ``original_ids``.

    Both are whole sequences, the same prompt then an answer. An answer that stops (its end of text)
    where the other goes on diverges there; None when the answers are the same.
    """
    original, other = list(original_ids), list(other_ids)
    if original[:prompt_len] != other[:prompt_len] or min(len(original), len(other)) < prompt_len:
        raise InvalidInput("Both sequences must start with the same prompt to compare their answers.")
    a, b = original[prompt_len:], other[prompt_len:]
    for index, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return index
    return None if len(a) == len(b) else min(len(a), len(b))
