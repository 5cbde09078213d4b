"""The result shape, the comparison arithmetic, the results cache and the job runner (no models)."""

import json
import math
import threading

import pytest

from evaluation.measure import measurement as M
from evaluation.core.jobs import Cancelled, JobRunner
from evaluation.measure.measurement import Measurement
from evaluation.core.store import ResultStore


def _pair(name, orig, pruned, unit="%", higher=True, group="benchmarks", **extra):
    return [Measurement(name, orig, unit, higher, model="original", group=group),
            Measurement(name, pruned, unit, higher, model="pruned", group=group, **extra)]


# ---------------------------------------------------------------- comparison arithmetic


def test_degradation_and_retention_of_a_higher_is_better_metric():
    (row,) = M.comparison_rows(_pair("arc_easy acc", 60.0, 45.0))
    assert row.degradation == pytest.approx(15.0)  # points
    assert row.retention_pct == pytest.approx(75.0)


def test_lower_is_better_metrics_degrade_when_they_grow():
    (row,) = M.comparison_rows(_pair("perplexity", 10.0, 12.5, unit="", higher=False, group="perplexity"))
    assert row.degradation == pytest.approx(2.5)
    assert row.retention_pct == pytest.approx(80.0)  # 10 / 12.5


def test_speedup_and_ideal_speedup_of_a_latency():
    (row,) = M.comparison_rows(_pair("decode", 10.0, 8.0, unit="ms", higher=False, group="speed", ideal=7.5))
    assert row.speedup == pytest.approx(1.25)
    assert row.ideal_speedup == pytest.approx(10 / 7.5)
    (row,) = M.comparison_rows(_pair("throughput", 100.0, 120.0, unit="tokens/s", group="speed", ideal=150.0))
    assert row.speedup == pytest.approx(1.2)
    assert row.ideal_speedup == pytest.approx(1.5)


def test_tables_show_the_columns_that_apply():
    ms = (_pair("arc_easy acc", 60.0, 45.0) + _pair("decode", 10.0, 8.0, "ms", False, "speed", ideal=7.5)
          + _pair("parameters", 100.0, 80.0, "", False, "memory"))
    records = M.table_records(ms)
    acc, dec, params = records
    assert acc["Degradation"] == "15.0" and acc["Score kept %"] == "75.0" and acc["Speedup ×"] == ""
    assert dec["Speedup ×"] == "1.25" and dec["Ideal speedup ×"] == "1.33" and dec["Degradation"] == ""
    assert params["% of original"] == "80.0" and (params["Original"], params["Pruned"]) == ("100", "80")
    markdown = M.to_markdown(ms)
    assert "| arc_easy acc |" in markdown and "Ideal speedup ×" in markdown
    rows = M.to_csv(ms).splitlines()
    assert rows[0].startswith("Group,Metric,Unit,Original,Original ±,Pruned,Pruned ±,Degradation")
    assert rows[1].startswith("benchmarks,arc_easy acc,%,60.0,,45.0,,15.0,75.0")


def test_a_zero_original_keeps_the_retention_column_with_a_dash():
    """Retention of a task the original scores 0 on is undefined: the column stays, the cell says so."""
    (record,) = M.table_records(_pair("gsm8k exact_match", 0.0, 0.0))
    assert record["Score kept %"] == "—" and record["Degradation"] == "0"
    both = M.table_records(_pair("gsm8k exact_match", 0.0, 2.0) + _pair("arc_easy acc", 60.0, 45.0))
    assert [r["Score kept %"] for r in both] == ["—", "75.0"]
    assert [r["Degradation"] for r in both] == ["-2.0", "15.0"]  # one unit, one number of decimals
    markdown = M.to_markdown(_pair("gsm8k exact_match", 0.0, 2.0))
    assert "| gsm8k exact_match | % | 0.00 | 2.00 | -2.00 | — |" in markdown
    assert M.to_csv(_pair("gsm8k exact_match", 0.0, 2.0)).splitlines()[1].endswith(",-2.0,")  # raw: empty, no dash
    (memory,) = M.table_records(_pair("peak memory", 0.0, 3.0, "MiB", False, "memory"))
    assert memory["% of original"] == "—"
    (no_pair,) = M.table_records([Measurement("gsm8k exact_match", 0.0, "%")])
    assert "Score kept %" not in no_pair  # nothing to compare: no column


def test_without_a_cut_there_is_no_pruned_column():
    records = M.table_records([Measurement("arc_easy acc", 60.0, "%", spread=1.5, spread_kind="stderr")])
    assert records == [{"Metric": "arc_easy acc", "Unit": "%", "Original": "60.0 ± 1.5"}]
    assert "± is the stderr" in M.to_markdown([Measurement("a", 1.0, spread=0.1, spread_kind="stderr")])


def test_several_variants_get_columns_side_by_side():
    ms = _pair("acc", 60.0, 45.0) + [Measurement("acc", 50.0, "%", model="persistence_20", group="benchmarks")]
    (record,) = M.table_records(ms)
    assert list(record) == ["Metric", "Unit", "Original", "Pruned", "Degradation (pruned)", "Score kept % (pruned)",
                            "persistence_20", "Degradation (persistence_20)", "Score kept % (persistence_20)"]
    assert [record["Score kept % (pruned)"], record["Score kept % (persistence_20)"]] == ["75.0", "83.3"]


@pytest.mark.parametrize("values, places", [
    ([512.4, 99.0], 0), ([61.25, 9.5], 1), ([1.5, 0.25], 2), ([0.5, 0.01], 3), ([0.002], 3), ([0.0, 0.0], 0),
    ([-120.0, 3.0], 0), ([float("nan"), 5.0, None], 2),
])
def test_decimals_give_the_largest_value_three_significant_digits(values, places):
    assert M.decimals(values) == places


def test_every_number_of_one_unit_has_the_same_decimals():
    ms = (_pair("decode", 15.31, 9.87, "ms", False, "speed") + _pair("prefill", 250.4, 190.0, "ms", False, "speed")
          + _pair("throughput", 1530.25, 1890.5, "tokens/s", True, "speed")
          + [Measurement("decode", 8.2, "ms", False, 0.26, "IQR", model="B", group="speed")])
    decode, prefill, throughput = M.table_records(ms)
    assert [decode["Original"], decode["Pruned"], decode["B"]] == ["15", "10", "8 ± 0"]  # ms: 250.4 sets 0 places
    assert [prefill["Original"], prefill["Pruned"]] == ["250", "190"]
    assert [throughput["Original"], throughput["Pruned"]] == ["1,530", "1,890"]  # the thousands apart
    assert [decode["Speedup × (pruned)"], decode["Speedup × (B)"], throughput["Speedup × (pruned)"]] == [
        "1.55", "1.87", "1.24"]  # a ratio column keeps its own two places in every row
    (row,) = M.table_records(_pair("loss", 0.04, 0.049, "", False, "perplexity"))
    assert (row["Original"], row["Pruned"], row["Degradation"]) == ("0.040", "0.049", "0.009")
    (row,) = M.table_records(_pair("acc", 50.0, 50.04))
    assert row["Degradation"] == "0.0"  # never "-0.0"


def _scored(orig, pruned, orig_se, pruned_se):
    return [Measurement("arc_easy acc", orig, "%", True, orig_se, "stderr", "original", "benchmarks"),
            Measurement("arc_easy acc", pruned, "%", True, pruned_se, "stderr", "A", "benchmarks")]


def test_a_difference_within_two_standard_errors_of_it_is_marked_noise():
    # 3 and 4 points of stderr: the difference's is 5 points, so chance alone reaches ±10
    assert M.noise_band(3.0, 4.0) == pytest.approx(10.0)
    (within,) = M.table_records(_scored(50.0, 41.0, 3.0, 4.0))
    (beyond,) = M.table_records(_scored(50.0, 39.0, 3.0, 4.0))
    (better,) = M.table_records(_scored(50.0, 59.5, 3.0, 4.0))  # above the original, by chance too
    assert within["Noise"] == "within noise (±10.0)" and better["Noise"] == "within noise (±10.0)"
    assert beyond["Noise"] == "beyond noise (±10.0)"
    assert M.to_csv(_scored(50.0, 41.0, 3.0, 4.0)).splitlines()[1].endswith(",9.0,82.0,10.0")  # raw: the band


def test_no_noise_column_without_a_standard_error_on_both_sides():
    ms = _scored(50.0, 41.0, 3.0, None) + [Measurement("decode", v, "ms", False, 1.0, "IQR", model, "speed")
                                           for v, model in ((10.0, "original"), (8.0, "A"))]
    assert all("Noise" not in record for record in M.table_records(ms))


def test_an_accuracys_standard_error_is_lm_evals():
    # 20 questions, 10 right: √(0.5 · 0.5 / 19)
    assert M.proportion_stderr(0.5, 20) == pytest.approx(0.1147078669)
    assert M.proportion_stderr(0.5, 1) is None and M.proportion_stderr(1.5, 20) is None


def test_measurements_round_trip_through_json_with_non_finite_values():
    m = Measurement("ppl", math.inf, "", False, spread=None, model="pruned", group="perplexity", details={"n": 3})
    back = M.from_json_list(json.loads(json.dumps(M.to_json_list([m]))))[0]
    assert math.isnan(back.value) and back.model == "pruned" and back.details == {"n": 3}


# ---------------------------------------------------------------- results cache


def test_store_round_trip_and_key_sensitivity(tmp_path):
    store = ResultStore(tmp_path)
    key = {"kind": "benchmark", "task": "arc_easy", "limit": 20}
    assert store.get(key) is None
    store.put(key, {"acc": 0.5})
    assert store.get(key) == {"acc": 0.5}
    assert store.get({**key, "limit": 21}) is None
    assert ResultStore(tmp_path, enabled=False).get(key) is None


def test_a_half_written_or_foreign_file_is_a_miss(tmp_path):
    store = ResultStore(tmp_path)
    key = {"kind": "benchmark", "task": "piqa"}
    store.put(key, {"acc": 0.7})
    path = store.path(key)
    text = path.read_text()
    path.write_text(text[: len(text) // 2])  # a crash mid-write by some other writer
    assert store.get(key) is None
    path.write_text(json.dumps({"acc": 0.7}))  # valid JSON, not our layout
    assert store.get(key) is None
    store.put(key, {"acc": 0.7})
    assert store.get(key) == {"acc": 0.7}
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_disabled_store_writes_nothing(tmp_path):
    ResultStore(tmp_path, enabled=False).put({"kind": "x"}, 1)
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- jobs


def test_progress_maps_sub_jobs_onto_the_parent():
    seen = []
    with JobRunner("cpu").run("job", lambda f, msg: seen.append(round(f, 3))) as job:
        job.sub(0.5, 1.0).update(0.5, "half of the second half")
    assert seen == [0.75]


def test_cancel_stops_a_running_job_at_its_next_safe_point():
    runner = JobRunner("cpu")
    started, steps, outcome = threading.Event(), [], {}

    def work():
        try:
            with runner.run("a long job") as job:
                started.set()
                while len(steps) < 10_000_000:
                    steps.append(1)
                    job.update(0.0)
        except Cancelled as err:
            outcome["error"] = err

    thread = threading.Thread(target=work)
    thread.start()
    started.wait(5)
    runner.cancel()
    thread.join(10)
    assert not thread.is_alive()
    assert isinstance(outcome.get("error"), Cancelled) and len(steps) < 10_000_000
    assert not runner.busy()


def test_jobs_on_one_device_run_one_at_a_time_and_a_waiting_job_can_be_cancelled():
    first, second = JobRunner("cpu"), JobRunner("cpu")  # two backends, one device
    messages = []
    with first.run("first"):
        outcome = {}

        def wait_for_lock():
            try:
                with second.run("second", lambda f, msg: messages.append(msg)):
                    outcome["ran"] = True
            except Cancelled:
                outcome["cancelled"] = True

        thread = threading.Thread(target=wait_for_lock)
        thread.start()
        thread.join(0.3)
        assert thread.is_alive() and "ran" not in outcome  # waiting for the device
        second.cancel()
        thread.join(5)
    assert outcome == {"cancelled": True}
    assert any("Waiting" in m for m in messages)
    with second.run("again"):  # the lock was released and a new job is not cancelled
        pass
