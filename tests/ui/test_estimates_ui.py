"""The page before and while a job runs: estimates beside the buttons, the sweep as it goes, noise said plainly."""

from dataclasses import replace
from types import SimpleNamespace

import numpy as np

from evaluation.core.timing import Rates
from evaluation.measure.measurement import Measurement
from evaluation.core.pool import ModelSpec
from evaluation.sweeps.cuts import SweepReport, SweepResult
from prune.core.architectures import CAUSAL, MASKED
from prune.core.calibration import Calibration
from prune.core.recipe import Recipe
from prune.core.sizes import size_of
from prune.depth.result import ImportanceResult, blocks_from_layers
from ui import job_text
from ui.session import Session

from conftest import handlers_on, stand_in_backend, tiny_model

RATES = Rates(forward_tokens_per_s=100.0, decode_s_per_token=0.05)
SIZE = size_of(tiny_model("llama", 4))
LOADED = Session(spec=ModelSpec("org/model"), info=SimpleNamespace(num_layers=4, size=SIZE, kind=CAUSAL, rates=None))


def _stand_in(jobs: dict | None = None, **models):
    return stand_in_backend(jobs, default_calibration=Calibration(), rates=lambda spec: RATES, **models)


def _line(page, job, session, *values):
    handlers = handlers_on(page, _stand_in())
    line = next(line for line in handlers.estimates.lines if line.job == job)
    return handlers.estimates.line(line)(session, *values)


def test_the_speed_line_counts_every_compared_model_by_its_size(page):
    # the original alone: a warm-up (prefill 1 s, one step) and 2 runs (prefill 1 s, 10 steps of 0.05 s)
    assert _line(page, "speed", LOADED, ["1"], 100, 11, 2) == "Estimate: ≈ 4 s on this machine"
    cut = LOADED.with_cut(Recipe.block(4, 0, 2))  # half the layers gone: the cut's share of the compute
    share = (SIZE.other + sum(SIZE.layers[2:])) / SIZE.total
    assert _line(page, "speed", cut, ["1"], 100, 11, 2) == f"Estimate: ≈ {4.05 * (1 + share):.0f} s on this machine"


def test_an_encoders_speed_and_memory_lines_count_its_passes_over_the_prompt_only(page):
    encoder = replace(LOADED, info=SimpleNamespace(num_layers=4, size=SIZE, kind=MASKED, rates=None))
    # a warm-up and 2 runs, each one prefill of 1 s: no decode steps
    assert _line(page, "speed", encoder, ["1"], 100, 11, 2) == "Estimate: ≈ 3 s on this machine"
    # memory: a 128-token prompt (1.28 s), then for a decoder 15 decode steps of 0.05 s
    assert (_line(page, "memory", encoder), _line(page, "memory", LOADED)) == (
        "Estimate: ≈ 1 s on this machine", "Estimate: ≈ 2 s on this machine")


def test_no_line_without_a_model_or_with_a_setting_not_valid_yet(page):
    assert _line(page, "speed", Session(), ["1"], 100, 11, 2) == ""
    assert _line(page, "speed", LOADED, ["1"], "abc", 11, 2) == ""
    assert _line(page, "benchmarks", LOADED, [], 20, 0) == ""


def test_jobs_whose_results_are_kept_say_so_and_the_sweep_names_the_other_methods_cost(page):
    assert _line(page, "benchmarks", LOADED, ["arc_easy"], 20, 0) == \
        "Estimate: ≈ 9 s on this machine (at once if measured before: results are kept)"
    assert _line(page, "sweep", LOADED, "arc_easy", 2, 10, False) == \
        "Estimate: ≈ 8 s on this machine (at once if measured before: results are kept)"  # 460 tokens × 1.75
    assert job_text.SWEEP_OTHERS_COST in _line(page, "sweep", LOADED, "arc_easy", 2, 10, True)


def test_the_stability_button_carries_its_estimate_once_there_is_an_analysis(page):
    assert _line(page, "stability", LOADED, 20)["value"] == "How stable is the best block of N?"
    result = ImportanceResult("angular", blocks_from_layers(np.arange(4.0)), "s", elapsed_s=100.0)
    analysed = replace(LOADED, result=result)
    # 20 resamples re-reading the kept states, each 2 % of the 100 s analysis
    assert _line(page, "stability", analysed, 20)["value"] == \
        "How stable is the best block of N? (≈ 40 s on this machine)"


def test_every_line_is_filled_after_the_model_or_a_cut_changes(page, data_dir):
    handlers = handlers_on(page, _stand_in(data_dir=data_dir))  # MT-Bench counts the questions in its files
    values = [setting.value for line in handlers.estimates.lines for setting in line.settings]
    shown = handlers.estimates.every(LOADED, *values)
    assert len(shown) == len(handlers.estimates.lines) == 12
    assert shown[page.speed.speed_estimate].startswith("Estimate: ")
    assert shown[page.generate.estimate].startswith("Estimate: at most")
    assert shown[page.benchmarks.mt_bench.estimate].startswith("Estimate: at most")


# ---------------------------------------------------------------- noise said plainly


def _speed(measured, ideal, by="FLOPs"):
    return [Measurement("decode latency", 10.0, "ms", False, model="original", group="speed"),
            Measurement("decode latency", 10.0 / measured, "ms", False, model="A", group="speed",
                        ideal=10.0 / ideal, details={"ideal_by": by})]


def test_a_speedup_beyond_the_ideal_names_the_bound_and_what_can_explain_it():
    assert job_text.beyond_ideal_note(_speed(1.3, 1.1)) == (
        "**A**, decode latency: measured 1.30× faster, more than the 1.10× the compute it does allows: the original "
        "ran further from its own limit (see the share of the limit reached), or the machine's other work and timer "
        "jitter moved the figures.")
    assert "the bytes it reads allows" in job_text.beyond_ideal_note(_speed(2.5, 1.6, by="bytes"))
    assert job_text.beyond_ideal_note(_speed(1.05, 1.1)) == ""


def _sweep(values, baseline=0.5, documents=20, num_layers=None):
    return SweepResult(task="arc_easy", block_size=2, num_layers=num_layers or len(values) + 1, limit=documents,
                       starts=list(range(len(values))), metrics={"acc": list(values)}, baseline={"acc": baseline},
                       higher_is_better={"acc": True}, documents=documents)


def test_the_best_cut_is_compared_with_the_uncut_model_and_its_noise():
    # 20 questions: stderrs √(.5·.5/19) and √(.55·.45/19); twice their combination is 32.36 points
    assert job_text.versus_original(_sweep([0.3, 0.55, 0.4])) == (
        "It scores 5.0 points above the uncut model (55 against 50): within noise (±32.4) with 20 questions, "
        "so removing these layers does not really help.")
    assert job_text.versus_original(_sweep([0.3, 0.05], documents=400)).startswith(
        "It scores 20.0 points below the uncut model (30 against 50): beyond noise (±")
    assert job_text.versus_original(replace(_sweep([0.3, 0.4]), documents=None)) == \
        "It scores 10.0 points below the uncut model (40 against 50)."


# ---------------------------------------------------------------- the sweep as it goes


def test_the_sweep_shows_each_cut_as_it_arrives_beside_the_analysis(page):
    result = ImportanceResult("angular", blocks_from_layers(np.arange(4.0)), "s")
    asked = {}

    def sweeping(spec, request, size, *, known, methods, **_settings):
        asked.update(known=known, methods=methods)
        for count in (0, 1, 3):  # the original, one cut, all three
            yield SweepReport(_sweep([0.4, 0.45, 0.3][:count], num_layers=4), {}, {})

    backend = _stand_in({"sweeps.cuts": sweeping}, data_dir=None)
    handlers = handlers_on(page, backend)
    session = replace(LOADED, result=result)
    shown = list(handlers.benchmarks.sweep(session, "arc_easy", 2, 20))
    summaries = [step[page.benchmarks.sweep.summary] for step in shown]
    assert summaries[0].startswith("Measuring… 0 of 3 cuts so far; the uncut model scores 0.5 (acc)")
    assert summaries[1].startswith("Measuring… 1 of 3 cuts so far")
    assert summaries[2].startswith("Best cut measured: **[1, 3)**") and "within noise" in summaries[2]
    assert asked == {"known": {"angular": result}, "methods": []}  # only the analysis on show, by default
    list(handlers.benchmarks.sweep(session, "arc_easy", 2, 20, True))
    assert asked["methods"] == ["block_influence", "relative_magnitude", "ppl", "sleb", "taylor", "zigzag", "sublayer"]
