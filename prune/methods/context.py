"""What a method is given: the model, its tokenizer, the calibration, and shared states."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import torch

from ..calibration import Calibration, token_windows
from ..hidden import residual_stream


@dataclass
class Context:
    model: torch.nn.Module
    tokenizer: object
    calibration: Calibration

    @cached_property
    def input_ids(self) -> torch.Tensor:
        """[N, T] calibration windows."""
        return token_windows(self.tokenizer, self.calibration)

    @cached_property
    def residual(self) -> torch.Tensor:
        """[L+1, N, T, D] residual stream of the original model on the calibration."""
        return residual_stream(self.model, self.input_ids)
