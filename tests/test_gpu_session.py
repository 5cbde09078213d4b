"""The GPU session script cannot rot between device draws (issue 53): its small mode runs the same steps on the CPU, end
to end, writing every figure into the folder it is given and none into benchmarks/results."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from benchmarks import regional_compile
from conftest import REPO

RESULTS = REPO / "benchmarks" / "results"


def _stamps() -> dict:
    return {path: path.stat().st_mtime_ns for path in RESULTS.rglob("*.json")}


@pytest.mark.slow  # tiny models through every step, their decode compiled: 60-80 s on a busy 2-core machine
def test_the_small_session_runs_every_step_on_the_cpu_and_writes_its_figures_only_where_it_is_told(tmp_path):
    before = _stamps()
    env = {**os.environ, "TFULL": "30"}  # the last step stopped at its limit: what it measured is still written
    done = subprocess.run(["bash", "benchmarks/gpu_session.sh", "small", str(tmp_path)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    decode = json.loads((tmp_path / "decode_floor_dry_run.json").read_text())
    assert [(r["model"], r["mode"]) for r in decode["rows"]] == [
        (model, mode) for mode in ("eager", "compiled") for model in ("original", "cut", "int8", "int4")]
    assert all("error" not in r and r["decode_ms"] > 0 for r in decode["rows"])
    assert all(r["compile_s"] > 0 for r in decode["rows"] if r["mode"] == "compiled")
    first = json.loads((tmp_path / "gpu_check_dry_run_decode.json").read_text())
    assert first["finished"] and first["steps"][0]["step"] == "load (random weights)"
    rest = json.loads((tmp_path / "gpu_check_dry_run.json").read_text())
    assert rest["steps"] and not any(s["step"].startswith("decode") for s in rest["steps"])  # run once, first
    assert {p.name for p in (tmp_path / "res").iterdir()} >= {"decode_floor_dry_run.json", "gpu_check_dry_run.json"}
    assert "two_four.log: skipped" in done.stdout
    assert _stamps() == before  # benchmarks/results untouched


def test_the_regional_benchmark_says_how_far_the_compile_grew_from_the_shallowest_to_the_deepest():
    rows = [{"method": "regional", "layers": 8, "compile_s": 20.0}, {"method": "regional", "layers": 32,
                                                                     "compile_s": 22.0},
            {"method": "whole", "layers": 8, "compile_s": 30.0}, {"method": "whole", "layers": 32, "error": "stopped"}]
    assert regional_compile.flatness(rows, "regional") == pytest.approx(1.1)
    assert regional_compile.flatness(rows, "whole") is None  # one point measured: nothing to compare
