"""Estimates before a job: each job's work counted by hand over made-up rates; the probe on a tiny model."""

import json
import tomllib
from pathlib import Path

import pytest

from evaluation.measure import estimate as E
from evaluation.core.timing import Rates
from evaluation.measure.speed import probe_rates

from conftest import REPO, tiny_model

RATES = Rates(forward_tokens_per_s=100.0, decode_s_per_token=0.05)


def test_forward_and_decode_seconds():
    assert E.forward_s(RATES, 200) == pytest.approx(2.0)
    assert E.forward_s(RATES, 200, compute=0.5) == pytest.approx(1.0)
    assert E.decode_s(RATES, 10) == pytest.approx(0.5)
    assert E.decode_s(RATES, 10, batch=3) == pytest.approx(10 * (0.05 + 2 / 100))  # two more tokens a step


def test_speed_counts_a_warm_up_and_every_repeat_of_every_model():
    # per model: warm-up (prefill 1 s + 1 step) then 2 × (prefill 1 s + 10 steps), all × its compute
    seconds = E.speed(RATES, [1.0, 0.5], batch_sizes=[1], prompt_len=100, new_tokens=11, repeats=2)
    assert seconds == pytest.approx((1.05 + 2 * 1.5) * 1.5)


def test_memory_and_generation():
    assert E.memory(RATES, [1.0], prompt_len=128, new_tokens=16) == pytest.approx(1.28 + 15 * 0.05)
    # a 39-character prompt is 1 + 9 tokens; each answer 10 decode steps; then both read prompt and answer again
    seconds = E.generation(RATES, [1.0, 0.5], prompt="x" * 39, max_new_tokens=11)
    assert seconds == pytest.approx(1.5 * (0.1 + 0.5) + 1.5 * 21 / 100)


def test_the_task_sizes_are_the_ones_the_benchmark_measured():
    """TASKS is read from the package's copy of benchmarks/results/task_tokens.json (an installed LayerCut has no
    benchmarks folder): the copy is that file, shipped in the wheel, and every task it measured has its row."""
    packaged = Path(E.__file__).with_name(E.SIZES)
    measured = REPO / "benchmarks" / "results" / "task_tokens.json"
    assert packaged.read_text(encoding="utf-8") == measured.read_text(encoding="utf-8"), \
        f"{packaged.relative_to(REPO)} differs from {measured.relative_to(REPO)}: python -m benchmarks.task_tokens " \
        "writes both (or copy the result over)"
    data = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert E.SIZES in data["evaluation.measure"]
    tasks = json.loads(measured.read_text(encoding="utf-8"))["tasks"]
    assert set(E.TASKS) == {name for name, size in tasks.items() if "skipped" not in size}
    assert E.TASKS["mmlu"] == E.Task(round(tasks["mmlu"]["tokens_per_document"]), 57, 14042) == E.Task(112, 57, 14042)


def test_benchmarks_count_each_tasks_tokens_per_question():
    assert E.benchmarks(RATES, [1.0], tasks=["arc_easy"], limit=20) == pytest.approx(20 * 46 / 100)
    assert E.benchmarks(RATES, [1.0, 1.0], tasks=["arc_easy"], limit=20, num_fewshot=1) == pytest.approx(4 * 9.2)
    assert E.benchmarks(RATES, [1.0], tasks=["mmlu"], limit=20) == pytest.approx(20 * 57 * 112 / 100)  # per subject
    assert E.benchmarks(RATES, [1.0], tasks=["arc_easy"], limit=None) == pytest.approx(2376 * 46 / 100)  # all
    assert E.benchmarks(RATES, [1.0], tasks=["openbookqa"], limit=10_000) == pytest.approx(500 * 25 / 100)


def test_perplexity_and_the_sweeps():
    assert E.perplexity(RATES, [1.0, 0.5], seq_len=128, windows=4) == pytest.approx(512 / 100 * 1.5)
    # 4 layers, K = 2: the original once, then cuts [0, 2), [1, 3), [2, 4) run 2, 1 and 0 of the 4 layers
    assert E.cut_sweep(RATES, num_layers=4, block_size=2, task="arc_easy", limit=10) == pytest.approx(
        460 * (1 + 3 / 4) / 100)
    assert E.sparsity_sweep(RATES, task="arc_easy", limit=10, points=3, seq_len=128, windows=2, calibrated=1,
                            calibration_tokens=1000) == pytest.approx(3 * (460 + 256) / 100 + 10)


def test_rank_search_healing_and_stability():
    # calibration 300 tokens; the search split 6 times (the original and 5 candidates); the test split twice
    assert E.rank_search(RATES, candidates=5, layers=1, search_tokens=100, test_tokens=400,
                         calibration_tokens=300) == pytest.approx((300 + 600 + 800) / 100)
    settings = dict(steps=10, batch=2, seq_len=50, heldout=4, eval_every=5, columns=[1.0, 0.5, 0.5], ppl_tokens=100)
    # training 1000 tokens a step at half compute, forward and backward (×3); held-out 200 tokens 4 times; then
    # 100 tokens of perplexity for three models of compute 1, ½, ½
    assert E.healing(RATES, 0.5, **settings) == pytest.approx(15 + 4 + 2)
    assert E.healing(RATES, 0.5, budget_s=5, **settings) == pytest.approx(5 + 2)
    assert E.healing(RATES, 0.5, teacher=True, **settings) == pytest.approx(15 + 10 + 4 + 2)  # the original's forward
    assert E.patching(RATES, tokens=500, columns=[1.0, 0.5, 0.5], ppl_tokens=100) == pytest.approx(5 + 2)
    assert E.stability(method="ppl", resamples=10, analysis_s=3.0) == pytest.approx(30.0)
    assert E.stability(method="angular", resamples=10, analysis_s=3.0) == pytest.approx(30.0 * 0.02)


def test_the_probe_measures_positive_rates_on_a_tiny_model():
    found = probe_rates(tiny_model("llama", 2))
    assert found.forward_tokens_per_s > 0 and found.decode_s_per_token > 0


def test_the_backend_measures_a_models_rates_when_it_loads_it(tiny_folder):
    from evaluation.serving.backend import Backend
    from evaluation.core.pool import ModelSpec

    backend, spec = Backend(data_dir="", device="cpu"), ModelSpec(tiny_folder)
    assert backend.models.rates(spec) is None
    backend.models.load(spec)
    found = backend.models.rates(spec)
    assert found.forward_tokens_per_s > 0 and found.decode_s_per_token > 0
    backend.models.load(spec)
    assert backend.models.rates(spec) is found  # measured once per model
