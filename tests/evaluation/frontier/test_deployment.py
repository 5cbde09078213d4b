"""What deployment sees, on made-up points with answers worked out by hand (conftest.deployment_frontier): a
Wanda-like point holding the original's bytes and speed never wins a bytes or latency target, a quantized point
smaller in bytes does, and the answer says what was left out and why; older result files still load."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from conftest import deployment_frontier
from evaluation.frontier.plan import Target, check_target
from evaluation.frontier.result import FASTER, MIB, FrontierResult, Point, format_table, gains, target_line
from prune.core.errors import InvalidInput


def _named(result: FrontierResult, family: str) -> Point:
    return next(p for p in result.points if family in p.families)


def test_a_quantized_point_smaller_in_bytes_is_the_best_under_a_bytes_target():
    result = deployment_frontier()
    for text in ("bytes=0.9", "bytes=90%", "bytes=460MiB"):
        assert result.best_under(check_target(text)).label == "int8"  # 10.2 beats the depth cut's 14.0
    assert result.best_under(check_target("bytes=100MiB")) is None  # int8 stores 138.24 MiB
    assert result.passed_over(check_target("bytes=0.9")) is None  # the Wanda-like point is not under it at all


def test_a_point_with_the_originals_bytes_and_speed_never_wins_a_bytes_target_it_meets():
    result = deployment_frontier()
    target = check_target("bytes=600MiB")  # the original meets it, and so does the Wanda-like point (9.9 < 10.0)
    assert result.best_under(target).label == "original"
    assert result.passed_over(target).label == "sparsity"
    line = target_line(result, target, result.best_under(target))
    assert line.startswith("Best under 600 MiB as stored: original")
    assert "Left out, though its perplexity (9.90) was lower: sparsity (magnitude 12.7%) is neither smaller nor " \
           "faster: it stores 512.0 MiB (the original 512.0) and decodes at 66.6 ms/token against the original's " \
           "67.4" in line


def test_under_a_latency_target_a_point_faster_by_noise_is_left_out_and_the_answer_says_why():
    result = deployment_frontier("ms")
    target = check_target("ms=67")  # under it: Wanda-like 66.6 (perplexity 9.9), depth 58.0 (14.0), int8 40.0 (10.2)
    assert result.best_under(target).label == "int8" and result.passed_over(target).label == "sparsity"
    line = target_line(result, target, result.best_under(target))
    assert line.startswith("Best under 67 ms per token: int8") and "Left out" in line and "sparsity" in line
    assert "138.2 MiB as stored, 40.0 ms/token (floor 3.4) (the original 512.0 MiB as stored, 67.4 ms/token " \
           "(floor 12.6))" in line
    nothing = check_target("ms=30")
    assert result.best_under(nothing) is None and target_line(result, nothing, None).startswith(
        "No measured model is under 30 ms per token: the smallest is int8, at 40.0 ms/token.")


def test_a_parameter_target_keeps_its_meaning_but_warns_that_the_zeros_save_nothing():
    result = deployment_frontier("params")
    target = check_target("params=0.9")  # Wanda-like 87.3 % (9.9), depth 85 % (14.0), 2:4 60 % (30.0)
    chosen = result.best_under(target)
    assert chosen.label == "sparsity" and result.passed_over(target) is None
    line = target_line(result, target, chosen)
    assert line.startswith("Best under 90 % of the parameters: sparsity") and "Beware: sparsity" in line
    assert "size by bytes" in line


def test_gaining_is_fewer_bytes_or_a_decode_at_least_five_percent_faster():
    result = deployment_frontier()
    wanda, two_four = _named(result, "sparsity"), _named(result, "2:4")
    assert FASTER == 0.95 and not gains(wanda, result.dense) and not gains(two_four, result.dense)
    assert gains(_named(result, "int8"), result.dense) and gains(_named(result, "depth, block"), result.dense)
    assert gains(result.dense, result.dense)  # the original always stands
    assert gains(replace(wanda, ms=0.95 * 67.4), result.dense) and not gains(replace(wanda, ms=0.951 * 67.4),
                                                                             result.dense)
    assert gains(replace(wanda, weight_bytes=wanda.weight_bytes - 1), result.dense)


@pytest.mark.parametrize("axis, front", [("bytes", ["int8", "original"]),
                                         ("ms", ["int8", "original"]),
                                         ("params", ["2:4", "depth, block", "sparsity"])])
def test_the_front_on_bytes_and_latency_holds_only_points_that_gain(axis, front):
    assert [p.label for p in deployment_frontier(axis).front()] == front


def test_a_cell_on_latency_says_why_a_point_under_the_size_is_not_its_familys():
    result = deployment_frontier("ms", (0.999,))  # Wanda-like 66.6 / 67.4 = 98.8 %: under the size, no gain
    said = result.cell("sparsity", 0.999)
    assert isinstance(said, str) and "neither smaller nor faster" in said
    assert result.cell("int8", 0.999).label == "int8"


def test_the_table_marks_what_gains_nothing_and_shows_each_floor():
    table = format_table(deployment_frontier("params"))
    assert "| 100 % | original | original | 512.0 | 100.0 % | 67.4 (12.6) | 10.00 |" in table
    assert "| 90 % | sparsity ★ † | magnitude 12.7% | 512.0 | 87.3 % | 66.6 | 9.90 |" in table  # no floor: none shown
    assert "| 90 % | depth, block ★ | cut 4 | 435.2 | 85.0 % | 58.0 (10.7) | 14.00 |" in table


def test_older_results_load_an_old_point_without_a_floor_and_an_old_axis_by_its_new_name():
    result = deployment_frontier()
    old = result.to_json()
    old["axis"] = "mib"
    for point in (old["dense"], *old["points"]):
        del point["floor_ms"]
    loaded = FrontierResult.from_json(json.loads(json.dumps(old)))
    assert loaded.axis == "bytes" and loaded.dense.floor_ms is None and loaded.dense.ideal_speedup == 1.0
    assert FrontierResult.from_json(json.loads(json.dumps(result.to_json()))) == result
    assert loaded.dense.weight_bytes == 512 * MIB


@pytest.mark.parametrize("text, target, words", [
    ("bytes=0.8", Target("bytes", 0.8, True), "80 % of the original's bytes as stored"),
    ("bytes=80%", Target("bytes", 0.8, True), "80 % of the original's bytes as stored"),
    ("BYTES = 400 MiB", Target("bytes", 400 * MIB, False), "400 MiB as stored"),
    ("bytes=1.5GiB", Target("bytes", 1.5 * 2**30, False), "1.5 GiB as stored"),
    ("bytes=512MB", Target("bytes", 512e6, False), "488.3 MiB as stored"),
    (" MiB = 400 ", Target("bytes", 400 * MIB, False), "400 MiB as stored"),  # the older spelling
    ("params=80", Target("params", 0.8, True), "80 % of the parameters"),
    ("params=0.5%", Target("params", 0.005, True), "0.5 % of the parameters"),
    ("ms=20", Target("ms", 20.0, False), "20 ms per token"),
])
def test_one_parser_reads_every_target(text, target, words):
    assert check_target(text) == target and target.words() == words


@pytest.mark.parametrize("bad", ["size=3", "mib=-1", "ms", "params=abc", "params=150", "params=0", "bytes=0",
                                 "bytes=1.5XB", "params=4MiB", "ms=20%", "ms=20ms", "ms=nan", ""])
def test_bad_targets_are_one_line(bad):
    with pytest.raises(InvalidInput) as raised:
        check_target(bad)
    assert "\n" not in str(raised.value)


def test_the_words_under_a_table_are_written_from_its_points():
    """At 90 % of the bytes (conftest.deployment_frontier): the Wanda-like point lowest in perplexity but gaining
    nothing is not named; int8 leads (27 % of the bytes, 67.4 / 40.0 = 1.7× the speed); the depth cut is the best
    without quantization (85 %, 67.4 / 58.0 = 1.2×)."""
    from evaluation.frontier.result import what_it_shows

    said = what_it_shows(deployment_frontier(), 0.9)
    assert said.startswith("At 90 % of weight bytes as stored (MiB), the best is int8 (int8): perplexity 10.20 and "
                           "arc_easy 50.0 % in 27 % of the bytes, 40.0 ms/token (1.7× the original's speed); the "
                           "original: perplexity 10.00, arc_easy 50.0 %, 67.4 ms/token.")
    assert said.endswith("Without quantization the best is depth, block (cut 4): perplexity 14.00 and arc_easy "
                         "50.0 % in 85 % of the bytes, 58.0 ms/token (1.2× the original's speed).")
    assert "sparsity" not in said and "2:4" not in said
    assert what_it_shows(deployment_frontier(), 0.1) == "At 10 % of weight bytes as stored (MiB), no family has a " \
                                                       "point a deployment gains from."
