"""Width pruning: the asked size per architecture, save and reload, cache, the original untouched,
Wanda-sp by hand, nothing removed, the recipe step, the parameter count by arithmetic, the matching depth cut."""

from __future__ import annotations

import json

import pytest
import torch
import transformers
from transformers import AutoModelForCausalLM

import prune
from evaluation.exports import texts as export_texts
from evaluation.core.pool import describe
from evaluation.serving.variants import estimated_bytes, own_bytes
from prune.width import shrink as width
from prune.core.architectures import decoder_layers
from prune.core.calibration import BUILTIN_TEXTS, Calibration, token_windows
from prune.core.errors import InvalidInput, UnsupportedArchitecture
from prune.depth.step import DepthCut
from prune.core.recipe import Recipe, recipe_of
from prune.width.step import WidthPrune

from conftest import _COMMON, TINY_CONFIGS, tiny_model

CAL = Calibration(source="text", text=BUILTIN_TEXTS[0].read_text()[:6000], n_samples=6, seq_len=32)
PROMPT = torch.tensor([[5, 17, 42, 9, 120, 77, 3, 250]])

# Width-table rows the shared fixtures do not build: Gemma's own, Qwen3's per-head norms, OLMo-2's whole-width norms.
EXTRA = {
    "gemma": lambda n: transformers.GemmaConfig(**_COMMON, intermediate_size=64, num_hidden_layers=n,
                                                num_key_value_heads=2, head_dim=8),
    "qwen3": lambda n: transformers.Qwen3Config(**_COMMON, intermediate_size=64, num_hidden_layers=n,
                                                num_key_value_heads=2, head_dim=8),
    "olmo2": lambda n: transformers.Olmo2Config(**_COMMON, intermediate_size=64, num_hidden_layers=n,
                                                num_key_value_heads=2),
}
HEADS_KEPT = ("gpt_neox", "gpt2", "opt")  # their configs derive head_dim from hidden / heads


def build(arch: str, layers: int = 4):
    if arch in TINY_CONFIGS:
        return tiny_model(arch, layers)
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(EXTRA[arch](layers), dtype=torch.float32).eval()


def logits(model, ids=PROMPT):
    with torch.no_grad():
        return model(input_ids=ids).logits


def count(model) -> int:
    return sum(p.numel() for p in model.parameters())


def granularity(shape: width.LayerShape, layers: int) -> int:
    """One step of the MLP in every layer: how far the kept count may land from the asked one."""
    return layers * shape.step * shape.channel_params


@pytest.mark.parametrize("arch", [*TINY_CONFIGS, *EXTRA])
def test_each_architecture_shrinks_to_the_asked_size_saves_reloads_and_caches(arch, tiny_tokenizer, tmp_path):
    model = build(arch)
    before = {name: (t.clone(), t.data_ptr()) for name, t in model.state_dict().items()}
    reference = logits(model)
    ratio = 0.75 if arch in HEADS_KEPT else 0.6  # 0.6 takes one of the two KV groups of the tiny models
    size = width.size_of(model)

    narrow = prune.shrink_width(model, tiny_tokenizer, param_ratio=ratio, calibration=CAL)

    assert abs(count(narrow) - ratio * count(model)) <= granularity(size.shape, len(size.layers)) / 2
    assert count(narrow) == width.resized(size, width.plan(size, ratio)).total  # the arithmetic is exact
    if arch not in HEADS_KEPT:
        assert narrow.config.num_key_value_heads == 1 and narrow.config.head_dim == size.shape.head_dim
    assert all(torch.equal(before[n][0], t) and before[n][1] == t.data_ptr() for n, t in model.state_dict().items())
    assert torch.equal(logits(model), reference)
    out = logits(narrow)
    assert out.shape == reference.shape and torch.isfinite(out).all() and not torch.equal(out, reference)

    narrow.save_pretrained(tmp_path)
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32).eval()
    assert count(reloaded) == count(narrow)
    assert torch.equal(logits(reloaded), out)

    settings = dict(max_new_tokens=6, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        cached = narrow.generate(PROMPT, use_cache=True, **settings)
        uncached = narrow.generate(PROMPT, use_cache=False, **settings)
    assert torch.equal(cached, uncached)


def test_wanda_sp_scores_and_the_kept_rows_equal_a_hand_computation(tiny_tokenizer):
    model = tiny_model("llama", 2)
    layer = decoder_layers(model)[0]
    seen = {}

    def keep(name):
        def hook(_module, args, _output):
            x = args[0].reshape(-1, args[0].shape[-1])
            seen[name] = seen.get(name, 0) + (x * x).sum(0)
        return hook

    handles = [layer.self_attn.o_proj.register_forward_hook(keep("o")),
               layer.mlp.down_proj.register_forward_hook(keep("down"))]
    with torch.no_grad():
        model(input_ids=token_windows(tiny_tokenizer, CAL))
    for handle in handles:
        handle.remove()
    # FLAP's prune_wanda_sp: mean over output rows of |W| · ‖X_j‖, summed over a head's columns
    o = (layer.self_attn.o_proj.weight.abs() * seen["o"].sqrt()).mean(0)
    by_hand_groups = torch.stack([o[:16].sum(), o[16:].sum()])  # 2 KV groups of 2 heads × head_dim 8
    by_hand_channels = (layer.mlp.down_proj.weight.abs() * seen["down"].sqrt()).mean(0)

    scores = width.importance(model, tiny_tokenizer, CAL)[0]
    torch.testing.assert_close(scores.groups, by_hand_groups)
    torch.testing.assert_close(scores.channels, by_hand_channels)

    narrow = prune.shrink_width(model, tiny_tokenizer, param_ratio=0.65, calibration=CAL)
    found = width.plan(width.size_of(model), 0.65)
    assert found.groups == 1 and found.channels > 0
    group = int(by_hand_groups.argmax())
    channels = by_hand_channels.argsort(descending=True)[:64 - found.channels].sort().values
    new = decoder_layers(narrow)[0]
    assert torch.equal(new.self_attn.q_proj.weight, layer.self_attn.q_proj.weight[16 * group:16 * (group + 1)])
    assert torch.equal(new.self_attn.k_proj.weight, layer.self_attn.k_proj.weight[8 * group:8 * (group + 1)])
    assert torch.equal(new.self_attn.o_proj.weight, layer.self_attn.o_proj.weight[:, 16 * group:16 * (group + 1)])
    assert torch.equal(new.mlp.up_proj.weight, layer.mlp.up_proj.weight[channels])
    assert torch.equal(new.mlp.down_proj.weight, layer.mlp.down_proj.weight[:, channels])


def test_fused_layouts_keep_the_same_units_as_the_separate_ones(tiny_tokenizer):
    """Phi-3's qkv_proj = [q; k; v] and gate_up_proj = [gate; up] are sliced per segment."""
    model = tiny_model("phi3", 2)
    narrow = prune.shrink_width(model, tiny_tokenizer, param_ratio=0.65, calibration=CAL)
    scores = width.importance(model, tiny_tokenizer, CAL)[1]
    group = int(scores.groups.argmax())
    old, new = decoder_layers(model)[1], decoder_layers(narrow)[1]
    q, k, v = old.self_attn.qkv_proj.weight.split([32, 16, 16])
    want = torch.cat([q[16 * group:16 * (group + 1)], k[8 * group:8 * (group + 1)], v[8 * group:8 * (group + 1)]])
    assert torch.equal(new.self_attn.qkv_proj.weight, want)
    kept = narrow.config.intermediate_size
    channels = scores.channels.argsort(descending=True)[:kept].sort().values
    gate, up = old.mlp.gate_up_proj.weight.split([64, 64])
    assert torch.equal(new.mlp.gate_up_proj.weight, torch.cat([gate[channels], up[channels]]))


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_keeping_everything_gives_identical_logits_and_shares_every_tensor(arch):
    model = tiny_model(arch, 3)
    same = prune.shrink_width(model, None, param_ratio=1.0)  # nothing to score: no tokenizer needed
    assert same is not model and torch.equal(logits(same), logits(model))
    assert own_bytes(same, model) == 0


def test_the_recipe_step_composes_after_a_depth_cut_counts_by_arithmetic_and_round_trips(tiny_tokenizer):
    model = tiny_model("qwen2", 4)
    recipe = Recipe.block(4, 1, 2, origin="test").then(WidthPrune.of(0.6, CAL))
    derived = recipe.apply(model, tiny_tokenizer)

    assert len(decoder_layers(derived)) == 3 and derived.config.num_key_value_heads == 1
    assert torch.isfinite(logits(derived)).all()
    assert recipe.size(width.size_of(model)).total == count(derived)
    info = describe(model, "tiny")
    assert info.removed_params(recipe) == count(model) - count(derived)
    assert info.removed_params(Recipe.block(4, 1, 2)) == info.layer_params[1]
    assert estimated_bytes(model, recipe) == own_bytes(derived, model)

    data = json.loads(json.dumps(recipe.to_json()))
    assert data["steps"][1] == {"kind": "width", "param_ratio": 0.6, "text_digest": recipe.steps[1].text_digest,
                                "calibration": {**data["steps"][1]["calibration"], "text": None}}
    again = Recipe.from_json(data)
    assert again == recipe and again.key == recipe.key and recipe_of(derived) == recipe
    with pytest.raises(InvalidInput, match="digest"):
        again.apply(model, tiny_tokenizer)  # the text itself is not recorded
    assert recipe.short() == "cut 1 width 60%" and "Wanda-sp" in recipe.describe()
    plain = WidthPrune.of(0.8)
    assert Recipe.from_json(Recipe((plain,)).to_json()).steps == (plain,)


def test_matching_depth_cut_removes_about_the_same_parameters():
    model = tiny_model("llama", 8)
    size = width.size_of(model)
    for ratio in (0.9, 0.8, 0.6):
        n = width.matching_depth_layers(size, ratio)
        error = abs(n * size.layers[0] - (1 - ratio) * size.total)
        assert all(error <= abs(m * size.layers[0] - (1 - ratio) * size.total) for m in range(1, 8))
        assert DepthCut.of(8, range(n))  # a valid cut
    assert width.matching_depth_layers(size, 0.01) == 7 and width.matching_depth_layers(size, 0.999) == 1


def test_bad_requests_are_refused_clearly(tiny_tokenizer):
    model = tiny_model("llama", 2)
    for ratio in (0, -0.2, 1.5, True, "0.8", None):
        with pytest.raises(InvalidInput, match="fraction of the model's parameters kept"):
            prune.shrink_width(model, tiny_tokenizer, param_ratio=ratio)
        with pytest.raises(InvalidInput):
            WidthPrune.of(ratio)
    with pytest.raises(InvalidInput, match="at least"):
        prune.shrink_width(model, tiny_tokenizer, param_ratio=0.2)
    with pytest.raises(InvalidInput, match="tokenizer"):
        prune.shrink_width(model, None, param_ratio=0.8)
    torch.manual_seed(0)
    moe = AutoModelForCausalLM.from_config(transformers.MixtralConfig(
        **_COMMON, intermediate_size=64, num_hidden_layers=2, num_key_value_heads=2, num_local_experts=2))
    with pytest.raises(UnsupportedArchitecture, match="mixtral"):
        prune.shrink_width(moe, tiny_tokenizer, param_ratio=0.8)
    assert width.size_of(moe).shape is None  # its depth can still be cut and counted


def test_the_model_card_gives_the_new_sizes(tiny_tokenizer):
    model = tiny_model("llama", 4)
    recipe = Recipe((WidthPrune.of(0.6, CAL),))
    narrow = recipe.apply(model, tiny_tokenizer)
    card = export_texts.model_card(narrow, recipe, base_name="tiny", num_layers=4)
    assert "- width-pruning" in card
    assert (f"2 attention heads (1 KV heads, head_dim 8) and {narrow.config.intermediate_size} MLP channels per layer, "
            f"{count(narrow):,} parameters") in card


def test_progress_is_reported_and_raising_there_cancels(tiny_tokenizer):
    model = tiny_model("llama", 3)
    reference = logits(model)
    seen = []
    prune.shrink_width(model, tiny_tokenizer, param_ratio=0.6, calibration=CAL,
                       progress=lambda fraction, message: seen.append(fraction), batch_size=2)
    assert len(seen) == 3 + 3 and seen == sorted(seen) and seen[-1] == 1.0  # 6 windows in batches of 2, 3 layers

    def stop(fraction, message):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        prune.shrink_width(model, tiny_tokenizer, param_ratio=0.6, calibration=CAL, progress=stop)
    assert torch.equal(logits(model), reference)
