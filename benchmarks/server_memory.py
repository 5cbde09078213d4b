"""A shared server's resident memory under rounds of visitors, with glibc's defaults and with LayerCut's
allocator settings (evaluation/core/allocator.py), side by side in one run.

    .venv/bin/python -m benchmarks.server_memory [--rounds 10 8] [--budget-gib 1] [--mmap-kib 256 4096]

Each case runs in a process of its own (a clean heap): a CPU backend loads the default model, its
variant cache gets a budget of ``--budget-gib``, then each round's visitors build a magnitude-sparsity
variant each (a sparsity of their own), as jobs queued on the one device, from the worker threads of
one pool that lives across rounds as Gradio's does. Baseline: resident memory with the model loaded
and its weights read once (they are mapped from the checkpoint file: pages count once read);
peak: the kernel's high-water mark of it (VmHWM, reset after loading by /proc/self/clear_refs);
settled: after the last job. "glibc defaults" makes ``configure`` and ``release`` no-ops; the
other cases time every ``release`` (malloc_trim after each job); ``--mmap-kib`` adds a case per
size with glibc's mmap threshold also fixed there (the setting evaluation/core/allocator.py leaves
alone). Build time is CPU-seconds per build (the process's CPU time over the jobs, so other work on
the machine inflates it less). Writes ``benchmarks/results/server_memory.json``.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from benchmarks import REPO, harness
from benchmarks.record import write_result

CASES = ("glibc defaults", "LayerCut allocator")
_M_MMAP_THRESHOLD = -3  # mallopt's parameter number (malloc.h)
_MIB = 2**20


def main() -> None:
    parser = harness.parser(__doc__)
    parser.add_argument("--rounds", type=int, nargs="+", default=[10, 8], help="visitors in each round")
    parser.add_argument("--budget-gib", type=float, default=1.0, help="the variant cache's budget")
    parser.add_argument("--mmap-kib", type=int, nargs="*", default=[], help="also fix the mmap threshold here")
    parser.add_argument("--case", choices=CASES, help=argparse.SUPPRESS)  # set in the child processes
    args = parser.parse_args()
    if args.case:
        threshold = args.mmap_kib[0] * 1024 if args.mmap_kib else None
        print(json.dumps(measure(args.case, threshold, args.rounds, int(args.budget_gib * 2**30))))
        return
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
    print(f"rounds of {args.rounds} visitors, variant budget {args.budget_gib:g} GiB, default model, CPU; MiB")
    print(f"{'case':<36}{'baseline':>10}{'peak':>10}{'settled':>10}{'held':>10}{'build':>9}  release (malloc_trim)")
    cases = {}
    for case, kib in [(case, []) for case in CASES] + [(CASES[1], [kib]) for kib in args.mmap_kib]:
        command = [sys.executable, "-m", __spec__.name, "--case", case, "--rounds", *map(str, args.rounds),
                   "--budget-gib", str(args.budget_gib), "--mmap-kib", *map(str, kib)]
        found = json.loads(subprocess.run(command, env=env, check=True, capture_output=True, text=True)
                           .stdout.splitlines()[-1])
        label = f"{case}, mmap ≥ {kib[0]} KiB" if kib else case
        print(row(label, found), flush=True)
        cases[label] = found
    write_result("server_memory", {"rounds": args.rounds, "budget_gib": args.budget_gib, "cases": cases},
                 model="default model", how="each case in a process of its own; bytes: baseline VmRSS after loading, "
                 "peak VmHWM, settled VmRSS after the last job, held by the variant cache; build: CPU-seconds per "
                 "build; trims: seconds per malloc_trim")


def measure(case: str, threshold: int | None, rounds: list[int], budget: int) -> dict:
    """One case's figures, in this process."""
    from evaluation.core import allocator

    if threshold is not None:
        ctypes.CDLL("libc.so.6").mallopt(_M_MMAP_THRESHOLD, threshold)
    trims: list[float] = []
    if case == CASES[0]:
        allocator.configure, allocator.release = (lambda: False), (lambda: None)
    else:
        allocator.release = timed(allocator.release, trims)
    from evaluation.serving.backend import Backend
    from evaluation.core.pool import ModelSpec
    from prune.core.recipe import Recipe
    from prune.sparsity.step import Sparsify

    backend = Backend(device="cpu", data_dir="")
    backend.models.variants.budget_bytes = budget
    spec = ModelSpec()
    backend.models.load(spec)
    for tensor in backend.models.model(spec).state_dict().values():  # mapped from the checkpoint: read, they count
        tensor.detach().sum()
    baseline = _status("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM starts again from here
    start, builds = time.process_time(), 0
    with ThreadPoolExecutor(max(rounds)) as pool:  # worker threads that outlive a round, as Gradio's
        for number, visitors in enumerate(rounds):
            levels = [round(0.1 + 0.04 * i + 0.01 * number, 2) for i in range(visitors)]
            list(pool.map(lambda level: backend.models.build(spec, Recipe((Sparsify.of("magnitude", level),)),
                                                             owner=str(level)), levels))
            builds += visitors
    return {"baseline": baseline, "peak": _status("VmHWM"), "settled": _status("VmRSS"),
            "held": backend.models.variants.used_bytes, "budget": budget, "trims": trims,
            "build_cpu_s": (time.process_time() - start) / builds}


def timed(release, into: list[float]):
    """``release``, recording how long each call takes."""
    def run():
        with harness.Clock() as clock:
            release()
        into.append(clock.wall)
    return run


def _status(field: str) -> int:
    """A 'kB' field of /proc/self/status, in bytes."""
    line = next(line for line in Path("/proc/self/status").read_text().splitlines() if line.startswith(field + ":"))
    return int(line.split()[1]) * 1024


def row(case: str, found: dict) -> str:
    """One table row, in MiB; the release times as median and largest."""
    trims = sorted(found["trims"])
    release = f"{len(trims)} calls, median {1e3 * trims[len(trims) // 2]:.1f} ms, max {1e3 * trims[-1]:.1f} ms" \
        if trims else "-"
    mib = [f"{found[key] / _MIB:>10.0f}" for key in ("baseline", "peak", "settled", "held")]
    return f"{case:<36}{''.join(mib)}{found['build_cpu_s']:>8.2f}s  {release}"


if __name__ == "__main__":
    main()
