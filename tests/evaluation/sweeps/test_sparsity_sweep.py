"""The sparsity sweep on a tiny model: each point is the model its recipe derives, measured as by hand; cached per
point."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
from lm_eval.models.huggingface import HFLM

import prune
from conftest import tiny_model
from evaluation.quality import lm_eval_adapter, perplexity
from evaluation.sweeps import sparsity as sparsity_sweep
from evaluation.serving.backend import Backend
from evaluation.core.jobs import Cancelled
from evaluation.sweeps.sparsity import SparsitySweepResult, check_levels, format_table
from evaluation.sweeps.cuts import evaluate_loaded, task_metrics
from prune.core.errors import InvalidInput, UnknownMethod
from evaluation.core.jobs import final
from ui import plots

LIMIT, SEQ_LEN, WINDOWS = 4, 32, 2  # the tiny model has 256 positions
SMALL = dict(ppl_seq_len=SEQ_LEN, ppl_windows=WINDOWS, batch_size=4)


@pytest.fixture(scope="module")
def backend():
    return Backend(device="cpu")


@pytest.fixture(scope="module")
def spec(backend, tiny_tokenizer):
    return backend.models.adopt(tiny_model("llama", 4), tiny_tokenizer, name="tiny-llama-sparsity-sweep")


@pytest.fixture(scope="module")
def request_(backend):
    return lm_eval_adapter.check_request(["arc_easy"], limit=LIMIT, data_dir=backend.models.data_dir)


@pytest.fixture(scope="module")
def result(backend, spec, request_):
    return final(backend.sweeps.sparsity(spec, request_, levels=(0, 0.5), **SMALL))


def _measured_by_hand(model, tokenizer, backend, request_):
    """(acc_norm, perplexity) of ``model`` through lm-eval's own HFLM and evaluation.quality.perplexity."""
    loaded = lm_eval_adapter.load_tasks(request_)
    metrics, _ = task_metrics(evaluate_loaded(HFLM(pretrained=model, tokenizer=tokenizer, batch_size=4), loaded,
                                              LIMIT), "arc_easy")
    ids = perplexity.token_ids(tokenizer, perplexity.wikitext2_rows(backend.models.data_dir))
    ppl = perplexity.measure_perplexity(model, tokenizer, ids, label="by hand", seq_lens=(SEQ_LEN,), bos=(False,),
                                        max_windows=WINDOWS)[0].value
    return metrics["acc_norm"], ppl


def test_level_zero_is_the_dense_model_for_every_method(backend, spec, request_, result):
    base = backend.models.pool.peek(spec)
    accuracy, ppl = _measured_by_hand(base.model, base.tokenizer, backend, request_)
    assert result.metric == "acc_norm" and result.levels == (0.0, 0.5)
    assert result.methods == prune.sparsity.masks.METHODS
    assert result.dense_accuracy == accuracy and result.dense_perplexity == pytest.approx(ppl, rel=1e-6)
    for method in result.methods:
        assert result.accuracy[method][0] == accuracy
        assert result.perplexity[method][0] == result.dense_perplexity


@pytest.mark.parametrize("method", ["magnitude", "wanda"])
def test_a_point_equals_sparsifying_and_measuring_by_hand(backend, spec, request_, result, method):
    base = backend.models.pool.peek(spec)
    sparse = prune.sparsify(base.model, base.tokenizer, method, 0.5, calibration=backend.models.default_calibration)
    accuracy, ppl = _measured_by_hand(sparse, base.tokenizer, backend, request_)
    assert result.accuracy[method][1] == accuracy
    assert result.perplexity[method][1] == pytest.approx(ppl, rel=1e-6)
    assert result.perplexity[method][1] != result.dense_perplexity  # the point is not the dense model


def _counting(monkeypatch, tmp_path):
    """A fresh results cache, and the names of the points measured (not read from it)."""
    monkeypatch.setenv("LAYERCUT_CACHE", str(tmp_path))
    measured = []
    real = sparsity_sweep._measure

    def counted(model, tokenizer, recipe, name, *args):
        measured.append(name)
        return real(model, tokenizer, recipe, name, *args)

    monkeypatch.setattr(sparsity_sweep, "_measure", counted)
    return measured


def test_points_are_cached_one_by_one(backend, spec, request_, monkeypatch, tmp_path):
    measured = _counting(monkeypatch, tmp_path)
    first = final(backend.sweeps.sparsity(spec, request_, levels=(0, 0.5, 0.9), methods=["magnitude"], **SMALL))
    assert measured == ["dense", "magnitude at 50 %", "magnitude at 90 %"]
    again = final(backend.sweeps.sparsity(spec, request_, levels=(0.9, 0, 0.5, 0.5), methods="magnitude", **SMALL))
    assert again == first and len(measured) == 3  # the same levels, sorted and unique: nothing recomputed
    more = final(backend.sweeps.sparsity(spec, request_, levels=(0, 0.1, 0.5, 0.9), methods=["magnitude"], **SMALL))
    assert measured[3:] == ["magnitude at 10 %"]
    assert more.accuracy["magnitude"][::2] == first.accuracy["magnitude"][:2]
    final(backend.sweeps.sparsity(spec, request_, levels=(0, 0.5), methods=["magnitude"], use_cache=False, **SMALL))
    assert measured[4:] == ["dense", "magnitude at 50 %"]


def test_a_cancelled_sweep_resumes_from_the_points_it_finished(backend, spec, request_, monkeypatch, tmp_path):
    measured = _counting(monkeypatch, tmp_path)

    def cancel_at_wanda(fraction, message):
        if message.startswith("wanda"):
            backend.cancel("visitor-1")

    with pytest.raises(Cancelled):
        final(backend.sweeps.sparsity(spec, request_, levels=(0, 0.5), methods=["magnitude", "wanda"],
                               progress=cancel_at_wanda, owner="visitor-1", **SMALL))
    assert measured == ["dense", "magnitude at 50 %", "wanda at 50 %"] and not backend.models.jobs.busy()
    resumed = final(backend.sweeps.sparsity(spec, request_, levels=(0, 0.5), methods=["magnitude", "wanda"], **SMALL))
    assert measured[3:] == ["wanda at 50 %"]
    assert resumed.accuracy["wanda"][0] == resumed.dense_accuracy


@pytest.mark.parametrize("levels", [(), (1.0,), (-0.1, 0.5), (0.5, True), ("0.5",), (math.nan,), (0, 0.995)])
def test_bad_levels_are_refused_before_any_work(backend, spec, request_, monkeypatch, tmp_path, levels):
    measured = _counting(monkeypatch, tmp_path)
    with pytest.raises(InvalidInput, match="Sparsity levels are fractions from 0 to 0.99"):
        final(backend.sweeps.sparsity(spec, request_, levels=levels, **SMALL))
    assert measured == []


def test_other_bad_settings_are_refused(backend, spec, request_):
    with pytest.raises(UnknownMethod, match="Unknown sparsity method 'lottery'"):
        final(backend.sweeps.sparsity(spec, request_, methods=["magnitude", "lottery"], **SMALL))
    with pytest.raises(InvalidInput, match="at least one sparsity method"):
        final(backend.sweeps.sparsity(spec, request_, methods=[], **SMALL))
    with pytest.raises(InvalidInput, match="number of perplexity windows"):
        final(backend.sweeps.sparsity(spec, request_, ppl_seq_len=SEQ_LEN, ppl_windows=0))
    with pytest.raises(InvalidInput, match="Sequence lengths must be 2…256"):
        final(backend.sweeps.sparsity(spec, request_, levels=(0,), ppl_seq_len=512, ppl_windows=1))


def test_levels_are_sorted_and_unique():
    assert check_levels([0.5, 0, 0.5, 0.99, 0.1]) == (0.0, 0.1, 0.5, 0.99)
    assert check_levels(0.5) == (0.5,)


def test_result_round_trips_through_strict_json(result):
    odd = replace(result, perplexity={**result.perplexity, "magnitude": (result.dense_perplexity, math.inf)})
    again = SparsitySweepResult.from_json(json.loads(json.dumps(odd.to_json(), allow_nan=False)))
    assert math.isnan(again.perplexity["magnitude"][1])  # strict JSON has no infinity: it comes back as NaN
    assert replace(again, perplexity=result.perplexity) == result


def _hand_made():
    return SparsitySweepResult(
        task="arc_easy", metric="acc_norm", limit=100, levels=(0.0, 0.5), methods=("magnitude", "wanda"),
        accuracy={"magnitude": (0.5, 0.25), "wanda": (0.5, 0.375)},
        perplexity={"magnitude": (20.0, 400.0), "wanda": (20.0, 50.0)}, dense_accuracy=0.5, dense_perplexity=20.0,
        prune_s={"magnitude": (0.0, 2.0), "wanda": (0.0, 10.0)},
        measure_s={"magnitude": (3.0, 4.0), "wanda": (3.0, 5.0)})


def test_the_table_has_one_row_per_method():
    assert format_table(_hand_made()).splitlines() == [
        "arc_easy acc_norm % (first 100 documents) / WikiText-2 test perplexity (16 × 512 tokens, no BOS); "
        "dense: 50.00 % / 20.00",
        "",
        "| method | 0 % | 50 % | time (s): prune + measure |",
        "|---|---:|---:|---:|",
        "| magnitude | 50.00 / 20 | 25.00 / 400 | 6 |",
        "| wanda | 50.00 / 20 | 37.50 / 50 | 15 |",
    ]


def test_the_figure_has_one_line_per_method_in_each_panel_and_the_dense_model_marked():
    made = _hand_made()
    fig = plots.sparsity_sweep_figure(made)
    for axis, values in (("x", {"magnitude": [50.0, 25.0], "wanda": [50.0, 37.5]}),
                         ("x2", {"magnitude": [20.0, 400.0], "wanda": [20.0, 50.0]})):
        panel = {t.name: t for t in fig.data if t.xaxis == axis}
        assert sorted(panel) == ["dense", "magnitude", "wanda"]
        assert {m: list(panel[m].y) for m in made.methods} == values
        assert list(panel["magnitude"].x) == [0.0, 50.0]
    assert fig.data[-1].y == (20.0, 20.0)  # the dense perplexity across the right panel
    assert fig.layout.yaxis2.type == "log"
    assert [t.name for t in fig.data if t.showlegend] == ["magnitude", "wanda", "dense"]
