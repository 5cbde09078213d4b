"""A faster lm-eval scorer with HFLM's exact semantics: each distinct context runs once.

HFLM runs every (context, continuation) pair as its own sequence and computes the LM head
and a log-softmax at every position. `FastLM` keeps HFLM's tokenization, truncation,
rolling windows and generation (it subclasses `HFLM`) and only replaces the scoring of
token pairs: the continuations of one context are packed behind a single copy of it —
each continuation attends to the context and to itself (a 4-D mask, explicit position
ids) — rows are length-sorted and split into token-budgeted batches with little padding,
and the LM head runs only where a continuation token is predicted.

Packing layout of one row (context ``c0 c1 c2``, continuations ``a0 a1 a2`` and ``b0 b1``)::

    tokens     c0 c1 c2 | a0 a1 | b0
    positions   0  1  2 |  3  4 |  3
    segment     0  0  0 |  1  1 |  2
    predicts   -- -- a0/b0  a1 a2  b1
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from lm_eval.models.huggingface import HFLM
from torch import nn
from tqdm import tqdm

from prune.core.architectures import MASKED, SEQ2SEQ, kind_of
from prune.core.devices import input_device
from prune.core.hidden import output_embeddings_input

from evaluation.quality.masked_lm import MaskedLM
from evaluation.quality.sentinel_lm import SentinelLM

TOKENS_PER_REQUEST = 128  # batch_size requests ≈ batch_size × this many tokens per forward pass
PACKED_ROW_CAP = 2048  # longer groups are split over rows: a row's 4-D mask grows as T²
HEAD_CHUNK_ELEMENTS = 1 << 24  # logits per chunk (64 MB in float32): bigger chunks spill out of cache
BATCH_OVERHEAD_TOKENS = 64  # a forward pass costs about this many tokens beyond its own (planning only)

# HFLM warns on every construction with an in-memory model (once per compared model, so twice per
# run): that other model arguments are ignored, and that distributed setup is skipped. LayerCut
# passes an in-memory model on purpose and no other model arguments, so both are always true and
# never useful; only these two are dropped, and only while an HFLM is being built.
_IN_MEMORY_NOTES = ("`pretrained` model kwarg is not of type `str`",
                    "Passed an already-initialized model through `pretrained`")


@contextmanager
def building_in_memory_hflm() -> Iterator[None]:
    """While an HFLM is built on an in-memory model: its two notes about that are not printed."""
    logger = logging.getLogger(HFLM.__module__)

    def keep(record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(_IN_MEMORY_NOTES)

    logger.addFilter(keep)
    try:
        yield
    finally:
        logger.removeFilter(keep)


Pair = tuple[tuple[int, ...], tuple[int, ...]]  # (context tokens, continuation tokens)
Runner = Callable[["PackedBatch"], torch.Tensor]  # batch -> LM-head input [B, T, D]


@dataclass
class PackedBatch:
    """Rows of packed contexts and continuations, and where each pair's targets are."""

    input_ids: torch.Tensor  # [B, T]
    position_ids: torch.Tensor | None  # [B, T]; None for plain causal rows
    segments: torch.Tensor | None  # [B, T]: 0 context, i > 0 continuation i, -1 padding
    positions: torch.Tensor  # [M] distinct flat indices into B*T whose logits are needed
    select: torch.Tensor  # [N] per target token: its predicting position, as an index into positions
    targets: torch.Tensor  # [N]
    spans: list[tuple[int, int]]  # per scored pair: its [a, b) range in select/targets
    pairs: list[int]  # per span: index of the distinct pair it scores

    @property
    def num_tokens(self) -> int:
        return self.input_ids.numel()

    def key(self) -> bytes:
        """Identifies the batch's content, so a later run on the same requests can find it."""
        h = hashlib.sha1(str(tuple(self.input_ids.shape)).encode())
        for t in (self.input_ids, self.position_ids, self.segments):
            if t is not None:
                h.update(t.numpy().tobytes())
        return h.digest()

    def model_inputs(self, dtype: torch.dtype, device) -> dict:
        """Keyword arguments for the model's forward (mask built here: it depends on dtype)."""
        inputs = {"input_ids": self.input_ids.to(device), "use_cache": False}
        if self.segments is None:  # plain rows, right padding: the causal mask hides it
            return inputs
        seg = self.segments
        q, k = seg[:, :, None], seg[:, None, :]  # [B, T, 1], [B, 1, T]
        idx = torch.arange(seg.shape[1])
        causal = idx[None, :, None] >= idx[None, None, :]
        allowed = causal & (q >= 0) & ((k == 0) | (k == q))
        allowed |= torch.eye(seg.shape[1], dtype=torch.bool)  # padding rows see themselves: no NaN
        mask = torch.zeros(allowed.shape, dtype=dtype).masked_fill_(~allowed, torch.finfo(dtype).min)
        inputs["attention_mask"] = mask[:, None].to(device)  # [B, 1, T, T], additive
        inputs["position_ids"] = self.position_ids.to(device)
        return inputs


# ---------------------------------------------------------------- planning (pure)


def effective_pair(context: Sequence[int], continuation: Sequence[int], max_length: int) -> Pair:
    """The context HFLM really conditions on: (context + continuation) cut to max_length + 1 from the left."""
    assert len(context) > 0 and 0 < len(continuation) <= max_length
    whole = (list(context) + list(continuation))[-(max_length + 1):]
    return tuple(whole[: len(whole) - len(continuation)]), tuple(continuation)


def distinct_pairs(requests, max_length: int) -> tuple[list[Pair], list[int]]:
    """Deduplicated effective pairs of lm-eval token requests, and each request's pair index."""
    index: dict[Pair, int] = {}
    where = []
    for _, context, continuation in requests:
        pair = effective_pair(context, continuation, max_length)
        where.append(index.setdefault(pair, len(index)))
    return list(index), where


def _rows(pairs: Sequence[Pair], row_cap: int, pack_limit: int | None):
    """Group pairs by context; a group longer than ``row_cap`` spills into more rows.

    Pairs longer than ``pack_limit`` (a sliding attention window, which the 4-D mask does
    not express) get rows of their own that must run unpacked; returns (packable, unpacked).
    """
    groups: dict[tuple[int, ...], list[int]] = {}
    alone = []
    for i, (context, continuation) in enumerate(pairs):
        if pack_limit is not None and len(context) + len(continuation) - 1 > pack_limit:
            alone.append((context, [i]))
        else:
            groups.setdefault(context, []).append(i)
    rows = []
    for context, members in groups.items():
        row: list[int] = []
        length = len(context)
        for i in members:
            extra = len(pairs[i][1]) - 1
            if row and length + extra > row_cap:
                rows.append((context, row))
                row, length = [], len(context)
            row.append(i)
            length += extra
        rows.append((context, row))
    return rows, alone


def _row_length(pairs: Sequence[Pair], row) -> int:
    context, members = row
    return len(context) + sum(len(pairs[i][1]) - 1 for i in members)


def plan_batches(pairs: Sequence[Pair], batch_tokens: int, pad_id: int = 0,
                 row_cap: int = PACKED_ROW_CAP, pack_limit: int | None = None) -> list[PackedBatch]:
    """Pack pairs into length-sorted rows and the rows into batches of at most ``batch_tokens``."""
    batches = []
    for rows in _rows(pairs, row_cap, pack_limit):  # packed and unpacked rows never share a batch
        rows = sorted(rows, key=lambda r: (-_row_length(pairs, r), r[0]))
        lengths = [_row_length(pairs, r) for r in rows]
        for a, b in _split(lengths, batch_tokens):
            batches.append(_pack(pairs, rows[a:b], lengths[a], pad_id))
    return batches


def _split(lengths: Sequence[int], budget: int) -> list[tuple[int, int]]:
    """Cut descending ``lengths`` into batches [a, b) minimising padded tokens plus a per-batch cost.

    Dynamic programme over the end of the last batch; a batch's width is its first
    (longest) row, and it holds at most ``budget`` tokens (or one row).
    """
    n = len(lengths)
    cost, start = [0.0] + [math.inf] * n, [0] * (n + 1)
    for b in range(1, n + 1):
        for a in range(b - 1, -1, -1):
            if b - a > 1 and (b - a) * lengths[a] > budget:
                break
            c = cost[a] + (b - a) * lengths[a] + BATCH_OVERHEAD_TOKENS
            if c < cost[b]:
                cost[b], start[b] = c, a
    spans, b = [], n
    while b > 0:
        spans.append((start[b], b))
        b = start[b]
    return spans[::-1]


def _pack(pairs: Sequence[Pair], rows, width: int, pad_id: int) -> PackedBatch:
    """Tensors for one batch of rows (right padding)."""
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    pos = torch.zeros((len(rows), width), dtype=torch.long)
    seg = torch.full((len(rows), width), -1, dtype=torch.long)
    select, targets, spans, order = [], [], [], []
    index: dict[int, int] = {}  # flat position -> its index in positions
    for r, (context, members) in enumerate(rows):
        c = len(context)
        ids[r, :c] = torch.tensor(context)
        pos[r, :c] = torch.arange(c)
        seg[r, :c] = 0
        offset = c
        for s, i in enumerate(members, start=1):
            cont = pairs[i][1]
            n = len(cont) - 1  # the last continuation token is never an input
            ids[r, offset: offset + n] = torch.tensor(cont[:-1], dtype=torch.long)
            pos[r, offset: offset + n] = torch.arange(c, c + n)
            seg[r, offset: offset + n] = s
            start = len(select)
            # the context's last position predicts every continuation's first token: computed once
            select += [index.setdefault(r * width + c - 1, len(index))]
            select += [index.setdefault(r * width + offset + j, len(index)) for j in range(n)]
            targets += cont
            spans.append((start, len(select)))
            order.append(i)
            offset += n
    plain = all(len(members) == 1 for _, members in rows)
    return PackedBatch(
        input_ids=ids, position_ids=None if plain else pos, segments=None if plain else seg,
        positions=torch.tensor(list(index), dtype=torch.long),
        select=torch.tensor(select, dtype=torch.long), targets=torch.tensor(targets, dtype=torch.long),
        spans=spans, pairs=order,
    )


# ---------------------------------------------------------------- running


def head_input(model: nn.Module, batch: PackedBatch) -> torch.Tensor:
    """The LM head's input [B, T, D] for a batch; the head itself is skipped (scoring applies it)."""
    return output_embeddings_input(model, **batch.model_inputs(model.dtype, input_device(model)))


def head_logits(model: nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    """What the CausalLM's forward does after its last norm (logit scaling and soft-capping included)."""
    logits = model.get_output_embeddings()(hidden)
    config = model.config
    if getattr(config, "logits_scaling", None):  # granite
        logits = logits / config.logits_scaling
    if getattr(config, "final_logit_softcapping", None):  # gemma2/3
        cap = config.final_logit_softcapping
        logits = torch.tanh(logits / cap) * cap
    return logits


class Answer(NamedTuple):
    """What scoring one (context, continuation) pair gives."""

    logprob: float  # the continuation's log-likelihood: lm-eval's loglikelihood
    greedy: bool  # every continuation token is the argmax: lm-eval's is_greedy
    mean_prob: float  # the mean over its tokens of their softmax probability: the cloze rule (see cloze.py)


@torch.no_grad()
def score_batch(model: nn.Module, batch: PackedBatch, hidden: torch.Tensor,
                softmax_dtype: torch.dtype | None = None) -> list[Answer]:
    """The :class:`Answer` of every pair of the batch, from the head's input [B, T, D]."""
    flat = hidden.reshape(-1, hidden.shape[-1])
    positions = batch.positions.to(flat.device)
    owner, targets = batch.select.to(flat.device), batch.targets.to(flat.device)
    vocab = model.get_output_embeddings().weight.shape[0]
    step = max(1, HEAD_CHUNK_ELEMENTS // vocab)
    logprob = torch.empty(len(targets), dtype=softmax_dtype or hidden.dtype, device=flat.device)
    greedy = torch.empty(len(targets), dtype=torch.bool, device=flat.device)
    for a in range(0, len(positions), step):
        logp = F.log_softmax(head_logits(model, flat[positions[a: a + step]]), dim=-1, dtype=softmax_dtype)
        mine = (owner >= a) & (owner < a + step)
        rows, tgt = owner[mine] - a, targets[mine]
        logprob[mine] = logp[rows, tgt].to(logprob.dtype)
        greedy[mine] = logp.argmax(dim=-1)[rows] == tgt
    logprob, greedy = logprob.cpu(), greedy.cpu()
    prob = logprob.double().exp()
    return [Answer(float(logprob[a:b].sum()), bool(greedy[a:b].all()), float(prob[a:b].mean()))
            for a, b in batch.spans]


class FastLM(HFLM):
    """HFLM with packed, head-sparse scoring; same log-likelihoods, same metrics.

    ``runner`` maps a packed batch to the LM head's input; the default runs ``model``.
    The reuse path (evaluation.quality.reuse) swaps in runners that record or resume from the
    original model's residual stream.
    """

    def __init__(self, model: nn.Module, tokenizer, batch_size: int = 16, *,
                 batch_tokens: int | None = None, runner: Runner | None = None, **hflm_kwargs):
        with building_in_memory_hflm():
            super().__init__(pretrained=model, tokenizer=tokenizer, batch_size=batch_size, **hflm_kwargs)
        per_batch = batch_size if isinstance(batch_size, int) else 16
        self.batch_tokens = batch_tokens or per_batch * TOKENS_PER_REQUEST
        self.runner: Runner = runner or (lambda batch: head_input(self.model, batch))

    def plan(self, requests) -> tuple[list[Pair], list[int], list[PackedBatch]]:
        """Distinct pairs, each request's pair index, and the batches that score the pairs."""
        pairs, where = distinct_pairs(requests, self.max_length)
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        window = getattr(self.model.config, "sliding_window", None)
        return pairs, where, plan_batches(pairs, self.batch_tokens, pad_id=pad, pack_limit=window)

    def _answers(self, requests, quiet: bool = False) -> list[Answer]:
        """The :class:`Answer` of each lm-eval token request ``(key, context, continuation)``."""
        pairs, where, batches = self.plan(requests)
        answers: list[Answer | None] = [None] * len(pairs)
        for batch in tqdm(batches, disable=quiet or len(batches) < 2, desc="Scoring (fast)"):
            hidden = self.runner(batch)
            for i, answer in zip(batch.pairs, score_batch(self.model, batch, hidden, self.softmax_dtype)):
                answers[i] = answer
        return [answers[i] for i in where]

    def _loglikelihood_tokens(self, requests, disable_tqdm: bool = False, override_bs=None):
        results = [(answer.logprob, answer.greedy) for answer in self._answers(requests, disable_tqdm)]
        for (request_str, _, _), answer in zip(requests, results):
            if request_str is not None:
                self.cache_hook.add_partial("loglikelihood", request_str, answer)
        return results

    def cloze(self, requests) -> list[float]:
        """The cloze score of each ``(left, candidate, right)`` request (:mod:`evaluation.quality.cloze`):
        the mean softmax probability of the candidate's tokens after the left text (a causal model
        never sees the right). Tokenized as lm-eval tokenizes a loglikelihood request."""
        tokens = [(None, *self._encode_pair(left, candidate)) for left, candidate, _right in (r.args for r in requests)]
        return [answer.mean_prob for answer in self._answers(tokens)]


def make_fast(model: nn.Module, tokenizer, batch_size: int = 16):
    """The scorer registry's constructor (``SCORERS["fast"]``): a :class:`FastLM`; for an encoder the masked LM's
    cloze scorer (:class:`evaluation.quality.masked_lm.MaskedLM`), for an encoder-decoder the sentinel one
    (:class:`evaluation.quality.sentinel_lm.SentinelLM`)."""
    batch_size, kind = batch_size if isinstance(batch_size, int) else 16, kind_of(model)
    if kind == MASKED:
        return MaskedLM(model, tokenizer, batch_size)
    if kind == SEQ2SEQ:
        return SentinelLM(model, tokenizer, batch_size)
    return FastLM(model, tokenizer, batch_size=batch_size)
