"""PyTorch's 2:4 semi-structured kernels against dense, one matrix at a time, at Llama-2-7B's shapes.

    python -m benchmarks.two_four_kernels      (an NVIDIA GPU of compute capability 8.0 or newer)

For each weight shape of a Llama-2-7B layer (4096 → 4096, 4096 → 11008, 11008 → 4096) and each number of
input rows (tokens × batch: 1, 4, 8, 16, 32 as one-token decode steps, then 128, 1024, 4096), a bfloat16 weight
is pruned to 2:4 by magnitude and the product timed side by side in one run (CUDA events, median of 50 after 10
warm-ups): dense ``F.linear``, and LayerCut's ``TwoFourLinear`` (the sparse weight fed a 2-D input) with each of
PyTorch's two backends, cuSPARSELt (its default) and CUTLASS. It also checks that the sparse product equals the
dense product of the pruned weight
(bfloat16 tolerance), and whether a plain ``nn.Linear`` holding the sparse weight takes the 3-D input a model
gives it. The figures go to ``benchmarks/results/two_four_kernels.json`` (this GPU's run replaces an earlier run on
a GPU of the same name), which the speed tab reads: it times the 2:4 kernels only at batch sizes where they won here
(``evaluation.measure.sparse_kernels.measured_wins``).
"""

from __future__ import annotations

import json

import torch
import torch.nn.functional as F
from torch import nn
from torch.sparse import SparseSemiStructuredTensor

from benchmarks import harness
from benchmarks.record import provenance, results_dir, write_result
from evaluation.measure.sparse_kernels import TwoFourLinear
from prune.sparsity.masks import _magnitude_mask

SHAPES = ((4096, 4096), (4096, 11008), (11008, 4096))  # (in, out)
ABOUT = ("benchmarks/two_four_kernels.py: per GPU, per weight shape (in → out) and number of input rows, the median ms "
         "of dense F.linear and of TwoFourLinear (cuSPARSELt). evaluation.measure.sparse_kernels.measured_wins reads "
         "it: the 2:4 kernels are timed only at batch sizes where they won on a GPU of the same name.")
ROWS = (1, 4, 8, 16, 32, 128, 1024, 4096)  # the speed tab's batch sizes (1–32: a decode step's rows), then prefills


def timed(work, repeats: int = 50) -> float:
    for _ in range(10):
        work()
    times = []
    for _ in range(repeats):
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        work()
        end.record()
        torch.cuda.synchronize()
        times.append(begin.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def main() -> None:
    harness.parser(__doc__).parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("two_four_kernels.py times PyTorch's 2:4 kernels on a CUDA GPU, and this machine has none.")
    torch.manual_seed(0)
    cusparselt = getattr(torch.backends, "cusparselt", None)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"cuSPARSELt {cusparselt.version() if cusparselt and cusparselt.is_available() else 'not built in'}\n")
    print("| in → out | rows | dense (ms) | cuSPARSELt (ms) | dense ÷ cuSPARSELt | CUTLASS (ms) | dense ÷ CUTLASS | "
          "max error ÷ max output | nn.Linear, 3-D input |")
    print("|---|---|---|---|---|---|---|---|---|")
    cutlass_note, measured = "", []
    with torch.no_grad():
        for fan_in, fan_out in SHAPES:
            dense = nn.Linear(fan_in, fan_out, bias=False, dtype=torch.bfloat16, device="cuda")
            dense.weight.masked_fill_(_magnitude_mask(dense.weight, 0.5, (2, 4)), 0)  # as LayerCut's magnitude 2:4
            fast = TwoFourLinear(dense)  # cuSPARSELt, PyTorch's default where it is built in
            SparseSemiStructuredTensor._FORCE_CUTLASS = True
            cutlass = TwoFourLinear(dense)
            SparseSemiStructuredTensor._FORCE_CUTLASS = False
            plain = nn.Linear(fan_in, fan_out, bias=False, dtype=torch.bfloat16, device="cuda")
            plain.weight = nn.Parameter(fast.weight, requires_grad=False)
            for rows in ROWS:
                x = torch.randn(rows, 1, fan_in, dtype=torch.bfloat16, device="cuda") if rows <= 32 else \
                    torch.randn(1, rows, fan_in, dtype=torch.bfloat16, device="cuda")
                expected = F.linear(x, dense.weight)
                error = (fast(x).float() - expected.float()).abs().max().item() / expected.float().abs().max().item()
                dense_ms = timed(lambda: F.linear(x, dense.weight))
                sparse_ms = timed(lambda: fast(x))
                try:
                    cutlass_ms = timed(lambda: cutlass(x))
                except RuntimeError as failure:  # CUTLASS's kernels: compute capability 8.x only
                    cutlass_ms = float("nan")
                    cutlass_note = str(failure).splitlines()[0]
                try:
                    plain(x)
                    plain_note = "runs"
                except (NotImplementedError, RuntimeError) as failure:
                    plain_note = "fails: " + str(failure).splitlines()[0][:60]
                measured.append({"in": fan_in, "out": fan_out, "rows": rows, "dense_ms": dense_ms,
                                 "sparse_ms": sparse_ms})
                print(f"| {fan_in} → {fan_out} | {rows} ({tuple(x.shape)}) | {dense_ms:.3f} | {sparse_ms:.3f} | "
                      f"{dense_ms / sparse_ms:.2f} | {cutlass_ms:.3f} | {dense_ms / cutlass_ms:.2f} | {error:.1e} | "
                      f"{plain_note} |")
    if cutlass_note:
        print(f"\nCUTLASS: {cutlass_note}")
    record({**provenance("cuda"), "cusparselt": str(cusparselt.version()) if cusparselt and cusparselt.is_available()
            else None, "rows": measured})


def record(run: dict) -> None:
    """This GPU's run into the results file, in place of an earlier run on a GPU of the same name."""
    path = results_dir() / "two_four_kernels.json"
    found = json.loads(path.read_text()) if path.is_file() else {}
    runs = [r for r in found.get("runs", []) if r["device"] != run["device"]] + [run]
    path = write_result("two_four_kernels", {"about": found.get("about", ABOUT), "runs": runs}, device="cuda",
                        how="per run: CUDA events, median of 50 after 10 warm-ups; this GPU's run replaces an earlier "
                            "run on a GPU of the same name")
    print(f"\nwritten to {path}")


if __name__ == "__main__":
    main()
