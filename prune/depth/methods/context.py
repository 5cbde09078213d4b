"""What a method is given: the model, its tokenizer, the calibration, and shared states."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import torch

from prune.core.calibration import Calibration, token_windows
from prune.core.hidden import residual_streams


@dataclass
class Context:
    model: torch.nn.Module
    tokenizer: object
    calibration: Calibration
    parent: Context | None = None  # set on a resample: states are read from the parent's
    windows: torch.Tensor | slice | None = None  # [N'] indices into the parent's windows, repeats allowed

    @cached_property
    def input_ids(self) -> torch.Tensor:
        """[N, T] calibration windows."""
        if self.parent is not None:
            return self.parent.input_ids[self.windows]
        return token_windows(self.tokenizer, self.calibration)

    @cached_property
    def residuals(self) -> list[torch.Tensor]:
        """One [L+1, N, T, D] residual stream of the original model on the calibration per stack of layers (T5 has
        two: the encoder's, then the decoder's)."""
        if self.parent is not None:
            return [stream[:, self.windows] for stream in self.parent.residuals]
        return residual_streams(self.model, self.input_ids)

    @property
    def residual(self) -> torch.Tensor:
        """[L+1, N, T, D]: the stream of a model of one stack (what the methods that read a causal LM's loss use)."""
        (stream,) = self.residuals
        return stream

    def resample(self, windows: torch.Tensor | slice) -> Context:
        """A view on some of these windows (a bootstrap draw) that reuses the computed states.

        A slice gives a view without copying the states. Results on a resample describe other
        windows than ``calibration`` names: never cache them under its key (``use_cache=False``).
        """
        return Context(self.model, self.tokenizer, self.calibration, parent=self, windows=windows)

    def reads_windows(self) -> bool:
        """Whether a method run on this context read its windows or states (zigzag draws its own)."""
        return "input_ids" in self.__dict__ or "residuals" in self.__dict__
