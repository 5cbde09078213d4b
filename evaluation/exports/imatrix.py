"""llama.cpp's importance matrix, computed from LayerCut's calibration text on the model in memory.

As ``llama-imatrix`` collects it (llama-cpp-python 0.3.36's ``tools/imatrix/imatrix.cpp``, ``collect_imatrix``): for
each matrix a layer multiplies activations by (``blk.*``; the output layer only with ``--process-output``, so not
here), the sum over tokens of each input column's square and the number of tokens; ``llama-quantize`` hands llama.cpp
their quotient (``load_imatrix``), which :func:`imatrix` returns. The quantizer then weights each value's rounding
error by its column's importance (``quantize_row_*_impl``).
"""

from __future__ import annotations

import gguf
import numpy as np
import torch
from torch import nn

from prune.core.architectures import decoder_layers

from evaluation.core.jobs import Progress
from evaluation.exports.gguf_out import FAMILIES

BATCH = 8  # windows per forward pass

def imatrix(model: nn.Module, windows: torch.Tensor, progress: Progress | None = None) -> dict[str, np.ndarray]:
    """Per GGUF tensor name of each layer's matrices, the mean square of every input column over the tokens of
    ``windows`` ([N, T] ids); ``progress`` hears of each window and may raise (a Stop)."""
    names = gguf.get_tensor_name_map(FAMILIES[model.config.model_type].arch, len(decoder_layers(model)))
    sums: dict[str, torch.Tensor] = {}
    hooks = []
    for path, module in model.named_modules():
        name = names.get_name(f"{path}.weight", try_suffixes=(".weight",)) if isinstance(module, nn.Linear) else None
        if name is not None and name.startswith("blk."):
            hooks.append(module.register_forward_pre_hook(_collector(sums, name)))
    device = next(model.parameters()).device
    try:
        with torch.no_grad():
            for start in range(0, len(windows), BATCH):
                model(input_ids=windows[start:start + BATCH].to(device), use_cache=False)
                done = min(start + BATCH, len(windows))
                if progress is not None:
                    progress(done / len(windows), f"Importance matrix for llama.cpp: {done} of {len(windows)} "
                                                  "calibration windows")
    finally:
        for hook in hooks:
            hook.remove()
    return {name: (total / windows.numel()).float().numpy() for name, total in sums.items()}


def _collector(sums: dict[str, torch.Tensor], name: str):
    """A forward pre-hook adding each token's squared input columns to ``sums[name]``."""
    def collect(module: nn.Module, args: tuple) -> None:
        columns = args[0].detach().reshape(-1, args[0].shape[-1]).double()  # [tokens, in_features]
        sums[name] = sums.get(name, 0) + columns.square().sum(0).cpu()
    return collect
