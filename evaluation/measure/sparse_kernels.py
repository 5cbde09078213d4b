"""2:4 sparsity through PyTorch's semi-structured sparse kernels, where the hardware has them.

``torch.sparse.to_sparse_semi_structured`` stores a 2:4-sparse weight as its kept half plus
metadata, and ``F.linear`` then runs a sparse matmul (cuSPARSELt or CUTLASS). That needs an
NVIDIA GPU of compute capability 8.0 (Ampere) or newer, float16 or bfloat16 weights, and
matrices whose sides are multiples of 64 (rows and columns; PyTorch pads the inputs). Anywhere
else the zeros are multiplied like any other weight: :func:`unavailable` says why, in words
for the speed tab. :func:`accelerated` builds the kernel form of a 2:4 variant for timing; the
variant itself (which benchmarks, generation and export use) stays dense.
"""

from __future__ import annotations

import torch
from torch import nn

from prune.core.architectures import decoder_layers
from prune.core.recipe import Recipe
from prune.core.surgery import clone_layers

_DTYPES = (torch.float16, torch.bfloat16)
_MULTIPLE = 64


def two_four(recipe: Recipe) -> bool:
    """Whether the variant's zeros are the 2:4 pattern (its last sparsify step's)."""
    return recipe.sparsity is not None and recipe.sparsity.pattern == "2:4"


def why_no_gain(recipe: Recipe, model: nn.Module) -> str | None:
    """Why a sparse variant's zeros give no speedup here (None: 2:4 kernels can run; also None for a dense one)."""
    if recipe.sparsity is None:
        return None
    if not two_four(recipe):
        return (f"{recipe.sparsity.short()}: no kernel skips these zeros (only 2:4 has hardware support), so they are "
                "multiplied densely: no speedup, and no memory saved.")
    return unavailable(model)


def unavailable(model: nn.Module) -> str | None:
    """Why PyTorch's 2:4 kernels cannot run this model here; None when they can."""
    weight = next(model.parameters())
    if not hasattr(torch.sparse, "to_sparse_semi_structured"):
        return f"this PyTorch ({torch.__version__}) has no semi-structured sparse tensors."
    if weight.device.type != "cuda":
        return ("2:4 zeros are multiplied densely here: PyTorch's semi-structured sparse kernels run only on NVIDIA "
                "GPUs of compute capability 8.0 (Ampere) or newer, and this model runs on "
                f"{weight.device.type.upper()}.")
    major, minor = torch.cuda.get_device_capability(weight.device)
    if major < 8:
        return (f"this GPU has compute capability {major}.{minor}; PyTorch's 2:4 kernels need 8.0 (Ampere) or newer, "
                "so the zeros are multiplied densely.")
    if weight.dtype not in _DTYPES:
        return (f"PyTorch's 2:4 kernels take float16 or bfloat16 weights; this model is "
                f"{str(weight.dtype).replace('torch.', '')} (load it in bfloat16 to use them).")
    return None


def kernel_matrices(model: nn.Module) -> list[nn.Linear]:
    """Every decoder-layer ``nn.Linear`` whose weight the kernels take: both sides multiples of 64, and
    at least two zeros in every group of four consecutive inputs."""
    return [module for layer in decoder_layers(model) for module in layer.modules()
            if isinstance(module, nn.Linear) and _is_two_four(module.weight)]


def _is_two_four(weight: torch.Tensor) -> bool:
    rows, cols = weight.shape
    if rows % _MULTIPLE or cols % _MULTIPLE:
        return False
    return bool(((weight.detach().reshape(rows, cols // 4, 4) == 0).sum(-1) >= 2).all())


def accelerated(model: nn.Module) -> tuple[nn.Module, int]:
    """A copy of a 2:4 variant whose qualifying weights are semi-structured sparse tensors, and their count.

    Call only where :func:`unavailable` is None. The copy has its own layer modules (the variant
    keeps its dense weights) and shares everything else.
    """
    from torch.sparse import to_sparse_semi_structured

    fast = clone_layers(model)
    targets = kernel_matrices(fast)
    for module in targets:
        module.weight = nn.Parameter(to_sparse_semi_structured(module.weight.detach()), requires_grad=False)
    return fast, len(targets)
