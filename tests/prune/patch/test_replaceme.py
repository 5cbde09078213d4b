"""The linear patch (ReplaceMe): its least-squares map against numpy's on states read another way, an identity block
patched to the identity, the fold against the map applied by a hook, the original untouched, a folder that plain
transformers reloads, and the refusals."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

import prune  # registers the steps
from evaluation.serving.variants import estimated_bytes, own_bytes
from prune.core.architectures import decoder_layers
from prune.core.calibration import Calibration, token_windows
from prune.core.errors import InvalidCut, InvalidInput, UnsupportedArchitecture
from prune.core.recipe import Recipe
from prune.core.surgery import removed_between
from prune.patch import replaceme
from prune.patch.sharing import sharing
from prune.patch.step import Patch

from conftest import tiny_model

CAL = Calibration(n_samples=8, seq_len=48)
PROMPT = torch.tensor([[5, 17, 42, 9, 120, 77, 3, 250, 11, 64]])


def logits(model, ids=PROMPT):
    with torch.no_grad():
        return model(input_ids=ids).logits


def patched(model, tokenizer, start, end, method="lstsq", **options):
    cut = Recipe.block(len(decoder_layers(model)), start, end)
    recipe = cut.then(Patch.of(method, CAL, **options))
    return cut.apply(model, tokenizer), recipe.apply(model, tokenizer), recipe


def independent_map(model, tokenizer, start, end) -> np.ndarray:
    """T by numpy's least squares, on X read at the MLP module and h_s, h_e from ``output_hidden_states``."""
    ids = token_windows(tokenizer, CAL)
    found = []
    hook = decoder_layers(model)[start - 1].mlp.register_forward_hook(lambda _m, _a, out: found.append(out))
    try:
        with torch.no_grad():
            states = model(input_ids=ids, output_hidden_states=True).hidden_states
    finally:
        hook.remove()
    x = found[0].double().flatten(0, 1).numpy()
    y = (states[end] - states[start]).double().flatten(0, 1).numpy() + x
    return np.linalg.lstsq(x, y, rcond=None)[0]


def test_least_squares_equals_numpy_on_states_read_another_way(tiny_tokenizer):
    model = tiny_model("llama", layers=6)
    fits = replaceme.fit(model, tiny_tokenizer, [2, 3], "lstsq", CAL, {"ridge": 0.0})
    assert [f.block for f in fits] == [(2, 4)]
    expected = independent_map(model, tiny_tokenizer, 2, 4)
    np.testing.assert_allclose(fits[0].map.numpy(), expected, rtol=1e-5, atol=1e-6)
    assert fits[0].error < fits[0].unpatched  # the map predicts Y better than the plain cut's identity


def test_an_identity_block_is_patched_by_the_identity(tiny_tokenizer):
    """A block that adds nothing to the residual stream: Y = X, so T = I and the patched model is the cut."""
    model = tiny_model("llama", layers=6)
    for layer in decoder_layers(model)[2:4]:
        layer.self_attn.o_proj.weight.data.zero_()
        layer.mlp.down_proj.weight.data.zero_()
    cut, patch, _ = patched(model, tiny_tokenizer, 2, 4)
    fit = replaceme.fit(model, tiny_tokenizer, [2, 3], "lstsq", CAL, {"ridge": 0.0})[0]
    torch.testing.assert_close(fit.map, torch.eye(fit.map.shape[0], dtype=torch.float64), rtol=0, atol=1e-6)
    assert fit.error < 1e-6 and fit.unpatched < 1e-6
    torch.testing.assert_close(logits(patch), logits(cut), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(logits(cut), logits(model), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("arch", ["llama", "gpt2", "opt", "gpt_neox"])
def test_the_fold_equals_the_map_applied_by_a_hook(arch, tiny_tokenizer):
    """Linear (with and without bias) and GPT-2's Conv1D: the folded model computes X T at layer s − 1."""
    model = tiny_model(arch, layers=6)
    cut, patch, _ = patched(model, tiny_tokenizer, 2, 5)
    fit = replaceme.fit(model, tiny_tokenizer, [2, 3, 4], "lstsq", CAL, {"ridge": 0.0})[0]
    target = replaceme.fold_target(decoder_layers(cut)[1], cut)
    hook = target.register_forward_hook(lambda _m, _a, out: (out.double() @ fit.map).float())
    try:
        by_hook = logits(cut)
    finally:
        hook.remove()
    torch.testing.assert_close(logits(patch), by_hook, rtol=1e-4, atol=1e-4)
    assert not torch.allclose(logits(patch), logits(cut), atol=1e-4)


def test_the_original_stays_bit_identical_and_the_patch_owns_one_matrix(tiny_tokenizer):
    model = tiny_model("llama", layers=6)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    pointers = {k: v.data_ptr() for k, v in model.state_dict().items()}
    cut, patch, recipe = patched(model, tiny_tokenizer, 2, 4)
    for name, value in model.state_dict().items():
        assert torch.equal(value, before[name]) and value.data_ptr() == pointers[name], name
    down = decoder_layers(patch)[1].mlp.down_proj.weight
    assert own_bytes(patch, model) == down.numel() * down.element_size() == estimated_bytes(model, recipe)
    assert recipe.size(prune.core.sizes.size_of(model)).total == prune.core.sizes.size_of(patch).total
    assert patch.config.layercut_patched["blocks"][0]["block"] == [2, 4]
    assert patch.config.num_hidden_layers == 4


def test_a_patched_folder_reloads_in_plain_transformers_with_identical_logits(tiny_tokenizer, tmp_path):
    model = tiny_model("qwen2", layers=6)
    _, patch, _ = patched(model, tiny_tokenizer, 1, 3)
    patch.save_pretrained(tmp_path)
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32).eval()
    assert torch.equal(logits(reloaded), logits(patch))


def test_cosine_starts_from_the_identity_and_lowers_its_loss(tiny_tokenizer):
    model = tiny_model("llama", layers=6)
    found = replaceme.collect(model, tiny_tokenizer, [(2, 4)], CAL, keep_rows=True)[(2, 4)]
    x, y = found["x"], found["y"]

    def loss(t):
        return float(1 - torch.nn.functional.cosine_similarity(x.double() @ t, y.double(), dim=-1).mean())

    t = replaceme.cosine_map(x, y, epochs=5, lr=1e-2, batch=64, seed=0)
    assert loss(t) < loss(torch.eye(x.shape[1], dtype=torch.float64)) - 1e-3
    assert torch.equal(t, replaceme.cosine_map(x, y, epochs=5, lr=1e-2, batch=64, seed=0))  # seeded


def test_several_blocks_and_a_cut_of_a_cut(tiny_tokenizer):
    model = tiny_model("llama", layers=8)
    first = Recipe.cut(8, [1, 2, 5])
    cut = first.apply(model, tiny_tokenizer)
    assert removed_between(model, cut) == [1, 2, 5]
    again = Recipe((*first.steps, prune.DepthCut.of(5, [3])))  # base layers 6 (numbered 3 after the first cut)
    twice = again.apply(model, tiny_tokenizer)
    assert removed_between(cut, twice) == [3]
    fits = replaceme.fit(model, tiny_tokenizer, [1, 2, 5], "lstsq", CAL, {"ridge": 0.0})
    assert [f.block for f in fits] == [(1, 3), (5, 6)]
    patch = again.then(Patch.of("lstsq", CAL)).apply(model, tiny_tokenizer)
    assert patch.config.layercut_patched["blocks"][0]["block"] == [3, 4]  # in the numbering of the cut's input


def test_refusals(tiny_tokenizer):
    with pytest.raises(UnsupportedArchitecture, match="norm"):
        patched(tiny_model("gemma2", layers=6), tiny_tokenizer, 2, 4)
    with pytest.raises(InvalidCut, match="layer 0"):
        patched(tiny_model("llama", layers=6), tiny_tokenizer, 0, 2)
    with pytest.raises(InvalidInput, match="cannot come first"):
        Recipe((Patch.of("lstsq", CAL),))
    with pytest.raises(InvalidInput, match="directly"):
        Recipe((prune.Sparsify.of("magnitude", 0.5), Patch.of("lstsq", CAL)))
    with pytest.raises(InvalidInput, match="no option"):
        Patch.of("lstsq", CAL, epochs=3)


def test_the_step_round_trips_through_json():
    step = Patch.of("cosine", CAL, lr=5e-4)
    recipe = Recipe.block(6, 2, 4).then(step)
    again = Recipe.from_json(recipe.to_json())
    assert again == recipe and again.key == recipe.key
    assert again.steps[1].option == {"epochs": 10, "lr": 5e-4, "batch": 1024, "seed": 0}
    assert Recipe.block(6, 2, 4).then(Patch.of("lstsq", CAL)).key != recipe.key


def test_patches_within_a_sharing_read_the_original_once_and_fit_the_same_maps(tiny_tokenizer, monkeypatch):
    """Two cuts' patches (three blocks) in a sharing: one calibration pass, maps equal bit for bit to each fitted on
    its own pass; the sums go when the sharing closes (a later fit reads again); a cosine patch is never shared."""
    model = tiny_model("llama", layers=8)
    cuts = [[2, 3], [1, 2, 5, 6]]
    alone = [replaceme.fit(model, tiny_tokenizer, cut, "lstsq", CAL, {"ridge": 0.0}) for cut in cuts]
    passes = []
    real = replaceme.collect
    monkeypatch.setattr(replaceme, "collect", lambda m, t, blocks, *a, **k: passes.append(blocks) or real(m, t, blocks,
                                                                                                            *a, **k))
    with sharing(model, cuts):
        shared = [replaceme.fit(model, tiny_tokenizer, cut, "lstsq", CAL, {"ridge": 0.0}) for cut in cuts]
        assert passes == [[(1, 3), (2, 4), (5, 7)]]  # the first fit read every planned block, the second nothing
        replaceme.fit(model, tiny_tokenizer, [2, 3], "cosine", CAL, {**replaceme.DEFAULTS["cosine"], "epochs": 1})
        assert len(passes) == 2  # the cosine fit reads its rows
    for own, kept in zip(alone, shared):
        assert [f.block for f in own] == [f.block for f in kept]
        for a, b in zip(own, kept):
            assert torch.equal(a.map, b.map) and a.error == b.error
    replaceme.fit(model, tiny_tokenizer, [2, 3], "lstsq", CAL, {"ridge": 0.0})
    assert len(passes) == 3  # closed: nothing kept
