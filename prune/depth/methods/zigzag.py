"""Zigzag persistence (Gardinazzi et al. 2024): layers whose topology persists are removable.

The authors' pipeline (see ``prune.depth.topology``) on LayerCut's calibration text: one point per
line of it (a paragraph of the built-in text or of WikiText-2; the authors used SST sentences
or Pile documents), read after each layer's pre-feed-forward norm and after the final norm.
"""

from __future__ import annotations

import numpy as np

from prune.core.calibration import bos_token, load_text
from prune.core.errors import InvalidInput
from prune.core.hidden import norm_last_tokens
from prune.depth.result import ImportanceResult, blocks_from_layers
from prune.depth.topology import betti_numbers, inter_layer_persistence, knn_zigzag, persistence_cuts
from prune.depth.methods import register


@register("zigzag", "Zigzag persistence (Gardinazzi et al. 2024)",
          allowed={"texts": range(2, 20_001), "max_tokens": range(1, 8193), "k": range(1, 101)})
def zigzag(ctx, *, texts: int = 256, max_tokens: int = 32, k: int = 5) -> ImportanceResult:
    """The authors' zigzag persistence (last token after each layer's post-attention norm, k-NN clique complexes, H1 inter-layer persistence r; cuts "10%"/"20%" = layers with r ≥ 0.9/0.8·max r, any number of them), on one point per line of the calibration text instead of their SST sentences or Pile documents; by default 256 texts cut at 32 tokens, so it takes under a minute on a CPU (the authors: thousands, up to 2048 tokens — set texts and max_tokens)."""  # noqa: E501 (register() makes the first line the method's description: one line)
    diagrams, params, notes = text_diagrams(ctx, texts=texts, max_tokens=max_tokens, k=k)
    return persistence_result(diagrams[1], params["representations"] - 1, params=params, warnings=notes)


def text_diagrams(ctx, *, texts: int = 1000, max_tokens: int = 2048, k: int = 5):
    """(H0 and H1 bars over the L + 1 representations, params, warnings) for the calibration's texts.

    ``evaluation.exports.zigzag_csv.write_bars_csv`` writes the bars as the authors' CSV.
    """
    chunks = whole_texts(load_text(ctx.calibration))[:texts]
    bos = bos_token(ctx.tokenizer, ctx.calibration)
    start = [] if bos is None else [bos]
    ids = [(start + row)[:max_tokens] for row in ctx.tokenizer(chunks, add_special_tokens=False)["input_ids"] if row]
    if k >= len(ids):  # before the hidden states: k-NN needs more than k points
        raise InvalidInput(f"Zigzag's k = {k} needs more than k texts; the calibration gives {len(ids)} "
                           "(one per non-empty line).")
    notes = []
    if len(ids) < texts:
        notes.append(f"The calibration text gives {len(ids)} texts (one per non-empty line) where {texts} were asked; "
                     "the authors used thousands (SST sentences, Pile documents), so expect noisier cuts. "
                     "WikiText-2 validation gives about 1,800.")
    states = norm_last_tokens(ctx.model, ids)  # [L+1, N, D]
    params = {"texts": len(ids), "max_tokens": max_tokens, "k": k, "representations": int(states.shape[0])}
    return knn_zigzag(states.numpy(), k=k), params, notes


def whole_texts(text: str) -> list[str]:
    """One text per non-empty line (a paragraph here and in WikiText-2), without WikiText's ' = Heading = ' lines."""
    lines = (line.strip() for line in text.splitlines())
    return [line for line in lines if line and not (line.startswith("= ") and line.endswith(" ="))]


def persistence_result(bars, num_layers: int, *, params: dict | None = None,
                       warnings: list[str] | None = None) -> ImportanceResult:
    """Scores and the authors' cuts from H1 zigzag bars over L + 1 representations (the last: the final norm).

    Layer i scores 1 − r_i / max r (lower = more removable, as for every method); the authors
    cut layers with high r.
    """
    persistence = inter_layer_persistence(bars, num_layers + 1)  # [L+1]
    top = persistence.max()
    importance = 1.0 - persistence[:-1] / (top if top > 0 else 1.0)
    notes = list(warnings or [])
    betti = betti_numbers(bars, num_layers + 1)
    empty = [int(i) for i in np.flatnonzero(betti == 0)]
    if empty:
        where = ", ".join("the final norm" if i == num_layers else f"layer {i}" for i in empty[:6])
        notes.append(f"No 1-cycle at {len(empty)} of {num_layers + 1} representations ({where}"
                     f"{', …' if len(empty) > 6 else ''}): LayerCut counts their 0/0 inter-layer persistence as 0; "
                     "the authors' benchmark.py would get NaN there and cut nothing. More texts help.")
    cuts = {}
    for name, layers in persistence_cuts(persistence).items():
        if len(layers) == num_layers:
            notes.append(f"The {name} cut would remove every layer; it is left out.")
        elif layers:
            cuts[name] = layers
            if 2 * len(layers) > num_layers:
                notes.append(f"The {name} cut removes {len(layers)} of {num_layers} layers "
                             f"({100 * len(layers) / num_layers:.0f} %): more than half the model.")
    return ImportanceResult(
        "zigzag", blocks_from_layers(importance), "1 − r / max r", layer_scores=importance,
        cuts=cuts, block_exact=False, warnings=notes,
        params={**(params or {}), "persistence": [float(v) for v in persistence],
                "betti_1": [int(v) for v in betti]},
    )
