"""Healing: LoRA trains only adapters until merged, the merged model reloads exactly, zeros survive, the
original and the unhealed variant stay bit-identical, the loss goes down, seeded runs repeat, the recipe step."""

from __future__ import annotations

import importlib
import json

import pytest
import torch
from transformers import AutoModelForCausalLM

import prune
from evaluation.serving.variants import estimated_bytes, own_bytes
from prune.core.architectures import decoder_layers
from prune.core.calibration import BUILTIN_TEXTS, Calibration
from prune.core.errors import InvalidInput, UnknownMethod
from prune.core.factored import Factored
from prune.healing.train import HEALED_FIELD, split_windows
from prune.healing.step import Heal
from prune.core.step import STEPS
from prune.depth.step import DepthCut
from prune.core.recipe import Recipe, recipe_of
from prune.sparsity.step import Sparsify
from prune.core.sequential import matrices

from conftest import TINY_CONFIGS, tiny_model

heal_module = importlib.import_module("prune.healing.train")  # the module, beside the function prune.heal

TEXT = BUILTIN_TEXTS[0].read_text()[:12000]
FAST = dict(text=TEXT, seq_len=32, batch=4, heldout=4, eval_every=2)
PROMPT = torch.tensor([[5, 17, 42, 9, 120, 77, 3, 250]])
METHODS = ("lora", "last_layers")


def logits(model, ids=PROMPT):
    with torch.no_grad():
        return model(input_ids=ids).logits


def snapshot(model) -> dict:
    return {name: (t.detach().clone(), t.data_ptr()) for name, t in model.state_dict().items()}


def assert_same(model, before: dict) -> None:
    now = model.state_dict()
    assert now.keys() == before.keys()
    for name, (value, ptr) in before.items():
        assert torch.equal(now[name], value) and now[name].data_ptr() == ptr, name


def cut_model(layers: int = 4):
    model = tiny_model("llama", layers)
    return model, prune.cut(model, 1, 2)


@pytest.mark.parametrize("method", METHODS)
def test_the_original_and_the_unhealed_variant_stay_bit_identical(method, tiny_tokenizer):
    model, cut = cut_model()
    flags = [p.requires_grad for p in model.parameters()]
    before, before_cut, reference = snapshot(model), snapshot(cut), logits(cut)
    healed = prune.heal(cut, tiny_tokenizer, method=method, steps=3, lr=1e-2, **FAST)
    assert_same(model, before)
    assert_same(cut, before_cut)
    assert torch.equal(logits(cut), reference) and not torch.equal(logits(healed), reference)
    assert [p.requires_grad for p in model.parameters()] == flags
    assert healed.config is not cut.config and not hasattr(cut.config, HEALED_FIELD)


def test_lora_trains_only_the_adapters_and_the_merge_adds_their_product(tiny_tokenizer, monkeypatch):
    _, cut = cut_model()
    seen = {}
    merge = heal_module._merged

    def spy(peft_model, zeros):
        seen["trainable"] = sorted(n for n, p in peft_model.named_parameters() if p.requires_grad)
        seen["state"] = {n: t.detach().clone() for n, t in peft_model.state_dict().items()}
        seen["delta"] = {n.removeprefix("base_model.model."): m.get_delta_weight("default").detach().clone()
                         for n, m in peft_model.named_modules() if hasattr(m, "get_delta_weight")}
        return merge(peft_model, zeros)

    monkeypatch.setattr(heal_module, "_merged", spy)
    healed = prune.heal(cut, tiny_tokenizer, method="lora", steps=4, lr=1e-2, **FAST)
    assert seen["trainable"] and all(".lora_A." in n or ".lora_B." in n for n in seen["trainable"])
    assert len(seen["trainable"]) == 2 * 7 * 3  # A and B of 7 projections in each of the 3 layers left
    original = cut.state_dict()
    for name, value in seen["state"].items():  # before the merge: every base tensor as it was, B trained off zero
        if "lora_" not in name:
            base = name.removeprefix("base_model.model.").replace(".base_layer.", ".")
            assert torch.equal(value, original[base]), name
        elif ".lora_B." in name:
            assert value.abs().sum() > 0, name
    after = healed.state_dict()
    assert not any("lora" in n for n in after) and after.keys() == original.keys()
    for name in original:
        module = name.removesuffix(".weight")
        if module in seen["delta"]:
            torch.testing.assert_close(after[name], original[name] + seen["delta"][module], rtol=0, atol=1e-6)
        else:
            assert torch.equal(after[name], original[name]), name


def test_the_merged_model_saves_and_reloads_with_identical_logits(tiny_tokenizer, tmp_path):
    _, cut = cut_model()
    healed = prune.heal(cut, tiny_tokenizer, method="lora", steps=3, lr=1e-2, **FAST)
    assert type(healed).__name__ == "LlamaForCausalLM"
    healed.save_pretrained(tmp_path)
    again = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32).eval()
    assert torch.equal(logits(again), logits(healed))
    assert again.config.layercut_healed["steps_done"] == 3 and again.config.layercut_healed["method"] == "lora"


@pytest.mark.parametrize("method", METHODS)
def test_a_sparse_variants_zeros_survive_healing(method, tiny_tokenizer):
    model = tiny_model("llama", 4)
    sparse = prune.sparsify(prune.cut(model, 1, 2), tiny_tokenizer, "magnitude", 0.5)
    zeros = {name: m.weight == 0 for name, m in decoder_layers(sparse).named_modules() if name in
             {f"{i}.{p}" for i, layer in enumerate(decoder_layers(sparse)) for p in matrices(layer)}}
    healed = prune.heal(sparse, tiny_tokenizer, method=method, steps=3, lr=1e-2, **FAST)
    changed = 0
    for name, mask in zeros.items():
        weight = decoder_layers(healed).get_submodule(name).weight
        assert (weight[mask] == 0).all(), name
        changed += int(not torch.equal(weight, decoder_layers(sparse).get_submodule(name).weight))
    assert changed == (len(zeros) if method == "lora" else 7 * 3)  # last_layers: the 3 layers' 7 matrices each
    assert prune.sparsity.masks.zero_fraction(healed) == pytest.approx(0.5, abs=0.01)


@pytest.mark.parametrize("method", METHODS)
def test_healing_a_cut_model_lowers_its_held_out_loss(method, tiny_tokenizer):
    """On a repeated passage, held out by windows. The random model is initialised 5× wider than transformers' 0.02:
    at that scale its head's logits stay nearly uniform whatever the layers do, and LoRA (which leaves the head
    alone) could hardly move the loss."""
    torch.manual_seed(0)
    config = TINY_CONFIGS["llama"](4)
    config.initializer_range = 0.1
    cut = prune.cut(AutoModelForCausalLM.from_config(config).eval(), 1, 2)
    text = TEXT[:700] * 15
    curve = []
    healed = prune.heal(cut, tiny_tokenizer, method=method, steps=20, lr=1e-2, callback=lambda *a: curve.append(a),
                        **{**FAST, "text": text})
    _, held = split_windows(tiny_tokenizer, Calibration(source="text", text=text), 32, 4)
    before, after = heal_module.heldout_loss(cut, held), heal_module.heldout_loss(healed, held)
    assert after < before - 0.3
    assert curve[0][:2] == (0, 20) and curve[0][3] == pytest.approx(before)
    assert curve[-1][:2] == (20, 20) and curve[-1][3] == pytest.approx(after)
    assert [c[0] for c in curve] == list(range(21)) and [c[3] is not None for c in curve[1:]] == [s % 2 == 0 for s in
                                                                                                 range(1, 21)]


@pytest.mark.parametrize("method", METHODS)
def test_the_same_recipe_heals_to_the_same_weights(method, tiny_tokenizer):
    _, cut = cut_model()
    first = prune.heal(cut, tiny_tokenizer, method=method, steps=3, lr=1e-2, **FAST).state_dict()
    second = prune.heal(cut, tiny_tokenizer, method=method, steps=3, lr=1e-2, **FAST).state_dict()
    assert all(torch.equal(first[n], second[n]) for n in first)
    other = prune.heal(cut, tiny_tokenizer, method=method, steps=3, lr=1e-2, seed=1, **FAST).state_dict()
    assert not all(torch.equal(first[n], other[n]) for n in first)


def test_a_time_budget_stops_after_the_step_that_crosses_it(tiny_tokenizer):
    _, cut = cut_model()
    curve = []
    healed = prune.heal(cut, tiny_tokenizer, method="last_layers", steps=50, budget_s=1e-6, lr=1e-2,
                        callback=lambda *a: curve.append(a), **FAST)
    record = healed.config.layercut_healed
    assert record["steps_done"] == 1 and record["stopped_by_budget"] and record["steps"] == 50
    assert [c[0] for c in curve] == [0, 1] and curve[-1][3] is not None  # the last step reports its held-out loss


def test_progress_that_raises_cancels_and_leaves_everything_untouched(tiny_tokenizer):
    model, cut = cut_model()
    before = snapshot(model)

    class Stop(Exception):
        pass

    def progress(fraction, _message):
        if fraction > 0:
            raise Stop

    with pytest.raises(Stop):
        prune.heal(cut, tiny_tokenizer, method="lora", steps=5, progress=progress, **FAST)
    assert_same(model, before)


def test_lora_refuses_factored_projections_and_last_layers_trains_the_factors(tiny_tokenizer):
    model = tiny_model("llama", 4)
    factored = prune.decompose(prune.cut(model, 1, 2), tiny_tokenizer, space="weight", ranks=4,
                               projections=["o_proj"])
    with pytest.raises(InvalidInput, match="LoRA cannot heal low-rank factored projections"):
        prune.heal(factored, tiny_tokenizer, method="lora", steps=1, **FAST)
    healed = prune.heal(factored, tiny_tokenizer, method="last_layers", steps=2, lr=1e-2, layers=2, **FAST)
    last, before = decoder_layers(healed)[-1].self_attn.o_proj, decoder_layers(factored)[-1].self_attn.o_proj
    assert isinstance(last, Factored) and last.rank == 4
    assert not torch.equal(last.first.weight, before.first.weight)
    assert torch.equal(decoder_layers(healed)[0].self_attn.o_proj.first.weight,
                       decoder_layers(factored)[0].self_attn.o_proj.first.weight)
    assert healed.config.layercut_healed["options"]["layers"] == 2 and not isinstance(
        decoder_layers(healed)[-1].self_attn.q_proj, Factored)


def test_bad_options_are_one_line_errors(tiny_tokenizer):
    _, cut = cut_model()
    with pytest.raises(UnknownMethod, match="Unknown healing method 'dora'"):
        Heal.of("dora")
    with pytest.raises(InvalidInput, match="takes no option 'rank'"):
        Heal.of("last_layers", rank=4)
    with pytest.raises(InvalidInput, match="at least 1"):
        Heal.of("lora", steps=0)
    with pytest.raises(InvalidInput, match="too short"):
        prune.heal(cut, tiny_tokenizer, steps=1, text="a few words", seq_len=32)


# ---------------------------------------------------------------- the recipe step


def test_the_heal_step_is_registered_and_never_comes_first():
    assert STEPS["heal"] is Heal
    with pytest.raises(InvalidInput, match="cannot come first"):
        Recipe((Heal.of("lora"),))
    with pytest.raises(InvalidInput, match="cannot come first"):
        Recipe().then(Heal.of("last_layers"))


def test_the_heal_step_key_record_and_titles():
    step = Heal.of("lora", 30, text=TEXT, lr=5e-4)
    recipe = Recipe.block(4, 1, 2).then(step)
    data = json.loads(json.dumps(recipe.to_json()))
    assert data["steps"][1]["text"]["text"] is None and data["steps"][1]["text_digest"] == step.text_digest
    assert data["steps"][1]["options"]["lr"] == 5e-4 and data["steps"][1]["options"]["rank"] == 8
    again = Recipe.from_json(data)
    assert again == recipe and again.key == recipe.key
    assert Recipe.block(4, 1, 2).then(Heal.of("lora", 30, text=TEXT, lr=5e-4)).key == recipe.key
    for other in (Heal.of("lora", 31, text=TEXT, lr=5e-4), Heal.of("lora", 30, text=TEXT + ".", lr=5e-4),
                  Heal.of("lora", 30, text=TEXT), Heal.of("lora", 30, budget_s=60, text=TEXT, lr=5e-4)):
        assert Recipe.block(4, 1, 2).then(other).key != recipe.key
    with pytest.raises(InvalidInput, match="inline calibration text kept only as its digest"):
        again.steps[1].apply(tiny_model("llama", 3))
    assert step.short() == "lora 30" and Heal.of("last_layers").short() == "last-3 40"
    assert recipe.short() == "cut 1 lora 30"
    assert Heal.of("lora").describe() == ("LoRA healing (rank 8, α 16), 30 steps of 4 × 256 tokens of WikiText-2 "
                                          "validation, lr 0.001")
    assert Heal.of("last_layers", layers=2, budget_s=90).describe().startswith(
        "last-layers healing (the last 2 layers, final norm and LM head), 40 steps (at most 90 s)")
    model = tiny_model("llama", 4)
    size = prune.core.sizes.size_of(model)
    assert recipe.size(size) == Recipe.block(4, 1, 2).size(size)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("sparse", [False, True])
def test_a_healed_variant_owns_what_it_trained_and_the_estimate_says_so(method, sparse, tiny_tokenizer):
    model = tiny_model("llama", 4)
    steps = [DepthCut.block(4, 1, 2)] + ([Sparsify.of("magnitude", 0.5)] if sparse else [])
    recipe = Recipe(tuple(steps)).then(Heal.of(method, 2, text=TEXT, seq_len=32, heldout=4))
    healed = recipe.apply(model, tiny_tokenizer)
    assert recipe_of(healed) == recipe and healed.config.layercut_healed["steps_done"] == 2
    assert own_bytes(healed, model) == estimated_bytes(model, recipe) > 0
    if method == "lora" and not sparse:  # exactly the 7 projections of the 3 layers left
        assert own_bytes(healed, model) == 4 * sum(m.weight.numel() for layer in decoder_layers(healed)
                                                   for m in matrices(layer).values())
