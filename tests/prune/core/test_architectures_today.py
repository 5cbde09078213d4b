"""The models people pick in 2026, as tiny random models of 42 types transformers ships (tests/tiny_architectures.py:
dense, mixtures of experts, hybrids of attention with linear attention, state spaces or convolutions, a vision-
language checkpoint): each is read by its structure, not a list of names, then loaded, analysed, cut, generated and
exported through the backend the page and the CLI use, and the export reloads in transformers with one layer fewer,
the right kinds per layer and the cut's own logits; the original is untouched."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForCausalLM

import prune
from tiny_architectures import ARCHITECTURES, MOE, VISION, tiny, tiny_config
from evaluation.core.jobs import final
from evaluation.core.pool import ModelSpec
from evaluation.serving.backend import Backend
from prune.core.architectures import (ARCHITECTURES as TABLE, architecture_of, decoder_layers, layer_config,
                                      layer_kinds)
from prune.core.errors import InvalidCut, UnsupportedArchitecture
from prune.core.recipe import Recipe

IDS = torch.tensor([[5, 6, 7, 8, 9, 10]])


@pytest.fixture(scope="module")
def backend():
    return Backend(device="cpu", data_dir="")


def test_most_of_todays_types_are_outside_the_table_and_read_by_their_structure():
    outside = [t for t in ARCHITECTURES if t not in TABLE]
    assert len(ARCHITECTURES) >= 30 and len(outside) >= 0.9 * len(ARCHITECTURES)
    arch = architecture_of(tiny_config("qwen3_moe"))  # a config alone: read off a model built on the meta device
    assert (arch.layers, arch.final_norm, arch.sublayers.attention, arch.sublayers.mlp, arch.ffn_norm) == (
        "model.layers", "model.norm", "self_attn", "mlp", "post_attention_layernorm")
    vision = architecture_of(tiny_config("gemma3"))
    assert (vision.layers, vision.config_path, vision.ffn_norm) == ("model.language_model.layers", "text_config",
                                                                    "pre_feedforward_layernorm")


@pytest.mark.slow  # 42 types, about 2 s each
@pytest.mark.parametrize("model_type", list(ARCHITECTURES))
def test_each_architecture_is_analysed_cut_generated_exported_and_reloaded(model_type, backend, tmp_path,
                                                                           tiny_tokenizer):
    source = tmp_path / "source"
    original = tiny(model_type)
    original.save_pretrained(source)
    tiny_tokenizer.save_pretrained(source)
    spec = ModelSpec(str(source))
    info = backend.models.load(spec)
    assert info.num_layers == 4
    scores = backend.analysis.score(spec, "angular", use_cache=False)
    assert scores.block_scores.shape[-1] >= 3 and torch.isfinite(torch.as_tensor(scores.layer_scores)).all()
    recipe = Recipe.block(4, 1, 2)
    answers = final(backend.measure.generate(spec, {"A": recipe}, "the", max_new_tokens=3))
    assert set(answers) == {"original", "A"}
    cut = backend.models.model(spec, recipe)
    with torch.no_grad():
        before = backend.models.model(spec).forward(IDS).logits.clone()
        expected = cut(IDS).logits
    exported = backend.exports.write(spec, recipe, tmp_path / "export")
    reloaded = AutoModelForCausalLM.from_pretrained(exported, dtype=torch.float32).eval()
    assert len(decoder_layers(reloaded)) == 3 and layer_config(reloaded).num_hidden_layers == 3
    assert [type(layer.mlp if hasattr(layer, "mlp") else layer).__name__ for layer in decoder_layers(reloaded)] == \
        [type(layer.mlp if hasattr(layer, "mlp") else layer).__name__ for layer in decoder_layers(cut)]
    with torch.no_grad():
        torch.testing.assert_close(reloaded(IDS).logits, expected, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(backend.models.model(spec)(IDS).logits, before)  # the original is untouched
    kinds = getattr(layer_config(reloaded), "layer_types", None)
    if kinds is not None:
        full = getattr(layer_config(original), "layer_types")
        assert list(kinds) == [full[i] for i in (0, 2, 3)]
    assert json.loads((exported / "layercut.json").read_text())["removed_layers"] == [1]


def test_a_vision_language_checkpoint_keeps_its_vision_tower_and_cuts_its_text_decoder(tmp_path):
    model = tiny("gemma3")
    cut = prune.cut(model, 1, 3)
    assert cut.config.text_config.num_hidden_layers == 2 and model.config.text_config.num_hidden_layers == 4
    assert cut.model.vision_tower is model.model.vision_tower  # kept as it is (shared)
    assert len(cut.model.language_model.layers) == 2 and len(model.model.language_model.layers) == 4
    cut.save_pretrained(tmp_path)
    back = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32).eval()
    assert type(back) is type(model) and len(back.model.language_model.layers) == 2
    with torch.no_grad():
        torch.testing.assert_close(back(IDS).logits, cut(IDS).logits)


def test_a_vision_language_checkpoints_text_decoder_loses_width_and_reloads_as_the_same_class(tmp_path,
                                                                                               tiny_tokenizer):
    from prune.core.calibration import Calibration

    model = tiny("gemma3")
    before = {name: p.clone() for name, p in model.named_parameters()}
    narrow = prune.shrink_width(model, tiny_tokenizer, param_ratio=0.8, calibration=Calibration(n_samples=2,
                                                                                                 seq_len=16))
    channels = narrow.config.text_config.intermediate_size
    assert channels < 128 and model.config.text_config.intermediate_size == 128
    assert all(layer.mlp.gate_proj.weight.shape == (channels, 64) for layer in decoder_layers(narrow))
    assert narrow.model.vision_tower is model.model.vision_tower  # the vision tower as it is
    narrow.save_pretrained(tmp_path)
    back = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32).eval()
    assert type(back) is type(model)
    with torch.no_grad():
        torch.testing.assert_close(back(IDS).logits, narrow(IDS).logits)
    assert all(torch.equal(p, before[name]) for name, p in model.named_parameters())


def test_a_cut_rewrites_which_layers_hold_experts_so_the_export_reloads_them():
    deepseek = prune.cut(tiny("deepseek_v3"), 1, 2)  # layer 0 dense, 1–3 experts: cutting 1 keeps 0 dense, 2 … 3
    assert deepseek.config.first_k_dense_replace == 1
    qwen = tiny_config("qwen2_moe")
    qwen.decoder_sparse_step, qwen.mlp_only_layers = 2, []  # experts in layers 1 and 3
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(qwen).eval()
    cut = prune.cut(model, 1, 2)  # kept 0 (dense), 2 (dense), 3 (experts)
    assert (cut.config.decoder_sparse_step, cut.config.mlp_only_layers) == (1, [0, 1])
    llama4 = prune.cut(tiny("llama4_text"), 0, 1)  # experts at 1 and 3 → 0 and 2
    assert llama4.config.moe_layers == [0, 2]


def test_a_structure_that_is_not_understood_is_refused_in_one_line():
    from transformers import AutoConfig

    with pytest.raises(UnsupportedArchitecture, match="^LayerCut reads causal language models; transformers has no"):
        architecture_of(AutoConfig.for_model("vit"))
    config = tiny_config("olmoe")
    config.num_hidden_layers = 0
    with pytest.raises(UnsupportedArchitecture, match="no layer count"):
        architecture_of(config)


@pytest.mark.parametrize("model_type", [t for t, (kind, _) in ARCHITECTURES.items() if kind == MOE][:3])
def test_a_family_that_does_not_reach_the_experts_refuses_instead_of_skipping_them(model_type, tiny_tokenizer):
    from prune.lowrank.step import Decompose

    model = tiny(model_type)  # quantization and sparsity reach the experts (tests/prune/*/test_*_experts.py)
    with pytest.raises(UnsupportedArchitecture, match="Low-rank factoring does not reach") as refused:
        Decompose.of("weight", ranks=16).apply(model, tiny_tokenizer)
    assert "\n" not in str(refused.value) and " % of this model's parameters" in str(refused.value)
    assert ARCHITECTURES[model_type][0] != VISION


def test_each_layers_kind_is_read_and_drawn_under_its_number_on_the_heatmap(tiny_tokenizer):
    from ui import plots

    model = tiny("qwen3_next")  # full attention every 2nd layer; every layer's MLP a mixture of experts
    kinds = ["linear attention · experts", "attention · experts"] * 2
    assert layer_kinds(model) == kinds
    assert layer_kinds(tiny("lfm2")) == ["convolution · dense MLP", "attention · dense MLP"] * 2  # conv: no expert
    result = prune.score(model, tiny_tokenizer, "angular", use_cache=False)
    assert result.params["layer_kinds"] == kinds
    axis = plots.heatmap_figure(result).layout.xaxis
    assert list(axis.ticktext) == ["0<br>L·E", "1<br>A·E", "2<br>L·E", "3<br>A·E"]
    assert axis.title.text.endswith("L linear attention, A attention, E experts")
    dense = prune.score(tiny("qwen3"), tiny_tokenizer, "angular", use_cache=False)
    assert "layer_kinds" not in dense.params  # one kind of layer: nothing to show


def test_a_drop_applies_where_the_block_is_and_returns_what_the_layer_unpacks():
    hybrid = tiny("qwen3_next")
    with pytest.raises(InvalidCut, match=r"^Layer 0 has no attention to drop: it is linear attention · experts\.$"):
        prune.SubLayerDrop.of(4, attention=[0]).apply(hybrid)
    for model_type in ("gpt_oss", "llama4_text", "jetmoe"):  # (output, router scores); a tuple a line later; 3 values
        model = tiny(model_type)
        dropped = prune.SubLayerDrop.of(4, attention=[1], mlp=[1]).apply(model)
        with torch.no_grad():
            assert torch.isfinite(dropped(IDS).logits).all()
            assert not torch.equal(dropped(IDS).logits, model(IDS).logits)


@pytest.mark.parametrize("model_type", ["qwen3_moe", "gpt_oss", "deepseek_v3"])
def test_a_decoded_token_reads_k_of_each_layers_experts_and_the_store_holds_all(model_type):
    from evaluation.measure.bandwidth import weights_read
    from evaluation.measure.speed import per_token_flops
    from prune.core.storage import weight_bytes

    model = tiny(model_type)  # 4 experts, 2 a token
    experts = sum(4 * p.numel() for layer in decoder_layers(model) for p in layer.parameters() if p.dim() == 3)
    assert experts > 0
    read, flops = weights_read(model), per_token_flops(model, 8)
    model.config.num_experts_per_tok = 4  # every expert a token: the whole stack read
    assert weights_read(model) - read == experts // 2  # by hand: half of every stacked expert tensor is not read
    assert per_token_flops(model, 8) - flops == 2 * experts // 4 // 2  # 2 FLOPs a weight, half the experts' weights
    assert weight_bytes(model) >= weights_read(model)  # what is stored counts every expert


def test_the_model_line_says_which_families_a_mixture_of_experts_refuses(page, tmp_path,
                                                                                       tiny_tokenizer):
    from conftest import handlers_on
    from ui.session import Session

    tiny("qwen3_moe").save_pretrained(tmp_path)
    tiny_tokenizer.save_pretrained(tmp_path)
    picks = handlers_on(page, Backend(device="cpu")).pick
    *_, last = picks.load_model(Session(), str(tmp_path), "", False, "auto")
    line = last[page.header.model_md]
    assert line.endswith("*Not for this model:* Width, Low-rank (a build says why in one line)")
