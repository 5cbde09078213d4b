"""Attention and MLP importance (He et al. 2024, "What Matters in Transformers? Not All Attention Is Needed").

As the authors compute it (CASE-Lab-UMD/LLM-Drop, ``layer_drop.py`` with ``layer_drop_norm``): a
block f with input x on the residual stream scores 1 − cos(x, x + f(x)), the output taken
*with* the residual, the cosine averaged over every token of every calibration window; a
small score means the block hardly turns the stream, so it is the first to drop. Attention
Drop and MLP Drop drop the n lowest-scored blocks of one kind, wherever they are
(:func:`prune.depth.result.lowest`). The whole-layer scores are the authors' Block Drop: the same
cosine between a layer's input and output (ShortGPT's Block Influence), for every block of
consecutive layers too.

Where LayerCut differs, on purpose: every block is scored from one forward pass of the
original model with hooks (the authors run layer by layer, which is the same arithmetic);
the calibration is LayerCut's (WikiText-2 validation windows by default, the authors use
C4); what a block adds is read where it joins the residual stream, so post-norms (Gemma 2,
OLMo 2) and Granite's residual multiplier are part of f(x); with Pythia's parallel residual
the MLP's input is the layer's input, not the stream after attention.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager

import numpy as np
import torch
from torch import nn

from prune.core.devices import input_device
from prune.core.architectures import architecture_of, check_causal, decoder_layers, get_path, residual_scale
from prune.depth.result import ImportanceResult
from prune.drop.sublayers import ATTENTION, MLP
from prune.depth.methods import register
from prune.depth.methods.block_influence import influence
from prune.depth.methods.similarity import block_matrix

# sink(layer, h_in, attention's addition, MLP's addition, h_out), all [B, T, D] in the model's dtype
Sink = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], None]


@register("sublayer", "Attention / MLP drop (He et al. 2024)", sublayers=True)
def sublayer_drop(ctx) -> ImportanceResult:
    """1 − cos(x, x + f(x)) of every attention and MLP block, all tokens; whole layers as the authors' Block Drop."""
    scores, residual = block_scores(ctx.model, ctx.input_ids)
    blocks = block_matrix([residual], of_cosines=influence)
    parallel = parallel_residual(ctx.model)
    warnings = ["Attention and MLP read the same input in this model (parallel residual): each block is scored "
                "from the layer's input."] if parallel else []
    return ImportanceResult("sublayer", blocks, "1 − cos(h_in, h_out)", layer_scores=blocks[0].copy(),
                            warnings=warnings, sublayer_scores=scores)


def parallel_residual(model: nn.Module) -> bool:
    flag = architecture_of(model).sublayers.parallel_flag
    return bool(flag and getattr(model.config, flag, False))


@torch.no_grad()
def block_scores(model: nn.Module, input_ids: torch.Tensor, batch_size: int = 8) -> tuple[dict, torch.Tensor]:
    """({"attention": [L], "mlp": [L]} mean 1 − cos(x, x + f(x)), the residual stream [L+1, N, T, D]) in one pass."""
    count = len(decoder_layers(model))
    parallel = parallel_residual(model)
    sums = {ATTENTION: np.zeros(count), MLP: np.zeros(count)}
    tokens = 0
    chunks = []
    for batch in input_ids.split(batch_size):
        states: list[torch.Tensor | None] = [None] * (count + 1)

        def sink(i, h, attention, mlp, out):
            h, attention, mlp = h.float(), attention.float(), mlp.float()
            middle = h if parallel else h + attention  # the residual stream the MLP reads
            sums[ATTENTION][i] += _one_minus_cos_sum(h, h + attention)
            sums[MLP][i] += _one_minus_cos_sum(middle, middle + mlp)
            states[i] = h.cpu()
            if i == count - 1:
                states[count] = out.float().cpu()

        with reading_blocks(model, sink):
            model(input_ids=batch.to(input_device(model)), use_cache=False)
        tokens += batch.numel()
        chunks.append(torch.stack(states))  # [L+1, B, T, D]
    return {kind: total / tokens for kind, total in sums.items()}, torch.cat(chunks, dim=1)


def _one_minus_cos_sum(before: torch.Tensor, after: torch.Tensor) -> float:
    return float((1 - torch.nn.functional.cosine_similarity(before, after, dim=-1)).sum(dtype=torch.float64))


@contextmanager
def reading_blocks(model: nn.Module, sink: Sink):
    """Hand ``sink`` each layer's input, what its attention and its MLP add to the residual stream, and its output.

    The additions are read from the modules the architecture table names (a block, or the post-norm after
    it) and scaled by the residual multiplier where there is one, so that h_in + attention + MLP = h_out.
    """
    check_causal(model, "Reading what attention and MLP blocks add to the residual stream")  # post-norm encoders
    sub = architecture_of(model).sublayers
    scale = residual_scale(model)
    seen: dict[tuple[int, str], torch.Tensor] = {}

    def keep_input(i):
        def hook(_module, args, kwargs):
            seen[(i, "in")] = args[0] if args else kwargs["hidden_states"]
        return hook

    def keep_addition(i, kind):
        def hook(_module, _args, output):
            seen[(i, kind)] = output[0] if isinstance(output, tuple) else output
        return hook

    def finish(i):
        def hook(_module, _args, output):
            h = seen.pop((i, "in"))
            attention, mlp = (seen.pop((i, kind)).reshape(h.shape) * scale for kind in (ATTENTION, MLP))
            sink(i, h, attention, mlp, output[0] if isinstance(output, tuple) else output)
        return hook

    handles = []
    for i, layer in enumerate(decoder_layers(model)):
        handles.append(layer.register_forward_pre_hook(keep_input(i), with_kwargs=True))
        handles.append(get_path(layer, sub.attention_out or sub.attention).register_forward_hook(
            keep_addition(i, ATTENTION)))
        handles.append(get_path(layer, sub.mlp_out or sub.mlp).register_forward_hook(keep_addition(i, MLP)))
        handles.append(layer.register_forward_hook(finish(i)))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
