"""Distillation from the original: the healed model's next-token distribution pulled towards the original's.

The teacher is the model the recipe started from (for a depth cut it shares every kept weight with the student, so
distilling costs no extra memory). Per predicted position, with ``p = softmax(teacher logits / τ)`` and
``q = softmax(student logits / τ)``:

* ``forward_kl`` — standard knowledge distillation (Hinton et al. 2015; the logit loss of Minitron, Muralidharan
  et al. 2024, and of MiniLLM's KD baseline): ``KL(p ‖ q) = Σ_v p (log p − log q)``;
* ``reverse_kl`` — ``KL(q ‖ p) = Σ_v q (log q − log p)`` on the training text (teacher-forced), the token-level
  simplification of MiniLLM (Gu et al. 2024), whose real objective is the sequence-level reverse KL optimised by
  policy gradient on the student's own samples; this is what the distillm code calls ``reverse_kl``.

The loss of a batch is ``(1 − r)·CE + r·τ²·KL`` averaged over every predicted position (``r`` the option
``kd_ratio``: 1 distils only, as Minitron does; 0.5 is LMOps's and torchtune's mix; τ² keeps the soft targets'
gradients the size of the hard ones', as Hinton; at τ = 1 it is 1). The teacher runs without gradients. Neither
model's logits are ever held for the whole text: the final hidden states are read at the final norm, and the two
heads, softmaxes and the loss run on a chunk of positions at a time (:mod:`prune.core.chunked_loss`), each chunk
recomputed in the backward pass.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from prune.core.chunked_loss import chunk_positions, final_hidden, head_logits

TEACHERS = ("none", "forward_kl", "reverse_kl")  # the heal option ``teacher``: none is the task loss alone
NAMES = {"forward_kl": "forward KL (KD)", "reverse_kl": "reverse KL (token-level MiniLLM)"}


def divergence(student_logits: torch.Tensor, teacher_logits: torch.Tensor, teacher: str,
               temperature: float = 1.0) -> torch.Tensor:
    """Per position [P]: KL(p ‖ q) (``forward_kl``) or KL(q ‖ p) (``reverse_kl``) at ``temperature``, float32."""
    log_q = nn.functional.log_softmax(student_logits.float() / temperature, dim=-1)
    log_p = nn.functional.log_softmax(teacher_logits.float() / temperature, dim=-1)
    if teacher == "forward_kl":
        return (log_p.exp() * (log_p - log_q)).sum(-1)
    return (log_q.exp() * (log_q - log_p)).sum(-1)


def _summed(student_logits: torch.Tensor, teacher_logits: torch.Tensor, targets: torch.Tensor, teacher: str,
            ratio: float, temperature: float) -> torch.Tensor:
    """Σ over positions of (1 − r)·CE + r·τ²·KL."""
    total = ratio * temperature ** 2 * divergence(student_logits, teacher_logits, teacher, temperature).sum()
    if ratio < 1:
        total = total + (1 - ratio) * nn.functional.cross_entropy(student_logits.float(), targets, reduction="sum")
    return total


def _chunk(student: nn.Module, teacher_model: nn.Module, mine: torch.Tensor, taught: torch.Tensor,
           targets: torch.Tensor, teacher: str, ratio: float, temperature: float) -> torch.Tensor:
    with torch.no_grad():
        teacher_logits = head_logits(teacher_model, taught)
    return _summed(head_logits(student, mine), teacher_logits, targets, teacher, ratio, temperature)


def distill_loss(student: nn.Module, teacher_model: nn.Module, input_ids: torch.Tensor, *, teacher: str,
                 ratio: float = 1.0, temperature: float = 1.0, chunk: int | None = None) -> torch.Tensor:
    """The mean over every predicted position of ``input_ids`` [N, T] of ``(1 − r)·CE + r·τ²·KL``; differentiable in
    the student when grad is enabled. ``chunk``: positions per chunk (None: as :mod:`prune.core.chunked_loss`)."""
    targets = input_ids[:, 1:].flatten()
    with torch.no_grad():
        taught = final_hidden(teacher_model, input_ids)
    mine = final_hidden(student, input_ids)
    if taught is None or mine is None:  # a logit transform not known here: whole-sequence logits, as the models give
        with torch.no_grad():
            teacher_logits = teacher_model(input_ids=input_ids, use_cache=False).logits[:, :-1].flatten(0, 1)
        student_logits = student(input_ids=input_ids, use_cache=False).logits[:, :-1].flatten(0, 1)
        total = _summed(student_logits, teacher_logits.to(student_logits.device),
                        targets.to(student_logits.device), teacher, ratio, temperature)
        return total / targets.numel()
    mine, taught = mine[:, :-1].flatten(0, 1), taught[:, :-1].flatten(0, 1).to(mine.device)
    targets = targets.to(mine.device)
    step = chunk_positions(mine.shape[0], student.get_output_embeddings().out_features, chunk)
    total = mine.new_zeros((), dtype=torch.float32)
    for start in range(0, mine.shape[0], step):
        parts = (mine[start:start + step], taught[start:start + step], targets[start:start + step])
        if torch.is_grad_enabled() and step < mine.shape[0]:
            total = total + checkpoint(_chunk, student, teacher_model, *parts, teacher, ratio, temperature,
                                       use_reentrant=False)
        else:
            total = total + _chunk(student, teacher_model, *parts, teacher, ratio, temperature)
    return total / targets.numel()
