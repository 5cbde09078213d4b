"""The logit lens: the next token each layer's residual stream already points to, read through the model's own head.

Row 0 reads h_0, the embeddings' output (the input of the first layer); row r > 0 reads the output of
the model's (r−1)-th layer, each through the final norm and then the LM head (the standard logit lens,
nostalgebraist 2020). The last row reads the last layer's output, which is the model's own next-token
prediction. For a compressed model the rows are its own layers, labelled with the original's indices
they kept, so the two tables line up by depth.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from prune.core.architectures import final_norm
from prune.core.surgery import private_copy

from evaluation.explain.cut import Check, head_input
from evaluation.quality.fast_lm import head_logits
from evaluation.measure.generation import encode_prompt
from evaluation.measure.measurement import ORIGINAL
from evaluation.core.pool import removed_blocks

LAST_POSITIONS = 24  # columns shown by default: the prompt's last tokens (a chat template adds many before them)


@dataclass(frozen=True)
class LogitLens:
    """A layers × positions table of the top next token read from the residual stream."""

    layers: tuple[int | None, ...]  # per row: None for the embeddings' output, else the original layer it comes out of
    positions: tuple[str, ...]  # per column: the input token there (decoded)
    start: int  # index in the prompt's ids of the first column
    token_ids: tuple[tuple[int, ...], ...]  # [row][column] the most likely next token
    tokens: tuple[tuple[str, ...], ...]  # … decoded
    probs: tuple[tuple[float, ...], ...]  # … its probability
    marked: tuple[int, ...] = ()  # original layers a compared recipe removes or drops blocks of

    @property
    def row_labels(self) -> tuple[str, ...]:
        return tuple("embeddings" if layer is None else f"layer {layer}" for layer in self.layers)


@torch.no_grad()
def logit_lens(model: nn.Module, tokenizer, ids: Sequence[int], *, layers: Sequence[int] | None = None,
               marked: Sequence[int] = (), last: int | None = LAST_POSITIONS, check: Check | None = None) -> LogitLens:
    """The lens of ``model`` on prompt ``ids``, over its ``last`` positions (None: all).

    ``layers``: the original index of each of the model's layers (default 0, 1, …).
    """
    ids, model = list(ids), private_copy(model)  # our hooks never reach the shared model
    start = 0 if last is None else max(0, len(ids) - last)
    stream: list[torch.Tensor] = []
    head_in = head_input(model, torch.tensor([ids]), stream=stream, check=check)[0, start:]  # [P, D']
    norm = final_norm(model)
    weight = model.get_output_embeddings().weight
    rows = []
    for hidden in stream[:-1]:  # [1, T, D]; the last row is the model's own head input
        normed = norm(hidden[0, start:].to(weight.device, weight.dtype))
        rows.append(torch.softmax(head_logits(model, normed).float(), -1))
    rows.append(torch.softmax(head_logits(model, head_in).float(), -1))
    probs, top = torch.stack(rows).max(dim=-1)  # [R, P]
    kept = list(range(len(stream) - 1)) if layers is None else list(layers)
    if len(kept) != len(stream) - 1:
        raise ValueError(f"{len(kept)} layer labels for a model of {len(stream) - 1} layers.")
    decode = _decoder(tokenizer)
    return LogitLens(layers=(None, *kept), positions=tuple(decode(t) for t in ids[start:]), start=start,
                     token_ids=tuple(tuple(r) for r in top.tolist()),
                     tokens=tuple(tuple(decode(t) for t in r) for r in top.tolist()),
                     probs=tuple(tuple(r) for r in probs.tolist()), marked=tuple(sorted(marked)))


def _decoder(tokenizer):
    cache: dict[int, str] = {}

    def decode(token: int) -> str:
        if token not in cache:
            cache[token] = tokenizer.decode([token])
        return cache[token]

    return decode


def kept_layers(recipe, num_layers: int) -> list[int]:
    """The original indices of the layers a recipe's model keeps, in order."""
    gone = removed_blocks(recipe, num_layers)
    return [i for i in range(num_layers) if "layer" not in gone.get(i, ())]


def lenses(sides: Sequence, tokenizer, prompt: str, num_layers: int, *, last: int | None = LAST_POSITIONS,
           check: Check | None = None) -> Mapping[str, LogitLens]:
    """The lens of every side (``evaluation.serving.variants.Side``, the original first) on one prompt.

    The original's table marks every layer any compared recipe removes or drops blocks of; each
    compressed model's, the layers its own recipe does.
    """
    ids = encode_prompt(tokenizer, prompt)
    marks = {side.label: sorted(removed_blocks(side.recipe, num_layers)) for side in sides[1:]}
    out = {}
    for side in sides:
        if side.label == ORIGINAL:
            marked = sorted({layer for found in marks.values() for layer in found})
            out[side.label] = logit_lens(side.model, tokenizer, ids, marked=marked, last=last, check=check)
        else:
            out[side.label] = logit_lens(side.model, tokenizer, ids, layers=kept_layers(side.recipe, num_layers),
                                         marked=marks[side.label], last=last, check=check)
    return out
