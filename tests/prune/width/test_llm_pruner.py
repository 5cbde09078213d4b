"""LLM-Pruner's width criterion: the group scores equal element-wise |W·g| summed by hand over each group's rows and
columns after one plain backward pass (Llama, Phi-3's fused matrices, GPT-2's Conv1D), the kept structures are the
top-scored ones, a planted useless structure goes first, the step records and refuses plainly, and a model read
from disk scores the same."""

from __future__ import annotations

import copy

import pytest
import torch

import prune
from prune.core.architectures import decoder_layers, width_of
from prune.core.calibration import BUILTIN_TEXTS, Calibration, token_windows
from prune.core.errors import InvalidInput
from prune.core.recipe import Recipe
from prune.core.sizes import layer_shape
from prune.width import shrink as width
from prune.width.step import WidthPrune
from prune.width.taylor import taylor_scores

from conftest import tiny_model

CAL = Calibration(source="text", text=BUILTIN_TEXTS[0].read_text()[:6000], n_samples=6, seq_len=32)


def gradients(model, tokenizer):
    """The textbook computation: a copy, one full backward of the mean next-token loss, every gradient kept."""
    model = copy.deepcopy(model)
    ids = token_windows(tokenizer, CAL)
    model(input_ids=ids, labels=ids, use_cache=False).loss.backward()
    return model


def salience(module) -> torch.Tensor:
    """|W ⊙ ∂L/∂W| in float64 (LLM-Pruner's ``(weight * weight.grad).abs()``, ``param_first``)."""
    return (module.weight.detach().double() * module.weight.grad.double()).abs()


def llama_by_hand(layer, heads_per_group: int, head_dim: int, groups: int):
    """Per KV group: its query heads' rows of q, its rows of k and v, its columns of o; per channel: its rows of
    gate and up and its column of down."""
    attn, mlp = layer.self_attn, layer.mlp
    q, k, v, o = (salience(m) for m in (attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj))
    width_q = heads_per_group * head_dim
    by_group = torch.stack([q[g * width_q:(g + 1) * width_q].sum() + k[g * head_dim:(g + 1) * head_dim].sum()
                            + v[g * head_dim:(g + 1) * head_dim].sum() + o[:, g * width_q:(g + 1) * width_q].sum()
                            for g in range(groups)])
    gate, up, down = (salience(m) for m in (mlp.gate_proj, mlp.up_proj, mlp.down_proj))
    by_channel = gate.sum(1) + up.sum(1) + down.sum(0)
    return by_group, by_channel


def test_llama_scores_equal_the_sums_by_hand_and_the_top_structures_stay(tiny_tokenizer):
    model = tiny_model("llama", 3, seed=11)
    shape = layer_shape(model)
    scores = taylor_scores(model, tiny_tokenizer, width_of(model), shape, CAL)
    plain = gradients(model, tiny_tokenizer)
    for index, layer in enumerate(decoder_layers(plain)):
        groups, channels = llama_by_hand(layer, shape.heads_per_group, shape.head_dim, shape.groups)
        torch.testing.assert_close(scores[index].groups.double(), groups, rtol=1e-5, atol=0)
        torch.testing.assert_close(scores[index].channels.double(), channels, rtol=1e-5, atol=0)
    assert all(p.grad is None for p in model.parameters())  # nothing left behind on the original

    narrow = prune.shrink_width(model, tiny_tokenizer, param_ratio=0.65, calibration=CAL, criterion="llm-pruner")
    found = width.plan(width.size_of(model), 0.65)
    assert found.groups == 1 and found.channels > 0
    for old, new, score in zip(decoder_layers(model), decoder_layers(narrow), scores):
        group = int(score.groups.argmax())
        channels = score.channels.argsort(descending=True)[:shape.channels - found.channels].sort().values
        assert torch.equal(new.self_attn.q_proj.weight, old.self_attn.q_proj.weight[16 * group:16 * (group + 1)])
        assert torch.equal(new.self_attn.v_proj.weight, old.self_attn.v_proj.weight[8 * group:8 * (group + 1)])
        assert torch.equal(new.mlp.gate_proj.weight, old.mlp.gate_proj.weight[channels])
        assert torch.equal(new.mlp.down_proj.weight, old.mlp.down_proj.weight[:, channels])


def test_fused_and_conv1d_layouts_sum_their_own_segments(tiny_tokenizer):
    """Phi-3: qkv_proj = [q; k; v], gate_up_proj = [gate; up]; GPT-2: Conv1D weights stored [in, out]."""
    phi3 = tiny_model("phi3", 2, seed=3)
    shape = layer_shape(phi3)
    scores = taylor_scores(phi3, tiny_tokenizer, width_of(phi3), shape, CAL)
    layer = decoder_layers(gradients(phi3, tiny_tokenizer))[1]
    q, k, v = salience(layer.self_attn.qkv_proj).split([32, 16, 16])
    o = salience(layer.self_attn.o_proj)
    groups = torch.stack([q[16 * g:16 * (g + 1)].sum() + k[8 * g:8 * (g + 1)].sum() + v[8 * g:8 * (g + 1)].sum()
                          + o[:, 16 * g:16 * (g + 1)].sum() for g in range(2)])
    gate, up = salience(layer.mlp.gate_up_proj).split([64, 64])
    channels = gate.sum(1) + up.sum(1) + salience(layer.mlp.down_proj).sum(0)
    torch.testing.assert_close(scores[1].groups.double(), groups, rtol=1e-5, atol=0)
    torch.testing.assert_close(scores[1].channels.double(), channels, rtol=1e-5, atol=0)

    gpt2 = tiny_model("gpt2", 2, seed=3)
    scores = taylor_scores(gpt2, tiny_tokenizer, width_of(gpt2), layer_shape(gpt2), CAL)
    block = decoder_layers(gradients(gpt2, tiny_tokenizer))[0]
    by_hand = salience(block.mlp.c_fc).sum(0) + salience(block.mlp.c_proj).sum(1)  # Conv1D: [in, out]
    assert scores[0].groups is None  # GPT-2 keeps its heads (its config derives head_dim)
    torch.testing.assert_close(scores[0].channels.double(), by_hand, rtol=1e-5, atol=0)


def test_a_structure_that_does_nothing_scores_zero_and_goes_first(tiny_tokenizer):
    """Channels whose down_proj column is zero change nothing: their weights × gradients are all zero (the down
    column's weights, the gate and up rows' gradients), so LLM-Pruner removes them and the logits stay."""
    model = tiny_model("llama", 2, seed=5)
    dead = torch.tensor([3, 10, 17, 24, 31, 38, 45, 52])  # 8 channels: one step of the plan
    with torch.no_grad():
        for layer in decoder_layers(model):
            layer.mlp.down_proj.weight[:, dead] = 0
    scores = taylor_scores(model, tiny_tokenizer, width_of(model), layer_shape(model), CAL)
    for score in scores:
        assert torch.all(score.channels[dead] == 0) and torch.all(score.channels[score.channels != 0] > 0)
        assert int((score.channels > 0).sum()) == 64 - len(dead)
    size = width.size_of(model)
    ratio = 1 - len(dead) * layer_shape(model).channel_params * 2 / size.total  # exactly those 8 per layer
    assert width.plan(size, ratio) == width.Plan(0, 8)
    narrow = prune.shrink_width(model, tiny_tokenizer, param_ratio=ratio, calibration=CAL, criterion="llm-pruner")
    kept = torch.tensor([c for c in range(64) if c not in set(dead.tolist())])
    for old, new in zip(decoder_layers(model), decoder_layers(narrow)):
        assert torch.equal(new.mlp.up_proj.weight, old.mlp.up_proj.weight[kept])
    torch.testing.assert_close(prune_logits(narrow), prune_logits(model), rtol=1e-5, atol=1e-5)  # nothing lost


def prune_logits(model):
    with torch.no_grad():
        return model(input_ids=torch.tensor([[5, 17, 42, 9, 120, 77, 3, 250]])).logits


def test_the_step_records_its_criterion_and_refuses_an_unknown_one(tiny_tokenizer):
    step = WidthPrune.of(0.7, CAL, "llm-pruner")
    assert "criterion" in step.record() and "criterion" not in WidthPrune.of(0.7, CAL).record()  # old keys kept
    again = Recipe.from_json(Recipe((step,)).to_json())
    assert again == Recipe((step,)) and again != Recipe((WidthPrune.of(0.7, CAL),))
    assert "LLM-Pruner" in step.describe() and step.short() == "width 70% LLM-Pruner"
    with pytest.raises(InvalidInput, match="no criterion 'magnitude'"):
        WidthPrune.of(0.7, CAL, "magnitude")
    model = tiny_model("llama", 2, seed=2)
    built = Recipe((step,)).apply(model, tiny_tokenizer)
    direct = prune.shrink_width(model, tiny_tokenizer, param_ratio=0.7, calibration=CAL, criterion="llm-pruner")
    assert all(torch.equal(a, b) for a, b in zip(built.state_dict().values(), direct.state_dict().values()))


@pytest.mark.parametrize("arch", ["llama", "gpt_neox"])
def test_a_model_read_from_disk_gets_the_same_scores_and_the_same_model(arch, tiny_tokenizer, tmp_path,
                                                                         monkeypatch):
    monkeypatch.setenv("LAYERCUT_CACHE", str(tmp_path / "cache"))
    tiny_model(arch, 3, seed=4).save_pretrained(tmp_path / "model")
    tiny_tokenizer.save_pretrained(tmp_path / "model")
    whole, tokenizer = prune.load_model(str(tmp_path / "model"), device="cpu")
    streamed, _ = prune.load_model(str(tmp_path / "model"), device="cpu", budget="1KiB")
    expected = taylor_scores(whole, tokenizer, width_of(whole), layer_shape(whole), CAL)
    found = taylor_scores(streamed, tokenizer, width_of(streamed), layer_shape(streamed), CAL)
    for a, b in zip(expected, found):  # the same gradients, backpropagated layer by layer: summed in another order
        torch.testing.assert_close(b.channels, a.channels, rtol=1e-4, atol=0)
        assert (a.groups is None) == (b.groups is None)
    ratio = 0.8
    narrow = prune.shrink_width(whole, tokenizer, param_ratio=ratio, calibration=CAL, criterion="llm-pruner")
    narrow_disk = prune.shrink_width(streamed, tokenizer, param_ratio=ratio, calibration=CAL, criterion="llm-pruner")
    torch.testing.assert_close(prune_logits(narrow_disk), prune_logits(narrow), rtol=0, atol=0)
