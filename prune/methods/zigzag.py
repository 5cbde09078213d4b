"""Zigzag persistence (Gardinazzi et al. 2024): layers whose topology persists are removable."""

from __future__ import annotations


from ..calibration import Calibration, token_windows
from ..hidden import residual_stream
from ..result import ImportanceResult, blocks_from_layers
from ..topology import layer_persistence, persistence_cuts
from . import register


@register("zigzag", "Zigzag persistence (Gardinazzi et al. 2024)")
def zigzag(ctx, *, prompts: int = 256, prompt_len: int = 16, k: int = 5) -> ImportanceResult:
    """Inter-layer persistence of 1-cycles in k-NN graphs of last-token states; high = removable."""
    # Many short prompts: the method needs points (one per prompt), not long contexts.
    cal = Calibration(**{**ctx.calibration.__dict__, "n_samples": prompts, "seq_len": prompt_len})
    states = residual_stream(ctx.model, token_windows(ctx.tokenizer, cal), batch_size=64, last_token_only=True)
    persistence = layer_persistence(states.numpy(), k=k)  # [L], higher = more removable
    count = len(persistence)
    cuts = {name: layers for name, layers in persistence_cuts(persistence).items() if 0 < len(layers) < count}
    top = persistence.max() if persistence.max() > 0 else 1.0
    importance = 1.0 - persistence / top  # lower = more removable, like every other method
    return ImportanceResult(
        "zigzag", blocks_from_layers(importance), "1 − persistence / max", layer_scores=importance,
        cuts=cuts, block_exact=False,
        params={"prompts": int(states.shape[1]), "prompt_len": prompt_len, "k": k,
                "persistence": [float(v) for v in persistence]},
    )
