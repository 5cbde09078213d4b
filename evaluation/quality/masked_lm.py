"""The scorer of a masked LM (BERT, RoBERTa, ELECTRA): cloze requests, the candidate masked in the blank.

The sparsity study's rule for an encoder (:mod:`evaluation.quality.cloze`): the text with the candidate in the
blank, each of the candidate's tokens replaced by the mask token, in one pass; the score is the mean over those
tokens of the softmax probability the model gives the candidate's token at its position. All of a candidate's
tokens are masked at once (the space before it included where the tokenizer gives that a token), so a word of
several tokens is scored without seeing its own other pieces. A text longer than the model's positions keeps its
end, where the blank is: the first tokens of the context go (the first special token stays). The study's own code
loaded ELECTRA as a causal LM (``ElectraForCausalLM``) and read it as one; LayerCut reads an encoder as the masked LM
it was trained as, and says so in the README.

A masked LM defines no log-likelihood of a continuation and generates nothing: the other request kinds refuse
in one line.
"""

from __future__ import annotations

import torch
from lm_eval.api.model import LM
from torch import nn

from prune.core.devices import input_device
from prune.core.errors import InvalidInput
from prune.core.hidden import output_embeddings_input


_ONLY_CLOZE = ("{what} needs a causal language model; an encoder or an encoder-decoder answers cloze tasks only "
               "(cbt_style_cn, cbt_style_ne, cbt_style_p, and CBT from the hub).")


class ClozeOnly(LM):
    """lm-eval's scorer interface for a model that fills blanks: ``cloze`` answered (by a subclass), the other
    request kinds refused in one line."""

    def __init__(self, model: nn.Module, tokenizer, batch_size: int = 16):
        super().__init__()
        self.model, self.tokenizer, self.batch_size = model, tokenizer, batch_size

    @torch.no_grad()
    def cloze(self, requests) -> list[float]:
        """The cloze score of each ``(left, candidate, right)`` request: each made ready by :meth:`prepare` (its input
        ids first), then scored by :meth:`scores` in batches of similar input lengths."""
        items = [self.prepare(*request.args) for request in requests]
        order = sorted(range(len(items)), key=lambda i: -len(items[i][0]))
        found = [0.0] * len(items)
        for a in range(0, len(order), self.batch_size):
            batch = order[a: a + self.batch_size]
            for i, score in zip(batch, self.scores([items[i] for i in batch])):
                found[i] = score
        return found

    def prepare(self, left: str, candidate: str, right: str) -> tuple:
        """One request as the model reads it: its input ids first."""
        raise NotImplementedError

    def scores(self, items: list[tuple]) -> list[float]:
        """The cloze score of each prepared request, in one pass."""
        raise NotImplementedError

    def length_limit(self, fallback: int) -> int:
        """Tokens one input may hold: the tokenizer's limit where it states one, else ``fallback``."""
        stated = getattr(self.tokenizer, "model_max_length", None)
        return stated if isinstance(stated, int) and stated < 1_000_000 else fallback

    def padded(self, rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Rows of token ids right-padded into one tensor [B, T], and its attention mask (1 on the rows' own ids)."""
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        ids = torch.full((len(rows), max(len(r) for r in rows)), pad, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for i, row in enumerate(rows):
            ids[i, :len(row)] = torch.tensor(row)
            mask[i, :len(row)] = 1
        return ids, mask

    def loglikelihood(self, requests, disable_tqdm: bool = False):
        raise InvalidInput(_ONLY_CLOZE.format(what="A multiple-choice task scored by log-likelihood"))

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False):
        raise InvalidInput(_ONLY_CLOZE.format(what="Perplexity"))

    def generate_until(self, requests, disable_tqdm: bool = False):
        raise InvalidInput(_ONLY_CLOZE.format(what="A generation task"))


class MaskedLM(ClozeOnly):
    """A masked LM's cloze scores: the candidate's tokens masked in the blank."""

    def __init__(self, model: nn.Module, tokenizer, batch_size: int = 16):
        if tokenizer.mask_token_id is None:
            raise InvalidInput("This encoder's tokenizer has no mask token: it cannot fill a blank.")
        super().__init__(model, tokenizer, batch_size)

    @property
    def max_length(self) -> int:
        """Tokens one pass may hold: the tokenizer's limit where it states one, else the model's positions less 2
        (RoBERTa's positions start after its padding index)."""
        return self.length_limit(self.model.config.max_position_embeddings - 2)

    def prepare(self, left: str, candidate: str, right: str) -> tuple[list[int], list[int], list[int]]:
        """(input ids with the candidate's tokens masked, their positions, the candidate's token ids). The candidate's
        tokens are those that hold any of its characters or the space before it (a byte-level BPE may give that space
        a token of its own: it goes with the word, as lm-eval's continuation takes it)."""
        start, end = len(left) - left.endswith(" "), len(left) + len(candidate)
        found = self.tokenizer(left + candidate + right, return_offsets_mapping=True)
        ids, offsets = list(found["input_ids"]), found["offset_mapping"]
        where = [i for i, (a, b) in enumerate(offsets) if b > a and a < end and b > start]
        if not where:
            raise InvalidInput(f"The candidate {candidate!r} makes no token of its own here.")
        excess = len(ids) - self.max_length
        if excess > 0:  # keep the first special token and the end, where the blank is
            ids = ids[:1] + ids[1 + excess:]
            where = [i - excess for i in where]
        targets = [ids[i] for i in where]
        for i in where:
            ids[i] = self.tokenizer.mask_token_id
        return ids, where, targets

    def scores(self, items: list[tuple[list[int], list[int], list[int]]]) -> list[float]:
        """One padded pass over ``items``; the LM head runs only at the masked positions."""
        device = input_device(self.model)
        input_ids, attention = self.padded([ids for ids, _, _ in items])
        hidden = output_embeddings_input(self.model, input_ids=input_ids.to(device),
                                         attention_mask=attention.to(device))  # [B, T, D], after the head's transform
        rows = [row for row, (_, where, _) in enumerate(items) for _ in where]
        columns = [i for _, where, _ in items for i in where]
        logits = self.model.get_output_embeddings()(hidden[rows, columns])  # [masked tokens, vocab]
        targets = torch.tensor([t for _, _, tokens in items for t in tokens], device=logits.device)
        probs = logits.float().softmax(-1).gather(1, targets[:, None])[:, 0].double().cpu()
        out, at = [], 0
        for _, where, _ in items:
            out.append(float(probs[at: at + len(where)].mean()))
            at += len(where)
        return out
