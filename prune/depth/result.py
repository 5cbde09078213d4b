"""The result every importance method returns, and the pure choices of a block or of sub-layers from it."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from prune.core.architectures import emptied_stack
from prune.core.surgery import check_cut_size
from prune.core.errors import InvalidCut


@dataclass
class ImportanceResult:
    """Scores over (block size × start layer); lower means more removable.

    ``block_scores[n - 1, start]`` scores removing layers ``start … start + n - 1``
    (end exclusive: the block ``[start, start + n)``); entries past the last layer are NaN
    and blocks touching a protected layer are +inf.
    """

    method: str
    block_scores: np.ndarray  # [L, L]
    score_label: str
    layer_scores: np.ndarray | None = None  # [L], one per layer, lower = more removable
    params: dict = field(default_factory=dict)
    cuts: dict[str, list[int]] = field(default_factory=dict)  # named non-contiguous layer sets
    block_exact: bool = True  # False when blocks are the sum of single-layer scores
    elapsed_s: float = 0.0  # how long scoring took when it ran, also for a result read back from the cache
    warnings: list[str] = field(default_factory=list)  # what the user should know before trusting it
    from_cache: bool = field(default=False, compare=False)  # read back by prune.score, not computed now; never saved

    def timing(self) -> str:
        """'scored in 14.8 s', or 'read from the cache (scored in 14.8 s earlier)': the UI's and the CLI's words."""
        scored = f"scored in {self.elapsed_s:.1f} s"
        return f"read from the cache ({scored} earlier)" if self.from_cache else scored
    # {"attention": [L], "mlp": [L]}: one score per attention / MLP block, lower = more removable
    sublayer_scores: dict[str, np.ndarray] | None = None

    @property
    def cut_sizes(self) -> dict[str, dict]:
        """What each named cut removes: ``{"10%": {"layers": 12, "fraction": 0.4}}``."""
        return {name: {"layers": len(layers), "fraction": len(layers) / self.num_layers}
                for name, layers in self.cuts.items()}

    @property
    def num_layers(self) -> int:
        return self.block_scores.shape[1]

    def best_block(self, n: int) -> tuple[int, int]:
        """The most removable block of ``n`` layers as ``(start, end)``, end exclusive."""
        check_cut_size(n, self.num_layers)
        row = self.block_scores[n - 1, : self.num_layers - n + 1]
        if not np.isfinite(row).any():
            raise InvalidCut(f"Every block of {n} layers touches a protected layer.")
        start = int(np.nanargmin(np.where(np.isfinite(row), row, np.inf)))
        return start, start + n

    def best_blocks(self) -> dict[int, tuple[int, int]]:
        """Best block for every size that has at least one allowed block."""
        best = {}
        for n in range(1, self.num_layers):
            try:
                best[n] = self.best_block(n)
            except InvalidCut:
                continue
        return best

    def best_layers(self, k: int) -> list[int]:
        """The ``k`` most removable single layers (not necessarily contiguous), never a protected one.

        A layer is protected when its single-layer block is +inf; only the other layers' scores
        (NaN ones left out) are ranked, so a raw score of a protected layer never wins. Of an encoder-decoder's
        layers (``params["stacks"]``), a layer whose removal would empty its stack is passed over for the next.
        """
        scores = np.asarray(self.layer_scores if self.layer_scores is not None else self.block_scores[0], float)
        allowed = np.flatnonzero(~np.isposinf(self.block_scores[0]) & ~np.isnan(scores))
        chosen: list[int] = []
        for i in allowed[np.argsort(scores[allowed], kind="stable")]:
            if len(chosen) == k:
                break
            if emptied_stack(self.params.get("stacks", []), [*chosen, int(i)]) is None:
                chosen.append(int(i))
        if not 0 <= k <= len(chosen):
            raise InvalidCut(f"Only {len(chosen)} of {self.num_layers} layers may be removed, not {k}.")
        return sorted(chosen)

    def best_sublayers(self, kind: str, n: int) -> list[int]:
        """The layers whose ``kind`` block ("attention" or "mlp") is among the ``n`` most removable."""
        if not self.sublayer_scores or kind not in self.sublayer_scores:
            raise InvalidCut(f"This analysis ({self.method}) has no {kind} scores: analyze with the sub-layer "
                             "method (attention / MLP drop) to drop blocks inside layers.")
        return lowest(self.sublayer_scores[kind], n)

    def to_json(self) -> dict:
        def encode(array):
            return None if array is None else [[_num(v) for v in row] for row in np.atleast_2d(array)]

        return {
            "method": self.method, "score_label": self.score_label, "params": self.params,
            "block_scores": encode(self.block_scores),
            "layer_scores": None if self.layer_scores is None else encode(self.layer_scores)[0],
            "cuts": self.cuts, "cut_sizes": self.cut_sizes, "block_exact": self.block_exact,
            "elapsed_s": self.elapsed_s, "warnings": self.warnings,
            "sublayer_scores": None if self.sublayer_scores is None else
            {kind: encode(row)[0] for kind, row in self.sublayer_scores.items()},
        }

    @classmethod
    def from_json(cls, data: dict) -> "ImportanceResult":
        layer, sub = data.get("layer_scores"), data.get("sublayer_scores")
        return cls(
            method=data["method"], score_label=data["score_label"], params=data.get("params", {}),
            block_scores=np.array([[_unnum(v) for v in row] for row in data["block_scores"]]),
            layer_scores=None if layer is None else np.array([_unnum(v) for v in layer]),
            cuts={k: list(v) for k, v in data.get("cuts", {}).items()},
            block_exact=data.get("block_exact", True), elapsed_s=data.get("elapsed_s", 0.0),
            warnings=list(data.get("warnings", [])),
            sublayer_scores=None if sub is None else {k: np.array([_unnum(v) for v in row]) for k, row in sub.items()},
        )


def lowest(scores: np.ndarray, n: int) -> list[int]:
    """The indices of the ``n`` lowest finite scores, sorted (non-contiguous; NaN and +inf never chosen).

    He et al.'s Attention Drop and MLP Drop: drop the ``n`` blocks whose output changes their input least.
    """
    scores = np.asarray(scores, dtype=float)
    allowed = np.flatnonzero(np.isfinite(scores))
    if not 1 <= n <= len(allowed):
        raise InvalidCut(f"Choose 1…{len(allowed)} blocks, not {n}.")
    return sorted(int(i) for i in allowed[np.argsort(scores[allowed], kind="stable")][:n])


def _num(value) -> float | str | None:
    """JSON has no NaN/inf: encode them as null / "inf"."""
    value = float(value)
    if np.isnan(value):
        return None
    if np.isinf(value):
        return "inf" if value > 0 else "-inf"
    return value


def _unnum(value) -> float:
    return np.nan if value is None else float(value)


def blocks_from_layers(layer_scores: np.ndarray, protected: set[int] = frozenset()) -> np.ndarray:
    """[L, L] block matrix where a block scores the sum of its layers' scores."""
    layer_scores = np.asarray(layer_scores, dtype=float)
    count = len(layer_scores)
    blocks = np.full((count, count), np.nan)
    prefix = np.concatenate([[0.0], np.cumsum(layer_scores)])
    for n in range(1, count + 1):
        blocks[n - 1, : count - n + 1] = prefix[n:] - prefix[:-n]
    return protect(blocks, protected)


def protect(blocks: np.ndarray, protected) -> np.ndarray:
    """Mark every block that contains a protected layer as never removable (+inf)."""
    blocks = blocks.copy()
    count = blocks.shape[1]
    for n in range(1, count + 1):
        for start in range(count - n + 1):
            if any(start <= p < start + n for p in protected):
                blocks[n - 1, start] = np.inf
    return blocks
