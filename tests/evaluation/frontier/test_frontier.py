"""The frontier on a tiny 8-layer Llama: candidates planned by arithmetic checked by hand, every point rebuilt from its
JSON and measured again by an independent route, cells and targets never over their bound, the front by brute force,
a cached rerun with no model work, a stopped run resumed."""

from __future__ import annotations

import json
import math

import pytest
import torch

import prune
from conftest import tiny_model
from evaluation.frontier import plan as planning, run as frontier_run
from evaluation.frontier.plan import FAMILIES, Target, check_plan, check_sizes, check_target
from evaluation.frontier.result import MIB, FrontierResult, format_table, gains
from evaluation.quality import lm_eval_adapter, perplexity
from evaluation.serving.analysis import Analysis
from evaluation.serving.backend import Backend
from evaluation.core.jobs import Cancelled
from prune.core.errors import InvalidInput
from prune.core.recipe import Recipe
from prune.core.sizes import parameter_count
from evaluation.core.jobs import final

LAYERS, LAYER_PARAMS, TOTAL = 8, 9280, 94752  # the tiny Llama: hidden 32, MLP 64, 4 heads over 2 KV groups
ATTENTION_PARAMS, MLP_PARAMS = 2 * 32 * 32 + 2 * 16 * 32, 3 * 64 * 32
SMALL = dict(ppl_seq_len=32, ppl_windows=2, batch_size=4, screen=False)  # every candidate measured (test_screen.py)
SIZES = (0.9, 0.7)


@pytest.fixture(scope="module")
def backend():
    return Backend(device="cpu")


@pytest.fixture(scope="module")
def spec(backend, tiny_tokenizer):
    return backend.models.adopt(tiny_model("llama", LAYERS), tiny_tokenizer, name="tiny-llama-frontier")


@pytest.fixture(scope="module")
def request_(backend):
    return lm_eval_adapter.check_request(["arc_easy"], limit=4, data_dir=backend.models.data_dir)


@pytest.fixture(scope="module")
def result(backend, spec, request_) -> FrontierResult:
    return final(backend.frontier.run(spec, request_, axis="params", sizes=SIZES, **SMALL))


@pytest.fixture(scope="module")
def by_bytes(backend, spec, request_, result) -> FrontierResult:
    """The default frontier (by bytes as stored): the same points, sparsity left out (its points come from cache)."""
    return final(backend.frontier.run(spec, request_, sizes=SIZES, **SMALL))


def _planned(backend, spec, axis="params", sizes=(0.9, 0.8, 0.7), method="block_influence", families=FAMILIES):
    plan = check_plan(axis, sizes, method, backend.models.default_calibration, families=families)
    depth = backend.analysis.score(spec, method, calibration=plan.calibration)
    blocks = backend.analysis.score(spec, "sublayer", calibration=plan.calibration)
    found, why = planning.candidates(backend.models.pool.peek(spec).model, plan, depth, blocks)
    return {(family, c.size): c for c in found for family in c.families}, why, depth, blocks


def test_the_tiny_model_has_the_sizes_these_tests_count_by_hand(backend, spec):
    model = backend.models.pool.peek(spec).model
    assert parameter_count(model) == TOTAL
    assert all(sum(p.numel() for p in layer.parameters()) == LAYER_PARAMS for layer in model.model.layers)
    assert sum(p.numel() for p in model.model.layers[0].self_attn.parameters()) == ATTENTION_PARAMS
    assert sum(p.numel() for p in model.model.layers[0].mlp.parameters()) == MLP_PARAMS


def test_each_family_is_planned_as_its_mildest_step_that_reaches_each_size(backend, spec):
    found, why, depth, blocks = _planned(backend, spec)
    for size in (0.9, 0.8, 0.7):
        removed = TOTAL * (1 - size)
        layers = math.ceil(removed / LAYER_PARAMS)  # whole layers, counted by hand
        paper, block = found[("depth, paper", size)].recipe, found[("depth, block", size)].recipe
        assert list(paper.depth_cut.layers) == depth.best_layers(layers)  # ShortGPT: the least important anywhere
        start, end = depth.best_block(layers)
        assert list(block.depth_cut.layers) == list(range(start, end))
        mlp = found[("MLP drop", size)].recipe.sublayer_drop.mlp
        assert list(mlp) == blocks.best_sublayers("mlp", math.ceil(removed / MLP_PARAMS))
        for family in ("width", "low-rank"):
            count = found[(family,
                           size)].recipe.size(prune.core.sizes.size_of(backend.models.pool.peek(spec).model)).total
            assert size * TOTAL - 0.02 * TOTAL < count <= size * TOTAL
    assert list(found[("attention drop", 0.9)].recipe.sublayer_drop.attention) == \
        blocks.best_sublayers("attention", math.ceil(0.1 * TOTAL / ATTENTION_PARAMS))
    assert "all 8 layers" in why[("attention drop", 0.7)]  # 10 attention blocks would be needed: never all of them
    assert "keeps every parameter" in why[("int8", 0.8)] and ("int4", 0.8) in why
    assert ("2:4", None) in found and found[("2:4", None)].recipe.sparsity.pattern == "2:4"


def test_the_sparsity_level_is_the_lowest_that_zeroes_enough_when_built(backend, spec):
    found, *_ = _planned(backend, spec, sizes=(0.8,))
    model, tokenizer = backend.models.pool.peek(spec).model, backend.models.pool.peek(spec).tokenizer
    step = found[("sparsity", 0.8)].recipe.sparsity

    def non_zero(level):
        built = prune.sparsify(model, tokenizer, "wanda", level, calibration=step.calibration)
        return sum(int(torch.count_nonzero(p)) for p in built.parameters())

    assert non_zero(step.sparsity) <= 0.8 * TOTAL < non_zero(round(step.sparsity - 0.001, 3))


def test_by_memory_sparsity_is_refused_and_quantization_planned_and_one_recipe_is_one_candidate(backend, spec):
    found, why, *_ = _planned(backend, spec, axis="bytes", method="angular")
    assert "stores its zeros" in why[("sparsity", 0.9)] and "stores its zeros" in why[("2:4", 0.8)]
    int8, int4 = found[("int8", None)].recipe.steps[0], found[("int4", None)].recipe.steps[0]
    assert (int8.bits, int8.method, int4.bits, int4.method) == (8, "rtn", 4, "gptq")  # int4 as deployments solve it
    assert int8.embedding and int4.embedding  # and the embedding in int8, as llama.cpp stores token_embd
    # angular distance's paper picks a block: the same cut stands for both depth families, measured once
    assert found[("depth, paper", 0.9)] is found[("depth, block", 0.9)]
    assert found[("depth, paper", 0.9)].families == ("depth, paper", "depth, block")


def test_a_plan_of_some_families_is_exactly_those_families_candidates(backend, spec):
    every, every_why, *_ = _planned(backend, spec, axis="bytes")
    chosen = ("depth, block", "width", "int4")
    found, why, *_ = _planned(backend, spec, axis="bytes", families=reversed(chosen))
    kept = {key: c.recipe for key, c in every.items() if key[0] in chosen}
    assert {key: c.recipe for key, c in found.items()} == kept
    assert why == {key: w for key, w in every_why.items() if key[0] in chosen}
    assert check_plan(families=reversed(chosen)).families == chosen  # in the table's order
    for bad, words in ((("int8", "depth"), "not 'depth'"), ((), "none were given")):
        with pytest.raises(InvalidInput, match=words):
            check_plan(families=bad)


def test_a_target_alone_that_the_original_meets_or_no_family_plans_for_is_one_line(backend, spec, request_):
    for target, words in (("bytes=10GiB", "already meets 10 GiB"), ("bytes=100%", "already meets 100 %"),
                          ("bytes=0.01", "no family is planned under 5 %")):
        with pytest.raises(InvalidInput, match=words):
            backend.frontier.run(spec, request_, sizes=(), target=check_target(target), **SMALL)


def test_a_patch_follows_each_cut_that_keeps_layer_0(backend, spec):
    found, why, *_ = _planned(backend, spec)
    for size in (0.9, 0.8, 0.7):
        for selection in ("paper", "block"):
            cut = found[(f"depth, {selection}", size)].recipe
            if 0 in cut.depth_cut.layers:
                assert "layer 0" in why[(f"depth, {selection} + patch", size)]
            else:
                patched = found[(f"depth, {selection} + patch", size)].recipe
                assert patched.steps[0] == cut.steps[0] and patched.steps[1].kind == "patch"


@pytest.mark.parametrize("sizes, expected", [("90, 80,70", (0.9, 0.8, 0.7)), ([0.5, 80, 0.5], (0.8, 0.5))])
def test_sizes_are_checked_once(sizes, expected):
    assert check_sizes(sizes) == expected


@pytest.mark.parametrize("bad", ["", "abc", [-0.1], [0], [100]])
def test_bad_sizes_are_one_line(bad):
    with pytest.raises(InvalidInput, match="fractions of the original|numbers such as"):
        check_sizes(bad)


def test_every_point_rebuilt_from_its_json_gives_the_same_numbers(backend, spec, request_, result):
    base = backend.models.pool.peek(spec)
    ids = perplexity.token_ids(base.tokenizer, perplexity.wikitext2_rows(backend.models.data_dir))
    assert result.complete and len(result.points) >= 8
    for point in result.points:
        recipe = Recipe.from_json(json.loads(json.dumps(point.recipe.to_json())))
        model = recipe.apply(base.model, base.tokenizer)
        ppl = perplexity.measure_perplexity(model, base.tokenizer, ids, label="again", seq_lens=(32,), bos=(False,),
                                            max_windows=2)[0].value
        non_zero = sum(int(torch.count_nonzero(p)) for p in model.parameters())
        assert ppl == pytest.approx(point.perplexity, rel=1e-6), point.label
        if recipe.sparsity is not None:  # counted here by an independent route: the non-zero entries
            assert point.params == non_zero
        else:
            assert point.params == parameter_count(model)


@pytest.mark.parametrize("run", ["result", "by_bytes"])
def test_a_family_at_a_size_is_its_best_point_at_or_under_it(request, run):
    result = request.getfixturevalue(run)
    for size in result.sizes:
        bound = size * result.dense.value(result.axis)
        for family in result.families():
            found = result.cell(family, size)
            fitting = [p for p in result.points if family in p.families and p.value(result.axis) <= bound
                       and result.counts(p)]
            if fitting:
                assert found.value(result.axis) <= bound
                assert found.perplexity == min(p.perplexity for p in fitting)
            else:
                assert isinstance(found, str) and found  # said, not hidden


@pytest.mark.parametrize("run", ["result", "by_bytes"])
def test_the_front_is_every_point_no_other_beats_on_both(request, run):
    result = request.getfixturevalue(run)
    standing = [p for p in result.everything() if result.counts(p)]
    dominated = {p.recipe.key for p in standing for q in standing
                 if q is not p and q.value(result.axis) <= p.value(result.axis) and q.perplexity < p.perplexity}
    front = {p.recipe.key for p in result.front()}
    assert front == {p.recipe.key for p in standing} - dominated


def test_by_default_the_frontier_is_sized_by_the_bytes_as_stored_and_sparsity_reaches_no_size(by_bytes):
    assert by_bytes.axis == "bytes" and {"int8", "int4"} <= {f for p in by_bytes.points for f in p.families}
    for family in ("sparsity", "2:4"):
        assert not any(family in p.families for p in by_bytes.points)
        assert all("stores its zeros" in by_bytes.cell(family, size) for size in by_bytes.sizes)
    int8 = next(p for p in by_bytes.points if "int8" in p.families)
    assert int8.weight_bytes < by_bytes.dense.weight_bytes / 2 and int8.params == TOTAL  # fewer bytes, every param


@pytest.mark.parametrize("axis", ["params", "bytes", "ms"])
def test_the_best_under_a_target_is_never_over_it(result, axis):
    values = sorted({p.value(axis) for p in result.everything()})
    dense = result.dense.value(axis)
    bounds = [v * f for v in values for f in (0.999, 1.0, 1.001)]
    for bound in bounds:
        target = Target(axis, bound / dense, True) if axis == "params" else Target(axis, bound, False)
        chosen = result.best_under(target)
        fitting = [p for p in result.everything() if p.value(axis) <= bound * (1 + 1e-12) and result.counts(p, axis)]
        if not fitting:
            assert chosen is None
            continue
        assert chosen.value(axis) <= bound * (1 + 1e-12) and chosen.value(axis) / dense <= target.value / (
            1 if axis == "params" else dense)
        assert chosen.perplexity == min(p.perplexity for p in fitting)


def test_the_result_round_trips_through_json_and_prints_a_table(result):
    again = FrontierResult.from_json(json.loads(json.dumps(result.to_json())))
    assert again == result
    table = format_table(result)
    assert f"| 100 % | original | original | {TOTAL * 4 / MIB:.1f} | 100.0 % |" in table
    for family in result.families():
        assert f"| {family}" in table or f", {family}:" in table
    assert all(family in FAMILIES for family in result.families())
    assert result.dense.weight_bytes / MIB == pytest.approx(TOTAL * 4 / MIB)


def test_a_cached_rerun_does_no_model_work(backend, spec, request_, result, monkeypatch):
    calls = []
    handle = backend.models.pool.peek(spec).model.register_forward_pre_hook(lambda *_: calls.append("forward"))

    def refuse(*args, **kwargs):
        raise AssertionError("model work in a cached rerun")

    monkeypatch.setattr(Recipe, "apply", refuse)
    monkeypatch.setattr(Analysis, "score", refuse)
    try:
        again = final(backend.frontier.run(spec, request_, axis="params", sizes=SIZES, **SMALL))
    finally:
        handle.remove()
    assert again == result and calls == []


def test_a_stopped_frontier_resumes_from_the_points_it_finished(backend, spec, request_, monkeypatch, tmp_path):
    monkeypatch.setenv("LAYERCUT_CACHE", str(tmp_path))
    measured = []
    real = frontier_run.measure_point

    def counted(model, tokenizer, recipe, *args, **kwargs):
        measured.append(recipe.short())
        return real(model, tokenizer, recipe, *args, **kwargs)

    monkeypatch.setattr(frontier_run, "measure_point", counted)

    def stop_at_width(fraction, message):
        if message.startswith("width"):
            backend.cancel("visitor-1")

    with pytest.raises(Cancelled):
        final(backend.frontier.run(spec, request_, sizes=(0.9,), progress=stop_at_width, owner="visitor-1",
                                   **SMALL))
    assert measured[-1].startswith("width") and not backend.models.jobs.busy()
    before = len(measured)
    resumed = final(backend.frontier.run(spec, request_, sizes=(0.9,), **SMALL))
    assert measured[before] == measured[before - 1]  # the stopped point first; none it finished measured again
    assert not set(measured[:before - 1]) & set(measured[before:]) and resumed.complete


def test_a_target_joins_the_sizes_and_sets_the_axis(backend, spec, request_):
    goal = check_target("bytes=0.3MiB")
    found = final(backend.frontier.run(spec, request_, sizes=(0.9,), target=goal, **SMALL))
    expected = round(int(0.3 * MIB) / (TOTAL * 4), 3)
    assert found.axis == "bytes" and found.sizes == (0.9, expected)
    chosen = found.best_under(goal)
    assert chosen is not None and chosen.weight_bytes <= 0.3 * MIB and chosen.families


def _cli(capsys, *args):
    from evaluation import cli

    code = cli.main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_command_line_prints_the_table_and_json_and_saves_the_best_under_a_target(tiny_folder, tmp_path, capsys):
    from evaluation.exports import recipe_file

    code, out, err = _cli(capsys, "--frontier", "--target", "bytes=0.9", "--model", tiny_folder,
                          "--task", "arc_easy", "--limit", 2, "--ppl_seq_len", 32, "--ppl_windows", 2,
                          "--output_folder", tmp_path, "--export_dir", tmp_path / "best", "--frontier_all")
    assert code == 0, err
    data = json.loads((tmp_path / "frontier_bytes.json").read_text())
    result = FrontierResult.from_json(data["frontier"])
    assert result.sizes == (0.9,)  # a target alone plans its size only, not the default sizes too
    assert result.screen == 0 and not result.screened  # --frontier_all: every candidate measured in full
    chosen = result.best_under(Target("bytes", 0.9, True))
    assert data["target"]["best"] == chosen.to_json() and chosen.weight_bytes <= 0.9 * result.dense.weight_bytes
    assert data["target"]["of_original"] is True and "| 100 % | original | original |" in out
    assert "Best under 90 % of the original's bytes as stored:" in out
    assert json.dumps(chosen.recipe.to_json()) in out  # the recipe, to give to --recipe or to Python
    assert recipe_file.read(str(tmp_path / "best")).recipe == chosen.recipe  # saved like any export


@pytest.mark.parametrize("args, words", [
    (["--frontier", "--target", "size=3"], "A target is bytes=0.8"),
    (["--frontier", "nosuch"], "Unknown method 'nosuch' for --frontier"),
    (["--full", "--sizes", "90"], "go with --frontier"),
    (["--full", "--frontier_all"], "go with --frontier"),
    (["--frontier", "--axis", "ms", "--target", "mib=400"], "leave out --axis"),
    (["--frontier", "--export_dir", "x"], "with --target"),
    (["--frontier", "--width", "0.8"], "not with --sweep, --sparsity_sweep or --frontier"),
])
def test_the_command_line_refuses_bad_frontier_options_in_one_line(capsys, args, words):
    code, out, err = _cli(capsys, *args)
    assert code == 2 and words in err and len(err.strip().splitlines()) == 1


def test_a_latency_target_is_planned_from_the_rate_timed_at_load(backend, spec, request_):
    backend.models.load(spec)  # times the decode rate once
    rate_ms = 1000 * backend.models.rates(spec).decode_s_per_token
    found = final(backend.frontier.run(spec, request_, sizes=(0.9,), target=Target("ms", 0.5 * rate_ms, False),
                                       **SMALL))
    assert found.axis == "ms" and found.sizes == (0.9, 0.5)
    assert {"int8", "int4", "2:4"} <= {f for p in found.points for f in p.families}  # every family has a latency
    chosen = found.best_under(Target("ms", 0.5 * rate_ms, False))
    assert chosen is None or (chosen.ms <= 0.5 * rate_ms and gains(chosen, found.dense))
