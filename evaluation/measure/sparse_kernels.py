"""2:4 sparsity through PyTorch's semi-structured sparse kernels, where the hardware has them.

``torch.sparse.to_sparse_semi_structured`` stores a 2:4-sparse weight as its kept half plus
metadata, and ``F.linear`` then runs a sparse matmul (cuSPARSELt or CUTLASS). That needs an
NVIDIA GPU of compute capability 8.0 (Ampere) or newer, float16 or bfloat16 weights, and
matrices whose sides are multiples of 64 (rows and columns; PyTorch pads the inputs). Anywhere
else the zeros are multiplied like any other weight: :func:`unavailable` says why, in words
for the speed tab. :func:`accelerated` builds the kernel form of a 2:4 variant for timing; the
variant itself (which benchmarks, generation and export use) stays dense. The kernel form is timed only at the
batch sizes where ``benchmarks/two_four_kernels.py`` measured the kernels faster than dense on a GPU of the same name
(:func:`kernel_batches`); at the others, and wherever nothing was measured, the variant is timed dense.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from prune.core.architectures import decoder_layers
from prune.core.devices import input_device
from prune.core.offload import is_offloaded
from prune.core.recipe import Recipe
from prune.core.storage import is_quantized
from prune.core.surgery import clone_layers

_DTYPES = (torch.float16, torch.bfloat16)
_MULTIPLE = 64
KERNEL, DENSE = "2:4 semi-structured", "dense"  # what a speed row's details say ran ("kernel")
RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "two_four_kernels.json"


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
    device = input_device(model)
    if not hasattr(torch.sparse, "to_sparse_semi_structured"):
        return f"this PyTorch ({torch.__version__}) has no semi-structured sparse tensors."
    if device.type != "cuda":
        return ("2:4 zeros are multiplied densely here: PyTorch's semi-structured sparse kernels run only on NVIDIA "
                f"GPUs of compute capability 8.0 (Ampere) or newer, and this model runs on {device.type.upper()}.")
    if is_offloaded(model):
        return ("its weights are read layer by layer for each pass (from files or CPU memory), so the 2:4 zeros are "
                "multiplied densely: PyTorch's 2:4 kernels need the weights held on the GPU.")
    major, minor = torch.cuda.get_device_capability(weight.device)
    if major < 8:
        return (f"this GPU has compute capability {major}.{minor}; PyTorch's 2:4 kernels need 8.0 (Ampere) or newer, "
                "so the zeros are multiplied densely.")
    if weight.dtype not in _DTYPES:
        return (f"PyTorch's 2:4 kernels take float16 or bfloat16 weights; this model is "
                f"{str(weight.dtype).replace('torch.', '')} (load it in bfloat16 to use them).")
    return None


def kernel_matrices(model: nn.Module) -> list[tuple[nn.Module, str, nn.Linear]]:
    """Every decoder-layer ``nn.Linear`` whose weight the kernels take (both sides multiples of 64, and at least two
    zeros in every group of four consecutive inputs), as (the module holding it, its name there, it)."""
    return [(parent, name, module) for layer in decoder_layers(model) for parent in layer.modules()
            for name, module in parent.named_children()
            if isinstance(module, nn.Linear) and _is_two_four(module.weight)]


def _is_two_four(weight: torch.Tensor) -> bool:
    rows, cols = weight.shape
    if rows % _MULTIPLE or cols % _MULTIPLE or is_quantized(weight):  # the 2:4 kernels take float weights
        return False
    return bool(((weight.detach().reshape(rows, cols // 4, 4) == 0).sum(-1) >= 2).all())


class TwoFourLinear(nn.Module):
    """A linear layer whose weight is a semi-structured sparse tensor, fed a 2-D input.

    PyTorch's sparse tensor takes ``F.linear`` on a matrix; a 3-D input (batch, tokens, features)
    goes through ``matmul``, which for some inputs (a one-token decode step on an H100, seen with
    a 7B shape) broadcasts with ``expand``, an operation the sparse tensor refuses.
    """

    def __init__(self, linear: nn.Linear):
        super().__init__()
        from torch.sparse import to_sparse_semi_structured

        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight = nn.Parameter(to_sparse_semi_structured(linear.weight.detach()), requires_grad=False)
        self.bias = linear.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = F.linear(x.reshape(-1, self.in_features), self.weight, self.bias)
        return flat.reshape(*x.shape[:-1], self.out_features)


def accelerated(model: nn.Module) -> tuple[nn.Module, str]:
    """What to time for a 2:4 variant, and the speed tab's note on it.

    Call only where :func:`unavailable` is None. The copy has its own layer modules (the variant
    keeps its dense weights) with every qualifying linear layer a :class:`TwoFourLinear`, and
    shares everything else. It must answer a one-token forward pass; where PyTorch's kernels
    refuse this model, the variant itself is timed, densely, and the note gives the reason.
    """
    fast = clone_layers(model)
    targets = kernel_matrices(fast)
    for parent, name, module in targets:
        setattr(parent, name, TwoFourLinear(module))
    try:
        with torch.no_grad():
            fast(input_ids=torch.zeros(1, 1, dtype=torch.long, device=next(model.parameters()).device))
    except (NotImplementedError, RuntimeError) as error:
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
        return model, f"PyTorch's 2:4 kernels refused this model ({reason}), so it was timed dense."
    return fast, f"timed with PyTorch's 2:4 semi-structured sparse kernels ({len(targets)} matrices)."


def measured_wins(device_name: str, path: Path = RESULTS) -> dict[int, bool]:
    """Per number of input rows ``benchmarks/two_four_kernels.py`` measured on a GPU named ``device_name``: whether
    the 2:4 products, summed over its shapes, took less time than the dense ones. Nothing measured there: {}."""
    if not path.is_file():
        return {}
    totals: dict[int, list[float]] = {}  # rows → [dense ms, sparse ms]
    for run in json.loads(path.read_text())["runs"]:
        for row in run["rows"] if run["device"] == device_name else ():
            total = totals.setdefault(int(row["rows"]), [0.0, 0.0])
            total[0], total[1] = total[0] + row["dense_ms"], total[1] + row["sparse_ms"]
    return {rows: sparse < dense for rows, (dense, sparse) in totals.items()}


def kernel_batches(batch_sizes, wins: dict[int, bool]) -> tuple[int, ...]:
    """The batch sizes to time with the kernels: those whose decode step (one input row per sequence) the kernels
    were measured to win; a batch size not measured runs dense."""
    return tuple(b for b in batch_sizes if wins.get(b, False))


def device_wins(model: nn.Module) -> dict[int, bool]:
    """:func:`measured_wins` for the GPU ``model`` runs on ({} off CUDA)."""
    device = input_device(model)
    return measured_wins(torch.cuda.get_device_name(device)) if device.type == "cuda" else {}


def routing_note(batch_sizes, with_kernels: tuple[int, ...]) -> str:
    """Which batch sizes ran the kernels, for the speed tab."""
    dense = [b for b in batch_sizes if b not in with_kernels]
    if not dense:
        return ""
    return (f"Timed dense at batch {', '.join(map(str, dense))}: benchmarks/two_four_kernels.py did not measure "
            "PyTorch's 2:4 kernels faster than dense there on this GPU.")
