"""The cut: a normal, weight-sharing model that generates, saves and reloads correctly."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

import prune
from prune.core.architectures import decoder_layers
from prune.core.errors import InvalidCut, UnsupportedArchitecture

from conftest import TINY_CONFIGS, tiny_model

PROMPT = torch.tensor([[5, 17, 42, 9, 120, 77, 3, 250]])


def logits(model, ids=PROMPT):
    with torch.no_grad():
        return model(input_ids=ids).logits


def greedy(model, cache: bool):
    with torch.no_grad():
        return model.generate(PROMPT, max_new_tokens=8, do_sample=False, use_cache=cache, pad_token_id=0)


@pytest.mark.parametrize("arch", sorted(TINY_CONFIGS))
def test_cut_is_a_normal_model_and_leaves_the_original_alone(arch, tmp_path):
    model = tiny_model(arch, layers=6)
    before = logits(model)
    pruned = prune.cut(model, 1, 3)

    assert len(decoder_layers(pruned)) == 4 and pruned.config.num_hidden_layers == 4
    assert len(decoder_layers(model)) == 6 and model.config.num_hidden_layers == 6
    assert torch.equal(greedy(pruned, cache=True), greedy(pruned, cache=False))
    for new_idx, layer in enumerate(decoder_layers(pruned)):
        assert all(m.layer_idx == new_idx for m in layer.modules() if "layer_idx" in vars(m))
    for old_idx, layer in enumerate(decoder_layers(model)):
        assert all(m.layer_idx == old_idx for m in layer.modules() if "layer_idx" in vars(m))

    pruned.save_pretrained(tmp_path)
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32)
    assert reloaded.config.num_hidden_layers == 4
    torch.testing.assert_close(logits(reloaded), logits(pruned), rtol=0, atol=0)

    assert torch.equal(logits(model), before), "cutting must not change the original"
    assert torch.equal(greedy(model, True), greedy(model, False))


def test_pruned_model_equals_manually_skipping_the_layers():
    """Known answer: cutting [1, 3) is the original with layers 1 and 2 replaced by identities."""
    model = tiny_model("llama", layers=5)
    expected_model = tiny_model("llama", layers=5)
    for i in (1, 2):
        for p in decoder_layers(expected_model)[i].parameters():
            p.data.zero_()  # a Llama layer with all-zero weights adds nothing to the residual
    torch.testing.assert_close(logits(prune.cut(model, 1, 3)), logits(expected_model), rtol=1e-5, atol=1e-6)


def test_kept_layers_share_weights_so_the_pair_costs_no_extra_weight_memory():
    model = tiny_model("llama", layers=6)
    pruned = prune.cut(model, 2, 5)

    def storages(m):
        return {p.untyped_storage().data_ptr(): p.untyped_storage().nbytes() for p in m.parameters()}

    original, both = storages(model), {**storages(model), **storages(pruned)}
    assert set(storages(pruned)) <= set(original)
    assert sum(both.values()) == sum(original.values())
    kept = [0, 1, 5]
    for new_idx, old_idx in enumerate(kept):
        for a, b in zip(decoder_layers(pruned)[new_idx].parameters(), decoder_layers(model)[old_idx].parameters()):
            assert a is b


def test_hooks_on_the_pruned_model_do_not_leak_into_the_original():
    model = tiny_model("llama", layers=4)
    pruned = prune.cut(model, 0, 1)
    calls = []
    decoder_layers(pruned)[0].register_forward_hook(lambda *_: calls.append(1))
    decoder_layers(pruned)[0].mlp.register_forward_hook(lambda *_: calls.append(2))
    logits(model)
    assert calls == []
    logits(pruned)
    assert calls == [2, 1]


def test_per_layer_config_lists_are_sliced_qwen2_reloads(tmp_path):
    model = tiny_model("qwen2", layers=6)  # layers 3…5 use sliding window: layer_types differ
    types = list(model.config.layer_types)
    pruned = prune.remove_layers(model, [0, 4])
    assert pruned.config.layer_types == [types[i] for i in (1, 2, 3, 5)]
    assert model.config.layer_types == types
    pruned.save_pretrained(tmp_path)
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32)
    assert reloaded.config.layer_types == pruned.config.layer_types
    torch.testing.assert_close(logits(reloaded), logits(pruned), rtol=0, atol=0)


def test_non_contiguous_removal_and_cutting_a_cut():
    model = tiny_model("gpt2", layers=6)
    pruned = prune.remove_layers(model, [4, 1])
    assert pruned.config.layercut_removed_layers == [1, 4]
    again = prune.cut(pruned, 0, 2)  # pruned layers 0, 1 are original 0, 2
    assert again.config.layercut_removed_layers == [0, 1, 2, 4]
    assert torch.equal(greedy(again, True), greedy(again, False))


@pytest.mark.parametrize(
    ("start", "end", "message"),
    [(3, 3, "empty or inverted"), (4, 2, "empty or inverted"), (-1, 2, "outside"), (2, 7, "outside"),
     (0, 6, "remove all 6 layers"), (1.5, 3, "whole numbers")],
)
def test_impossible_blocks_are_clear_errors(start, end, message):
    model = tiny_model("llama", layers=6)
    with pytest.raises(InvalidCut, match=message):
        prune.cut(model, start, end)


def test_impossible_layer_sets_are_clear_errors():
    model = tiny_model("llama", layers=3)
    with pytest.raises(InvalidCut, match="No layers"):
        prune.remove_layers(model, [])
    with pytest.raises(InvalidCut, match="do not exist"):
        prune.remove_layers(model, [3])
    with pytest.raises(InvalidCut, match="remove all"):
        prune.remove_layers(model, [0, 1, 2])


def test_a_type_outside_the_table_is_read_by_its_structure_and_an_unreadable_one_fails_loudly():
    import transformers

    model = transformers.AutoModelForCausalLM.from_config(
        transformers.BloomConfig(vocab_size=64, hidden_size=32, n_head=4, n_layer=3)).eval()
    cut = prune.cut(model, 0, 1)  # transformer.h and transformer.ln_f, found by what they are
    assert len(cut.transformer.h) == 2 and cut.config.n_layer == 2 and len(model.transformer.h) == 3
    broken = transformers.AutoModelForCausalLM.from_config(model.config)
    broken.transformer.h = torch.nn.ModuleList(list(broken.transformer.h)[:2])  # the config counts 3; 2 are there
    with pytest.raises(UnsupportedArchitecture, match="no list of 3 layers was found in its decoder"):
        prune.cut(broken, 0, 1)


@pytest.mark.slow
def test_default_model_cut_saves_and_reloads_exactly(default_model, tmp_path):
    """The GGUF-born default model: a 6-layer cut saves as a plain checkpoint and reloads exactly."""
    model, tokenizer = default_model
    ids = tokenizer("The capital of France is", return_tensors="pt")["input_ids"]
    before = logits(model, ids)
    pruned = prune.cut(model, 20, 26)
    pruned.save_pretrained(tmp_path)
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32)
    assert reloaded.config.num_hidden_layers == 24
    torch.testing.assert_close(logits(reloaded, ids), logits(pruned, ids), rtol=0, atol=0)
    assert torch.equal(logits(model, ids), before)
    with torch.no_grad():
        kw = dict(max_new_tokens=10, do_sample=False)
        assert torch.equal(pruned.generate(ids, use_cache=True, **kw), pruned.generate(ids, use_cache=False, **kw))
