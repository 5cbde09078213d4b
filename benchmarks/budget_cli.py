"""The CLI's angular analysis of a model read from disk, whole and under a memory budget: the anonymous memory peak
(what the process holds for itself, without the checkpoint's mapped pages).

    .venv/bin/python -m benchmarks.budget_cli [--budget 1GiB] [--folder /tmp/layercut-budget-model]

The model: a random Llama (hidden 2048, 16 layers, MLP 5632, vocabulary 49152) saved in bfloat16 and loaded in
float32 (3.44 GiB), written once by ``benchmarks/offload.py``'s writer. Each run is the installed command in a fresh
process (``python -m evaluation.cli --method angular --num_layers 4 --task arc_easy --limit 2``),
its ``RssAnon`` read from outside every 5 ms. The load runs the rate probe (a prefill and decode steps), then the
analysis and both models' answers to 2 ARC-Easy questions. Writes ``benchmarks/results/budget_cli.json``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import REPO, harness
from benchmarks.offload import write_model
from benchmarks.record import write_result

_GIB = 2**30


def anonymous(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    return 0


def run(folder: Path, budget: str | None) -> dict:
    """One CLI run in a fresh process and a fresh cache: its anonymous peak and wall time."""
    command = [sys.executable, "-m", "evaluation.cli", "--model", str(folder), "--dtype", "float32", "--method",
               "angular", "--num_layers", "4", "--task", "arc_easy", "--limit", "2", "--no_cache"]
    if budget:
        command += ["--memory_budget", budget]
    env = {**os.environ, "LAYERCUT_CACHE": tempfile.mkdtemp(prefix="layercut-budget-"), "HF_HUB_OFFLINE": "1",
           "HF_DATASETS_OFFLINE": "1"}
    peak = 0
    with harness.Clock() as clock:
        child = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 text=True)
        while child.poll() is None:
            try:
                peak = max(peak, anonymous(child.pid))
            except (FileNotFoundError, ProcessLookupError):
                break
            time.sleep(0.005)
        output = child.communicate()[0]
    if child.returncode:
        raise SystemExit(f"the CLI failed ({child.returncode}):\n{output[-3000:]}")
    return {"budget": budget, "peak_anonymous_GiB": round(peak / _GIB, 2), "wall_s": round(clock.wall, 1)}


def main() -> None:
    parser = harness.parser(__doc__)
    parser.add_argument("--budget", default="1GiB")
    parser.add_argument("--folder", type=Path, default=Path("/tmp/layercut-budget-model"))
    args = parser.parse_args()
    shape = argparse.Namespace(hidden=2048, layers=16, intermediate=5632, vocab=49152, dtype="bfloat16")
    args.folder.mkdir(parents=True, exist_ok=True)
    write_model(args.folder, shape)
    runs = [run(args.folder, None), run(args.folder, args.budget)]
    result = {"what": "CLI --method angular --num_layers 4 --task arc_easy --limit 2, fresh process and cache",
              "runs": runs}
    path = write_result("budget_cli", result, how="RssAnon of the CLI's process sampled every 5 ms from outside",
                        model="random Llama, hidden 2048, 16 layers, MLP 5632, vocabulary 49152; bfloat16 on disk, "
                              "loaded in float32 (3.44 GiB)")
    print(path.read_text())


if __name__ == "__main__":
    main()
