"""The scorer of an encoder-decoder (T5): cloze requests, the candidate as the target of a sentinel.

T5 was trained to fill spans: its input has a span replaced by a sentinel token (``<extra_id_0>``), its target is
that sentinel, the span, then the next sentinel. The sparsity study's rule for an encoder-decoder
(:mod:`evaluation.quality.cloze`): the encoder reads the text with the blank replaced by ``<extra_id_0>``; the
decoder reads the target ``<extra_id_0> candidate <extra_id_1>`` shifted right (after its start token); the score
is the mean over the candidate's tokens of the probability the decoder gives each where it predicts it. The
closing sentinel is not scored. An input longer than :attr:`SentinelLM.max_length` tokens keeps its end, where the
blank is.
"""

from __future__ import annotations

from torch import nn

from prune.core.devices import input_device
from prune.core.errors import InvalidInput

from evaluation.quality.masked_lm import ClozeOnly

SENTINELS = ("<extra_id_0>", "<extra_id_1>")
T5_LENGTH = 512  # the input length T5 was trained on: the limit where the tokenizer states none


class SentinelLM(ClozeOnly):
    """An encoder-decoder's cloze scores: the candidate as the span a sentinel stands for."""

    def __init__(self, model: nn.Module, tokenizer, batch_size: int = 16):
        ids = [tokenizer.convert_tokens_to_ids(token) for token in SENTINELS]
        if any(i is None or i == tokenizer.unk_token_id for i in ids):
            raise InvalidInput(f"This encoder-decoder's tokenizer has no {SENTINELS[0]} and {SENTINELS[1]} sentinel "
                               "tokens: it cannot fill a blank as T5 does.")
        super().__init__(model, tokenizer, batch_size)
        self.sentinels = ids

    @property
    def max_length(self) -> int:
        """Tokens the encoder reads: the tokenizer's limit where it states one, else T5's training length."""
        return self.length_limit(T5_LENGTH)

    def prepare(self, left: str, candidate: str, right: str) -> tuple[list[int], list[int]]:
        """(the encoder's input ids, the target ids: the opening sentinel, the candidate's tokens, the closing one)."""
        source = self.tokenizer(left + SENTINELS[0] + right)["input_ids"][-self.max_length:]
        words = self.tokenizer(candidate, add_special_tokens=False)["input_ids"]
        if not words:
            raise InvalidInput(f"The candidate {candidate!r} makes no token of its own.")
        return source, [self.sentinels[0], *words, self.sentinels[1]]

    def scores(self, items: list[tuple[list[int], list[int]]]) -> list[float]:
        """One padded pass over ``items``: each target's candidate tokens' mean probability."""
        device = input_device(self.model)
        (sources, mask), (targets, _) = self.padded([s for s, _ in items]), self.padded([t for _, t in items])
        decoder_ids = self.model.prepare_decoder_input_ids_from_labels(labels=targets)  # shifted right
        logits = self.model(input_ids=sources.to(device), attention_mask=mask.to(device),
                            decoder_input_ids=decoder_ids.to(device), use_cache=False).logits  # [B, L, V]
        probs = logits.float().softmax(-1).gather(2, targets.to(device)[:, :, None])[:, :, 0].double().cpu()
        return [float(probs[row, 1: len(target) - 1].mean()) for row, (_, target) in enumerate(items)]

