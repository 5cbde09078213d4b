"""SLEB (greedy layer removal): the resumed passes equal real cuts, and the order equals a brute-force greedy.

The identity-layer known answer (SLEB removes an exact identity layer first) runs with every
other method in test_methods.py.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import transformers

import prune
from prune.core.calibration import Calibration, token_windows
from prune.depth.methods.sleb import spread
from prune.depth.result import ImportanceResult
from prune.depth.selection import chosen_layers, chosen_recipe
from prune.core.surgery import remove_layers

from conftest import _COMMON

CAL = Calibration(n_samples=6, seq_len=40)
LAYERS = 6


@pytest.fixture(scope="module")
def model():
    """A tiny Llama whose layers matter: wider initial weights give every removal its own cost
    (at the usual 0.02 the NLLs of removals differ by ~1e-4, too close to call reliably)."""
    torch.manual_seed(0)
    config = transformers.LlamaConfig(**_COMMON, intermediate_size=64, num_hidden_layers=LAYERS,
                                      num_key_value_heads=2, initializer_range=0.2)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    model.layercut_name = "tiny-llama-sleb"
    return model


def full_nll(model, ids) -> float:
    """Mean next-token NLL of a plain forward pass."""
    with torch.no_grad():
        return model(input_ids=ids, labels=ids, use_cache=False).loss.item()


def brute_force(model, ids, steps: int, protected=()) -> tuple[list[int], list[float]]:
    """Greedy by full forwards of really cut models: each step tries every layer left."""
    chosen, nlls = [], [full_nll(model, ids)]
    for _ in range(steps):
        tried = {j: full_nll(remove_layers(model, chosen + [j]), ids)
                 for j in range(LAYERS) if j not in chosen and j not in protected}
        ranked = sorted(tried.values())
        assert len(ranked) == 1 or ranked[1] - ranked[0] > 1e-4  # a clear winner: float noise cannot flip it
        chosen.append(min(tried, key=tried.get))
        nlls.append(tried[chosen[-1]])
    return chosen, nlls


def run(model, tokenizer, **options) -> ImportanceResult:
    return prune.score(model, tokenizer, "sleb", calibration=CAL, use_cache=False, **options)


@pytest.mark.parametrize("protect_ends", [False, True])
def test_order_and_curve_equal_a_brute_force_greedy_of_real_cuts(model, tiny_tokenizer, protect_ends):
    ids = token_windows(tiny_tokenizer, CAL)[spread(CAL.n_samples, 5)]
    steps = 4
    result = run(model, tiny_tokenizer, num_removals=steps, max_samples=5, protect_ends=protect_ends)
    order, nlls = brute_force(model, ids, steps, protected={0, LAYERS - 1} if protect_ends else ())
    assert result.params["removal_order"] == order
    np.testing.assert_allclose(np.log(result.params["ppl_curve"]), nlls, rtol=1e-5)
    # the curve's own definition: each point is a full forward of the cumulative cut
    for k in range(1, steps + 1):
        assert math.log(result.params["ppl_curve"][k]) == pytest.approx(
            full_nll(remove_layers(model, order[:k]), ids), rel=1e-5)


def test_best_layers_are_the_first_removals_and_the_curve_starts_at_the_baseline(model, tiny_tokenizer):
    result = run(model, tiny_tokenizer, num_removals=3, protect_ends=False)
    order, curve = result.params["removal_order"], result.params["ppl_curve"]
    assert len(order) == 3 and len(curve) == 4
    ids = token_windows(tiny_tokenizer, CAL)[spread(CAL.n_samples, 2)]  # max_samples=2, spread: windows 0 and 5
    assert curve[0] == pytest.approx(math.exp(full_nll(model, ids)), rel=1e-5)
    for k in range(4):
        assert result.best_layers(k) == sorted(order[:k]) == chosen_layers(result, k)
    assert result.best_block(1) == (order[0], order[0] + 1)
    assert list(result.layer_scores[order]) == [0, 1, 2]
    assert sorted(result.layer_scores[[i for i in range(LAYERS) if i not in order]]) == [3, 4, 5]
    assert result.cuts == {"greedy 1": sorted(order[:1]), "greedy 3": sorted(order)}
    assert not result.block_exact and "greedy" in result.score_label
    with pytest.raises(prune.core.errors.InvalidCut, match="num_removals=4"):
        chosen_layers(result, 4)
    recipe = chosen_recipe(result, 2, "paper", origin="SLEB on test")
    assert recipe.depth_cut.layers == tuple(sorted(order[:2]))
    assert recipe.origin == "SLEB on test: first 2 greedy removals"
    start, end = result.best_block(2)
    assert chosen_layers(result, 2, "block") == [start, start + 1] and end == start + 2


def test_ends_are_protected_and_removals_capped(model, tiny_tokenizer):
    result = run(model, tiny_tokenizer, num_removals=10)
    assert result.params["protected"] == [0, LAYERS - 1]
    assert sorted(result.params["removal_order"]) == [1, 2, 3, 4]  # everything but the two ends
    assert np.isinf(result.block_scores[0, [0, LAYERS - 1]]).all() and np.isinf(result.layer_scores[[0, -1]]).all()
    assert "Only 4 of the 10" in result.warnings[0]
    with pytest.raises(prune.core.errors.InvalidCut):
        result.best_layers(5)
    with pytest.raises(prune.core.errors.InvalidInput, match="protect_ends"):
        prune.score(remove_layers(model, [1, 2, 3, 4]), tiny_tokenizer, "sleb", calibration=CAL, use_cache=False)


def test_result_round_trips_and_a_full_resample_scores_the_same(model, tiny_tokenizer):
    context = prune.Context(model, tiny_tokenizer, CAL)
    func = prune.METHODS["sleb"].func
    result = func(context, num_removals=2)
    back = ImportanceResult.from_json(result.to_json())
    assert back.params["removal_order"] == result.params["removal_order"] and back.cuts == result.cuts
    assert back.best_layers(2) == result.best_layers(2) and chosen_layers(back, 2) == result.best_layers(2)
    again = func(context.resample(torch.arange(len(context.input_ids))), num_removals=2)
    np.testing.assert_array_equal(again.block_scores, result.block_scores)


def test_window_spread_and_options_for_a_cut():
    from prune.depth.methods import METHODS, options_for_cut

    assert spread(32, 2).tolist() == [0, 31] and spread(3, 5).tolist() == [0, 1, 2] and spread(6, 1).tolist() == [0]
    sleb, default = METHODS["sleb"], METHODS["sleb"].options["num_removals"]
    assert options_for_cut(sleb, default + 1) == {"num_removals": default + 1}
    assert options_for_cut(sleb, default) == {} and options_for_cut(METHODS["angular"], 20, {"token": "mean"}) == {
        "token": "mean"}
    assert options_for_cut(sleb, 3, {"num_removals": 2, "max_samples": 4}) == {"num_removals": 3, "max_samples": 4}
    assert options_for_cut(sleb, 3, {"num_removals": 5}) == {"num_removals": 5}


@pytest.mark.slow  # lm-eval on two questions: about 20 s on a busy 2-core machine
def test_cli_prints_the_steps_and_cuts_the_first_removals(tiny_folder, tmp_path, capsys):
    import json
    import re

    from evaluation import cli as benchmark

    code = benchmark.main(["--method", "sleb", "--num_layers", "1", "--model", tiny_folder, "--task", "arc_easy",
                           "--limit", "2", "--output_folder", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == 0, err
    steps = re.findall(r"SLEB step (\d+): removes layer (\d+) → calibration perplexity", out)
    assert "SLEB step 0: calibration perplexity" in out and [s for s, _ in steps] == ["1", "2"]  # 4 layers, ends kept
    config = json.loads((tmp_path / "results_sleb.json").read_text())["config"]
    assert config["removed_layers"] == [int(steps[0][1])]
    assert config["recipe"]["origin"] == "Greedy removal (SLEB): first 1 greedy removal"


def test_the_greedy_curve_shows_for_a_greedy_analysis_only(model, tiny_tokenizer, page):
    import json
    from dataclasses import replace

    from ui import plots
    from ui.plot_view import PlotView
    from ui.session import Session

    result = run(model, tiny_tokenizer, num_removals=3, protect_ends=False)
    order, curve = result.params["removal_order"], result.params["ppl_curve"]
    trace = plots.greedy_curve_figure(result).data[0]
    assert list(trace.x) == [0, 1, 2, 3] and list(trace.y) == curve
    assert list(trace.text) == ["", *(f"−{layer}" for layer in order)]
    assert f"cut so far: {sorted(order[:2])}" in trace.customdata[2]
    json.dumps(PlotView().postprocess(plots.greedy_curve_figure(result)), allow_nan=False)

    view = page.view
    outputs = view.show(Session(result=result))
    shown, named = outputs[view.greedy], outputs[view.named]
    assert shown["visible"] is True and shown["value"].data[0].y == tuple(curve)
    assert named["label"] == "Cuts named by Greedy removal (SLEB)" and named["choices"] == list(result.cuts)
    other = replace(result, method="ppl", params={}, cuts={})
    outputs = view.show(Session(result=other))
    hidden, named = outputs[view.greedy], outputs[view.named]
    assert hidden["visible"] is False and named["visible"] is False and "label" not in named
    assert view.show(Session())[view.greedy]["visible"] is False


def test_the_app_asks_a_greedy_analysis_for_as_many_steps_as_layers_cut(model, tiny_tokenizer, page):
    from types import SimpleNamespace

    from conftest import handlers_on, stand_in_backend
    from ui.session import Session

    result = run(model, tiny_tokenizer, num_removals=3, protect_ends=False)
    asked = []
    backend = stand_in_backend({"analysis.score": lambda spec, method, **kw: asked.append(kw) or result},
                               default_calibration=CAL)
    info = SimpleNamespace(num_layers=LAYERS, layer_params=[1] * LAYERS, num_params=LAYERS, name="tiny",
                           removed_params=lambda recipe: len(recipe.depth_cut.layers))
    picks = handlers_on(page, backend).pick
    outputs = picks.analyze(Session(info=info), "sleb", "num_removals=2", "default", "", None, 6, 40, 3)
    assert asked[0]["num_removals"] == 3  # raised to the 3 layers cut
    assert outputs[page.view.session].cut().depth_cut.layers == tuple(sorted(result.params["removal_order"]))
    picks.analyze(Session(info=info), "sleb", "max_samples=3", "default", "", None, 6, 40, 2)
    assert "num_removals" not in asked[1] and asked[1]["max_samples"] == 3  # the default 8 steps cover 2
