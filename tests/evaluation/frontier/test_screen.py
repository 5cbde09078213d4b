"""The frontier's screen: its rule worked by hand on made-up windows, and on a tiny Llama trained for a few seconds
(so that cuts cost it something) the screened frontier's front equals the exhaustive one (every candidate measured
in full: the screened-out ones on request, the rest from the cache), a screened-out point is said in the table, and
the early answer comes before any full measurement."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from conftest import tiny_model
from evaluation.frontier import run as frontier_run
from evaluation.frontier.plan import check_plan
from evaluation.frontier.result import FrontierResult, format_table
from evaluation.frontier.screen import FLOOR, KEEP, SIGMAS, Screened, Screening, beats
from evaluation.quality import lm_eval_adapter, perplexity
from prune.patch import replaceme
from evaluation.serving.backend import Backend
from evaluation.core.jobs import final
from prune.core.calibration import BUILTIN_TEXTS
from prune.core.recipe import Recipe

SMALL = dict(ppl_seq_len=32, ppl_windows=8, batch_size=4)
SIZES = (0.5,)
_LAYERS = itertools.count()


def screened(name: str, nll, size_bytes: int, params: int = 100) -> Screened:
    """A made-up screen; its recipe a cut of one layer of 64 (each made its own: a recipe is named by its steps)."""
    return Screened((name,), None, Recipe.cut(64, [next(_LAYERS) % 64]), params, size_bytes, tuple(nll), 0.0)


@pytest.mark.parametrize("gaps, expected", [
    ((0.3, 0.3, 0.3, 0.3), True),  # the same clear gap on every window: no noise at all
    ((0.3, 0.3, 0.3, -0.01), False),  # better on one window: never screened out
    ((0.04, 0.04, 0.04, 0.04), False),  # under the 5 % floor (log 1.05 = 0.0488)
    ((0.06, 0.9, 0.06, 0.9), False),  # mean 0.48, standard error 0.2425: under 3 of them (0.7275)
    ((0.9, 1.0, 1.1, 1.0), True),  # mean 1.0, standard error 0.0408
    ((0.5,), False),  # one window has no measured noise
])
def test_a_rival_beats_a_point_on_every_window_beyond_three_standard_errors_and_five_percent(gaps, expected):
    rival = screened("rival", [3.0] * len(gaps), 10)
    point = screened("point", [3.0 + g for g in gaps], 10)
    assert beats(rival, point) is expected
    if len(gaps) > 1 and min(gaps) > 0:  # the rule by hand: the mean against the floor and SIGMAS standard errors
        mean = sum(gaps) / len(gaps)
        sd = math.sqrt(sum((g - mean) ** 2 for g in gaps) / (len(gaps) - 1))
        assert expected == (mean > FLOOR and mean > SIGMAS * sd / math.sqrt(len(gaps)))


def test_only_a_rival_no_larger_that_gains_screens_out_and_the_best_at_each_size_are_kept():
    original = screened("original", [2.0, 2.0], 1000)
    small_good = screened("small good", [2.1, 2.1], 300)
    large_bad = screened("large bad", [3.0, 3.0], 600)  # smaller than nothing better: small good beats it
    smaller_bad = screened("smaller bad", [3.0, 3.0], 200)  # worse, but the smallest: nothing no larger beats it
    zeros = screened("zeros", [1.0, 1.0], 1000)  # better than all, but the original's bytes: gains nothing
    dense_close = screened("dense close", [2.12, 2.12], 1000)  # only zeros beats it beyond the floor
    middling = screened("middling", [2.5, 2.5], 650)
    points = (small_good, large_bad, smaller_bad, zeros, dense_close, middling)
    out = {p.label: p.beaten_by for p in Screening("bytes", (0.7, 0.5), 2, original, points).decided()}
    assert KEEP == 2 and out["large bad"].endswith(", 8.166)")  # e^2.1
    assert out["large bad"].startswith("small good (cut ")
    assert out["middling"] is None  # the second best at 70 % (650 B ≤ 700): measured in full whatever its rivals
    assert out["small good"] is None and out["smaller bad"] is None and out["zeros"] is None
    assert out["dense close"] is None  # a rival that gains nothing screens nothing out
    out = {p.label: p.beaten_by for p in Screening("bytes", (0.5,), 2, original, points).decided()}
    assert out["middling"].startswith("small good") and out["large bad"].startswith("small good")
    assert out["smaller bad"] is None and out["small good"] is None


@pytest.fixture(scope="module")
def trained(tiny_tokenizer):
    """A tiny 8-layer Llama trained 200 steps on the built-in calibration text: its layers and widths now matter
    by different amounts, as a real model's do (a random one's cuts all cost nothing)."""
    torch.manual_seed(0)
    model = tiny_model("llama", 8)
    ids = perplexity.token_ids(tiny_tokenizer, [BUILTIN_TEXTS[0].read_text()])
    chunks = perplexity.windows(ids, 33, None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(200):
        batch = chunks[torch.randint(len(chunks), (16,))]
        loss = model(batch, labels=batch).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval()


@pytest.fixture(scope="module")
def served(trained, tiny_tokenizer, tmp_path_factory):
    backend = Backend(device="cpu")
    spec = backend.models.adopt(trained, tiny_tokenizer, name="tiny-llama-screen")
    request = lm_eval_adapter.check_request(["arc_easy"], limit=4, data_dir=backend.models.data_dir)
    return backend, spec, request


@pytest.fixture(scope="module")
def runs(served, tmp_path_factory):
    """The screened stream (every value), then in the same cache the exhaustive frontier (``screen=False``): every
    candidate measured in full, the screened-out ones now (counted), the rest read from the cache."""
    backend, spec, request = served
    mp = pytest.MonkeyPatch()
    try:
        mp.setenv("LAYERCUT_CACHE", str(tmp_path_factory.mktemp("screened")))
        passes = []  # the patches' calibration passes over the original
        real_collect = replaceme.collect
        mp.setattr(replaceme, "collect", lambda model, tokenizer, blocks, *args, **kwargs: passes.append(blocks)
                   or real_collect(model, tokenizer, blocks, *args, **kwargs))
        tokenized, real_ids = [], perplexity.token_ids  # WikiText-2 test, tokenized for the run's perplexities
        mp.setattr(perplexity, "token_ids", lambda *args: tokenized.append(1) or real_ids(*args))
        stream = list(backend.frontier.run(spec, request, sizes=SIZES, **SMALL))
        mp.setattr(replaceme, "collect", real_collect)
        mp.setattr(perplexity, "token_ids", real_ids)
        measured = []
        real = frontier_run.measure_point
        mp.setattr(frontier_run, "measure_point",
                   lambda model, tokenizer, recipe, *args, **kwargs: measured.append(recipe.key)
                   or real(model, tokenizer, recipe, *args, **kwargs))
        exhaustive = final(backend.frontier.run(spec, request, sizes=SIZES, screen=False, **SMALL))
        again = final(backend.frontier.run(spec, request, sizes=SIZES, **SMALL))  # screened again: all cached
    finally:
        mp.undo()
    return stream, exhaustive, measured, again, passes, len(tokenized)


def test_the_screen_comes_first_as_an_early_answer_then_the_points_measured_in_full(runs):
    stream = runs[0]
    kinds = [type(value) for value in stream]
    first_full = kinds.index(FrontierResult)
    assert first_full > 1 and all(k is Screening for k in kinds[:first_full])
    assert all(k is FrontierResult for k in kinds[first_full:])
    screens = stream[:first_full]
    assert [s.pending for s in screens] == list(range(len(screens) - 1, -1, -1))
    assert screens[-1].words().startswith("Screening (4 perplexity windows a candidate")


def test_the_screened_front_equals_the_exhaustive_one_and_some_points_were_screened_out(runs):
    screened_result, exhaustive = runs[0][-1], runs[1]
    assert screened_result.complete and screened_result.screen == 4 and exhaustive.screen == 0
    assert screened_result.screened, "the trained model's screen rules nothing out: this test would prove nothing"
    assert [p.recipe.key for p in screened_result.front()] == [p.recipe.key for p in exhaustive.front()]
    assert len(screened_result.points) + len(screened_result.screened) == len(exhaustive.points)
    full = {p.recipe.key: p for p in exhaustive.points}
    for point in screened_result.screened:  # each really is worse than the rival the screen named, measured in full
        rival = next(p for p in exhaustive.points if point.beaten_by.startswith(p.label + " ("))
        assert full[point.recipe.key].perplexity > rival.perplexity
        assert rival.weight_bytes <= point.weight_bytes


def test_survivors_perplexity_counts_the_screens_windows_as_read_and_the_patched_cuts_share_one_pass(runs, served):
    """A point measured in full after its screen reads only the windows its screen did not: its perplexity equals
    one measured on every window of the model rebuilt from its recipe; the patched cuts read the original once, and
    the text is tokenized once a run (not once a candidate)."""
    backend, spec, _ = served
    base = backend.models.base(spec)
    ids = perplexity.token_ids(base.tokenizer, perplexity.wikitext2_rows(backend.models.data_dir))
    result, passes = runs[0][-1], runs[4]
    for point in (result.dense, *result.points):
        model = point.recipe.apply(base.model, base.tokenizer)
        again = perplexity.measure_perplexity(model, base.tokenizer, ids, label="again", seq_lens=(32,), bos=(False,),
                                              max_windows=8)[0].value
        assert point.perplexity == pytest.approx(again, rel=1e-5)
    screening = [value for value in runs[0] if isinstance(value, Screening)][-1]
    patched = [p for p in screening.points if any(step.kind == "patch" for step in p.recipe.steps)]
    assert len(patched) >= 2 and len(passes) == 1  # one pass read every patched cut's blocks
    assert len(screening.points) > 2 and runs[5] == 1


def test_a_screened_out_point_is_said_in_the_table_and_measured_in_full_on_request(runs):
    screened_result, exhaustive, measured = runs[0][-1], runs[1], runs[2]
    table = format_table(screened_result)
    for point in screened_result.screened:
        assert f"screened out: {point.recipe.short()}" in table and point.beaten_by in table
    assert sorted(measured) == sorted(p.recipe.key for p in screened_result.screened)  # only those: the rest cached
    assert exhaustive.screen == 0 and not exhaustive.screened
    assert {p.recipe.key for p in exhaustive.points} >= {p.recipe.key for p in screened_result.screened}
    assert FrontierResult.from_json(screened_result.to_json()) == screened_result


def test_once_measured_on_request_a_point_stands_as_measured_in_a_screened_run(runs):
    exhaustive, measured, again = runs[1], runs[2], runs[3]
    assert again.screen == 4 and not again.screened  # every screened-out point was measured in full since
    assert again.points == exhaustive.points and len(measured) == len(runs[0][-1].screened)  # nothing measured again


def test_the_latency_axis_and_one_window_are_not_screened_and_the_screen_can_be_turned_off():
    assert check_plan("ms").screen == 0 and check_plan("bytes", ppl_windows=1).screen == 0
    assert check_plan("bytes").screen == 4 and check_plan("bytes", screen=False).screen == 0
    assert check_plan("params", ppl_windows=3).screen == 3
