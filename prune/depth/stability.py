"""How stable a method's choice of block is: the bootstrap over calibration windows.

Each resample draws N of the N windows with replacement and re-scores on a view that reuses
the residual stream already computed (no model pass for the methods that only read it).
``ppl`` and ``taylor`` read only the first ``max_samples`` windows of a resample (so a random
subset) and run the model on every resample: a resample costs what their analysis costs.
``zigzag`` reads whole texts of the calibration, not its windows, so resampling cannot move
its choice: it gets a reason instead of fractions.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import torch

from prune.core.errors import InvalidInput
from prune.depth.methods import check_options, get_method
from prune.depth.methods.context import Context

Block = tuple[int, int]


@dataclass(frozen=True)
class Stability:
    """How often each block of ``block_size`` layers wins over ``resamples`` bootstrap draws."""

    method: str
    block_size: int
    chosen: Block  # the choice on the calibration as it is
    wins: tuple[tuple[Block, int], ...]  # (block, resamples won), most wins first
    resamples: int
    windows: int  # calibration windows each resample draws from
    reason: str | None = None  # why there are no resamples, when there are none

    @property
    def fractions(self) -> dict[Block, float]:
        """Block → share of resamples it won, most first."""
        return {block: count / self.resamples for block, count in self.wins}

    @property
    def agreement(self) -> float:
        """Share of resamples that pick the block the calibration as it is picks."""
        return self.fractions.get(self.chosen, 0.0)

    def to_json(self) -> dict:
        return {"method": self.method, "block_size": self.block_size, "chosen": list(self.chosen),
                "wins": [[list(block), count] for block, count in self.wins], "resamples": self.resamples,
                "windows": self.windows, "reason": self.reason}

    @classmethod
    def from_json(cls, data: dict) -> Stability:
        return cls(data["method"], data["block_size"], tuple(data["chosen"]),
                   tuple((tuple(block), count) for block, count in data["wins"]), data["resamples"],
                   data["windows"], data["reason"])

    def summary(self) -> str:
        """One line for a status bar, e.g. "[13, 18) wins 17 of 20 resamples (85 %); runner-up [14, 19) 15 %"."""
        if self.reason:
            return f"{_text(self.chosen)}; {self.reason}"
        (top, count), *rest = self.wins
        line = f"{_text(top)} wins {count} of {self.resamples} resamples ({_percent(count / self.resamples)})"
        if rest:
            line += f"; runner-up {_text(rest[0][0])} {_percent(rest[0][1] / self.resamples)}"
        if top != self.chosen:
            line += f"; without resampling {_text(self.chosen)}"
        return line


def resample_indices(windows: int, resamples: int, seed: int) -> torch.Tensor:
    """[resamples, windows] bootstrap draws (with replacement), the same for the same seed."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(windows, (resamples, windows), generator=generator)


def block_stability(context: Context, method: str, block_size: int, *, resamples: int = 20, seed: int = 0,
                    **options) -> Stability:
    """Re-score ``method`` on bootstrap resamples of the calibration windows and count each best block."""
    spec = get_method(method)
    options = check_options(spec, options)
    if resamples < 1:
        raise InvalidInput("Ask for at least one resample.")
    every = context.resample(slice(None))  # a fresh view, to see whether the method reads the windows
    chosen = spec.func(every, **options).best_block(block_size)
    count = context.input_ids.shape[0]
    stability = dict(method=method, block_size=block_size, chosen=chosen, windows=count)
    if not every.reads_windows():
        return Stability(**stability, wins=(), resamples=0,
                         reason=f"{method} reads whole texts, not the windows, "
                                "so resampling them cannot move its choice")
    wins = Counter(spec.func(context.resample(draw), **options).best_block(block_size)
                   for draw in resample_indices(count, resamples, seed))
    ranked = tuple(sorted(wins.items(), key=lambda item: (-item[1], item[0])))
    return Stability(**stability, wins=ranked, resamples=resamples)


def _text(block: Block) -> str:
    return f"[{block[0]}, {block[1]})"


def _percent(share: float) -> str:
    return f"{100 * share:.0f} %"
