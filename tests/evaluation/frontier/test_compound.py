"""Compound candidates (a structure, then int8 or int4; repaired on request): their bytes as stored counted by
arithmetic against built models, planned to land at each size by bytes, and measured, exported and read back like
any other point."""

from __future__ import annotations

import pytest
import torch

import prune
from conftest import tiny_model
from evaluation.core.jobs import final
from evaluation.frontier import compound, plan as planning
from evaluation.frontier.plan import check_plan
from evaluation.quality import lm_eval_adapter
from evaluation.serving.backend import Backend
from prune.core.errors import InvalidInput
from prune.core.recipe import Recipe
from prune.core.sizes import size_of
from prune.core.storage import weight_bytes
from prune.lowrank.step import Decompose
from prune.quantize.step import Quantize
from prune.width.step import WidthPrune

LAYERS = 8
SMALL = dict(ppl_seq_len=32, ppl_windows=2, batch_size=4)


def tied(model):
    model.config.tie_word_embeddings = True
    model.lm_head.weight = model.model.embed_tokens.weight
    return model


@pytest.mark.parametrize("make", [lambda: tiny_model("llama", 4), lambda: tied(tiny_model("llama", 4))],
                         ids=["untied", "tied"])
def test_the_bytes_as_stored_of_any_recipe_are_the_built_models_bytes(make, tiny_tokenizer):
    model = make()
    recipes = [Recipe(), Recipe.block(4, 1, 3).then(Quantize.of(4)), Recipe((WidthPrune.of(0.7), Quantize.of(8))),
               Recipe((Decompose.of("weight", 0.6), Quantize.of(4, 32))), Recipe.block(4, 0, 1).then(
                   Quantize.of(8, head=True)), Recipe((Quantize.of(4, 64, head=True),))]
    size, element = size_of(model), 4
    for recipe in recipes:
        assert recipe.stored_bytes(size, element) == weight_bytes(recipe.apply(model, tiny_tokenizer)), recipe.short()


@pytest.fixture(scope="module")
def backend():
    return Backend(device="cpu")


@pytest.fixture(scope="module")
def spec(backend, tiny_tokenizer):
    return backend.models.adopt(tiny_model("llama", LAYERS), tiny_tokenizer, name="tiny-llama-compound")


def planned(backend, spec, axis="bytes", sizes=(0.25, 0.2), repair=None):
    plan = check_plan(axis, sizes, "angular", backend.models.default_calibration, repair=repair)
    depth = backend.analysis.score(spec, "angular", calibration=plan.calibration)
    blocks = backend.analysis.score(spec, "sublayer", calibration=plan.calibration)
    found, why = planning.candidates(backend.models.pool.peek(spec).model, plan, depth, blocks)
    return {(family, c.size): c.recipe for c in found for family in c.families}, why


def test_each_compound_is_the_mildest_structure_that_fits_the_size_once_quantized(backend, spec):
    model = backend.models.pool.peek(spec).model
    size, element = size_of(model), 4
    original = Recipe().stored_bytes(size, element)
    found, why = planned(backend, spec)
    alone = Recipe((compound.quantization("int4", None),)).stored_bytes(size, element)
    assert alone > 0.25 * original  # int4 alone (an int8 embedding, the head untied in float) is too big here
    for target in (0.25, 0.2):
        for bits in ("int8", "int4"):
            cut = found[(f"depth, block + {bits}", target)]
            assert cut.stored_bytes(size, element) <= target * original
            start, end = cut.depth_cut.layers[0], cut.depth_cut.layers[-1] + 1
            assert end - start == 1 or Recipe.block(LAYERS, start, end - 1).then(
                compound.quantization(bits, None)).stored_bytes(size, element) > target * original  # the mildest
            width = found.get((f"width + {bits}", target))
            if width is None:  # width pruning keeps a KV group and 8 channels a layer: it may not go that low
                assert "no ratio" in why[(f"width + {bits}", target)]
                continue
            ratio = width.steps[0].param_ratio
            wider = Recipe((WidthPrune.of(round(ratio + 0.001, 6)), compound.quantization(bits, None)))
            assert width.stored_bytes(size, element) <= target * original < wider.stored_bytes(size, element)
        patched = found.get(("depth, block + patch + int4", 0.2))
        assert patched is None or patched.steps[1].kind == "patch"
    assert found[("depth, block + int4", 0.2)].depth_cut.layers != found[("depth, block + int8", 0.2)].depth_cut.layers


def test_a_size_the_quantization_alone_reaches_and_the_params_axis_plan_no_compound(backend, spec):
    found, why = planned(backend, spec, sizes=(0.9,))
    assert "int4 alone reaches this size" in why[("width + int4", 0.9)] and ("width + int4", 0.9) not in found
    found, why = planned(backend, spec, axis="params", sizes=(0.7,))
    assert "keeps every parameter" in why[("depth, block + int8", 0.7)]


def test_a_repair_adds_each_structures_trained_twin_before_its_quantization(backend, spec):
    repair = compound.check_repair("kd", 30)
    found, _ = planned(backend, spec, sizes=(0.2,), repair=repair)
    twin, plain = found[("depth, block + kd + int4", 0.2)], found[("depth, block + int4", 0.2)]
    assert [s.kind for s in twin.steps] == ["cut", "heal", "quantize"] and twin.steps[0] == plain.steps[0]
    heal = twin.steps[1]
    assert heal.budget_s == 30 and dict(heal.options)["teacher"] == "forward_kl"
    assert [s.kind for s in found[("low-rank + kd + int8", 0.2)].steps] == ["lowrank", "heal", "quantize"]
    for name, seconds, words in (("sft", 30, "kd or lora"), ("kd", 0, "1…3,600 seconds")):
        with pytest.raises(InvalidInput, match=words):
            compound.check_repair(name, seconds)


def test_a_compound_point_is_measured_under_its_size_and_exports_and_reloads_with_the_same_logits(
        backend, spec, tmp_path):
    request = lm_eval_adapter.check_request(["arc_easy"], limit=2, data_dir=backend.models.data_dir)
    result = final(backend.frontier.run(spec, request, sizes=(0.2,), families=("depth, block + int4",), **SMALL))
    point = next(p for p in result.points if p.families == ("depth, block + int4",))
    assert point.weight_bytes <= 0.2 * result.dense.weight_bytes and point.weight_bytes == weight_bytes(
        backend.models.model(spec, point.recipe))
    assert result.best_under(planning.check_target("bytes=0.2")) == point
    folder = backend.exports.write(spec, point.recipe, tmp_path / "compound")
    reloaded, _ = prune.load_model(str(folder), device="cpu")
    ids = torch.arange(12)[None] % 300
    with torch.no_grad():
        assert torch.equal(reloaded(ids).logits, backend.models.model(spec, point.recipe)(ids).logits)


def test_on_a_mixture_of_experts_expert_pruning_is_a_family_alone_and_quantized_and_a_dense_model_says_why(
        backend, spec, tiny_tokenizer):
    from prune.experts.step import ExpertPrune
    from tiny_architectures import tiny

    model = tiny("qwen3_moe")  # 4 experts a layer
    moe = backend.models.adopt(model, tiny_tokenizer, name="tiny-moe-frontier")
    size, element = size_of(model), 4
    original = Recipe().stored_bytes(size, element)
    recipe = Recipe((ExpertPrune.of("reap", 0.5), Quantize.of(8)))
    assert recipe.stored_bytes(size, element) == weight_bytes(recipe.apply(model, tiny_tokenizer))  # by arithmetic
    found, why = planned(backend, moe, sizes=(0.8, 0.65, 0.3))
    assert why[("experts, REAP", 0.3)].startswith("removing 90 % of every layer's experts does not reach")
    for target in (0.8, 0.65):
        alone = found[("experts, REAP", target)]
        removed = round(alone.steps[0].fraction * 4)
        assert alone.size(size).total <= target * size.total  # planned on the parameters
        assert removed == 1 or Recipe((ExpertPrune.of("reap", (removed - 1) / 4),)).size(size).total > \
            target * size.total  # the fewest experts that reach it
    quantized = found[("experts, REAP + int8", 0.3)]  # int8 alone (the head untied in float): 35 %
    assert quantized.stored_bytes(size, element) <= 0.3 * original and quantized.steps[-1].kind == "quantize"
    assert "int8 alone reaches this size" in why[("experts, REAP + int8", 0.65)]
    _, dense = planned(backend, spec, sizes=(0.8,))
    assert dense[("experts, REAP", 0.8)].startswith("this model has no experts")
