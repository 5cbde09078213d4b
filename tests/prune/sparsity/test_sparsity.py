"""Sparsity: exact sparsity per comparison group, N:M in every group, the original untouched,
Wanda's mask by hand, SparseGPT's reconstruction, sequential calibration, save and reload, recipes."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
from transformers import AutoModelForCausalLM

import prune
from evaluation.exports import texts as export_texts
from evaluation.measure.memory import dense_zeros_note
from prune.core.storage import weight_bytes
from evaluation.serving.variants import VariantCache, estimated_bytes, own_bytes
from prune.sparsity import masks as sparsity
from prune.core.architectures import decoder_layers
from prune.core.calibration import BUILTIN_TEXTS, Calibration, token_windows
from prune.core.errors import InvalidInput, UnknownMethod
from prune.core.recipe import Recipe, recipe_of
from prune.sparsity.step import Sparsify
from prune.sparsity.sparsegpt import count, lowest, sparsegpt
from prune.sparsity.masks import matrices, rows_of, sparse_copy_bytes, zero_fraction

from conftest import assert_read_sequentially, tiny_model

ARCHS = ("llama", "qwen2", "gpt2", "gpt_neox", "opt")
CAL = Calibration(source="text", text=BUILTIN_TEXTS[0].read_text()[:6000], n_samples=6, seq_len=32)
PROMPT = torch.tensor([[5, 17, 42, 9, 120, 77, 3, 250]])


def logits(model, ids=PROMPT):
    with torch.no_grad():
        return model(input_ids=ids).logits


def zeros_per_group(rows: torch.Tensor, method: str) -> tuple[torch.Tensor, int]:
    """Zeros in each comparison group of a [rows, cols] weight, and the group's size."""
    zero = (rows == 0).int()
    if method == "magnitude":
        return zero.sum().reshape(1), zero.numel()
    if method == "wanda":
        return zero.sum(1), zero.shape[1]
    assert zero.shape[1] <= 128  # the tiny models' matrices are one SparseGPT block of columns
    return zero.sum().reshape(1), zero.numel()


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("method", sparsity.METHODS)
def test_every_matrix_holds_the_asked_sparsity_in_its_group_and_the_original_is_untouched(arch, method,
                                                                                          tiny_tokenizer):
    model = tiny_model(arch, layers=3)
    before = {name: t.clone() for name, t in model.state_dict().items()}
    ptrs = {name: t.data_ptr() for name, t in model.state_dict().items()}
    reference = logits(model)

    sparse = prune.sparsify(model, tiny_tokenizer, method, 0.3, calibration=CAL)

    for layer in decoder_layers(sparse):
        for name, module in matrices(layer).items():
            found, size = zeros_per_group(rows_of(module), method)
            assert (found == count(size, 0.3)).all(), (name, found, count(size, 0.3))
    assert all(torch.equal(before[n], t) and ptrs[n] == t.data_ptr() for n, t in model.state_dict().items())
    assert torch.equal(logits(model), reference)
    assert not torch.equal(logits(sparse), reference)
    # everything not pruned is shared with the original; the pruned matrices are the variant's own
    assert own_bytes(sparse, model) == sparse_copy_bytes(model)
    pruned = {m.weight.data_ptr() for layer in decoder_layers(sparse) for m in matrices(layer).values()}
    shared = {p.data_ptr() for p in model.parameters()} & {p.data_ptr() for p in sparse.parameters()}
    assert not pruned & shared and len(shared) == len({p.data_ptr() for p in sparse.parameters()}) - len(pruned)


@pytest.mark.parametrize("pattern", ["2:4", "4:8"])
@pytest.mark.parametrize("method", sparsity.METHODS)
def test_the_n_m_pattern_holds_in_every_group_of_every_row(pattern, method, tiny_tokenizer):
    n, m = map(int, pattern.split(":"))
    for arch in ("llama", "gpt2"):
        model = tiny_model(arch, layers=2)
        sparse = prune.sparsify(model, tiny_tokenizer, method, None, pattern=pattern, calibration=CAL)
        for layer in decoder_layers(sparse):
            for module in matrices(layer).values():
                rows = rows_of(module)
                groups = (rows == 0).view(rows.shape[0], -1, m).sum(-1)
                assert (groups == n).all()
        assert zero_fraction(sparse) == n / m and zero_fraction(model) == 0


def test_wanda_scores_weight_times_input_norm_within_each_row():
    rows = torch.tensor([[1.0, -2.0, 3.0, -4.0], [4.0, 3.0, -2.0, 1.0]])
    norms = torch.tensor([4.0, 1.0, 0.5, 2.0])  # ‖X_j‖₂
    # row 0: |W|·‖X‖ = 4, 2, 1.5, 8 → columns 1, 2 go; row 1: 16, 3, 1, 2 → columns 2, 3 go
    expected = torch.tensor([[False, True, True, False], [False, False, True, True]])
    assert torch.equal(sparsity._wanda_mask(rows, norms**2, 0.5, None), expected)
    # magnitude compares the whole matrix: the two 1s, the two 2s go
    assert torch.equal(sparsity._magnitude_mask(rows, 0.5, None),
                       torch.tensor([[True, True, False, False], [False, False, True, True]]))


def test_exactly_k_lowest_go_ties_to_the_first():
    score = torch.tensor([[3.0, 1.0, 1.0, 1.0, 0.5], [2.0, 2.0, 2.0, 2.0, 2.0]])
    assert lowest(score, 3).tolist() == [[False, True, True, False, True], [True, True, True, False, False]]
    assert not lowest(score, 0).any() and lowest(score, 5).all()


def test_wanda_mask_on_a_model_layer_equals_one_computed_by_hand(tiny_tokenizer):
    model = tiny_model("llama", layers=2)
    sparse = prune.sparsify(model, tiny_tokenizer, "wanda", 0.5, calibration=CAL)
    inputs = {}
    layer = decoder_layers(model)[0]
    hooks = [module.register_forward_hook(lambda _m, args, _o, name=name: inputs.setdefault(name, []).append(args[0]))
             for name, module in matrices(layer).items()]
    with torch.no_grad():
        model(input_ids=token_windows(tiny_tokenizer, CAL), use_cache=False)
    for hook in hooks:
        hook.remove()
    for name, module in matrices(decoder_layers(sparse)[0]).items():
        x = torch.cat(inputs[name]).reshape(-1, module.in_features)  # [tokens, inputs]
        w = matrices(layer)[name].weight
        score = w.abs() * x.norm(dim=0)[None, :]
        by_hand = torch.zeros_like(w, dtype=torch.bool)
        by_hand.scatter_(1, score.argsort(dim=1)[:, : w.shape[1] // 2], True)
        assert torch.equal(module.weight == 0, by_hand), name
        assert torch.equal(module.weight[~by_hand], w[~by_hand])  # Wanda keeps the other weights as they were


def _correlated_inputs(tokens: int, width: int) -> torch.Tensor:
    torch.manual_seed(1)
    mixing = torch.randn(width, width) * (torch.rand(width) * 3)[None, :]
    return torch.randn(tokens, width) @ mixing + 0.3 * torch.randn(tokens, width)  # [tokens, width], correlated


@pytest.mark.parametrize("nm", [None, (2, 4)])
def test_sparsegpt_reconstructs_a_layer_better_than_magnitude_and_wanda(nm):
    x = _correlated_inputs(1024, 64)
    w = torch.randn(32, 64)
    error = {"magnitude": w.masked_fill(sparsity._magnitude_mask(w, 0.5, nm), 0),
             "wanda": w.masked_fill(sparsity._wanda_mask(w, (x * x).sum(0), 0.5, nm), 0),
             "sparsegpt": sparsegpt(w, x.T @ x, 0.5, nm)}
    error = {method: float(((w - pruned) @ x.T).norm()) for method, pruned in error.items()}
    assert error["sparsegpt"] < error["wanda"] < error["magnitude"], error


def test_sparsegpt_compares_within_blocks_of_128_columns():
    x = _correlated_inputs(512, 300)
    pruned = sparsegpt(torch.randn(8, 300), x.T @ x, 0.4)
    for start, end in ((0, 128), (128, 256), (256, 300)):
        assert int((pruned[:, start:end] == 0).sum()) == count(8 * (end - start), 0.4)


def test_each_layer_is_calibrated_on_the_outputs_of_the_pruned_layers_before_it(tiny_tokenizer, monkeypatch):
    seen = []
    statistics = sparsity._statistics

    def recording(layer, hidden, calls, method):
        seen.append(torch.cat(hidden))
        return statistics(layer, hidden, calls, method)

    monkeypatch.setattr(sparsity, "_statistics", recording)
    model = tiny_model("qwen2", layers=4)  # sliding-window and full-attention layers: each keeps its own mask
    sparse = prune.sparsify(model, tiny_tokenizer, "sparsegpt", 0.5, calibration=CAL)
    assert_read_sequentially(seen, sparse, model, token_windows(tiny_tokenizer, CAL))


def test_a_sparse_model_saves_and_reloads_with_plain_transformers(tiny_tokenizer, tmp_path):
    model = tiny_model("llama", layers=3)
    recipe = Recipe((Sparsify.of("sparsegpt", 0.5, calibration=CAL),))
    sparse = recipe.apply(model, tiny_tokenizer)
    sparse.save_pretrained(tmp_path)
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32).eval()
    assert torch.equal(logits(reloaded), logits(sparse))
    for ours, theirs in zip(decoder_layers(sparse), decoder_layers(reloaded)):
        for name, module in matrices(ours).items():
            assert torch.equal(matrices(theirs)[name].weight, module.weight)
    assert zero_fraction(reloaded) == 0.5 and recipe_of(reloaded) == recipe


def test_sparsify_composes_after_a_depth_cut_and_costs_its_copies(tiny_tokenizer):
    model = tiny_model("gpt2", layers=4)
    recipe = Recipe.block(4, 1, 3).then(Sparsify.of("wanda", 0.5, calibration=CAL))
    steps = []
    derived = recipe.apply(model, tiny_tokenizer, progress=lambda f, message: steps.append(f))
    assert len(decoder_layers(derived)) == 2 and len(decoder_layers(model)) == 4
    assert zero_fraction(derived) == 0.5 and zero_fraction(model) == 0
    assert steps == sorted(steps) and steps[-1] == 1.0 and len(steps) >= 3  # the cut, then once per layer
    assert derived.config.layercut == recipe.to_json() and not hasattr(model.config, "layercut")
    assert own_bytes(derived, model) == estimated_bytes(model, recipe) == sparse_copy_bytes(derived) > 0
    assert weight_bytes(derived) == weight_bytes(Recipe.block(4, 1, 3).apply(model))  # zeros cost as much
    assert "no memory saving" in dense_zeros_note(derived) and dense_zeros_note(model) is None

    cache = VariantCache()
    base = SimpleNamespace(model=model, tokenizer=tiny_tokenizer, fingerprint="tiny")
    assert cache.get(base, recipe) is cache.get(base, recipe) and cache.used_bytes == sparse_copy_bytes(derived)


def test_recipe_json_round_trip_records_an_inline_text_by_digest():
    recipe = Recipe.block(6, 2, 4).then(Sparsify.of("sparsegpt", pattern="2:4", calibration=CAL))
    data = json.loads(json.dumps(recipe.to_json()))
    assert CAL.text[:40] not in json.dumps(data)
    again = Recipe.from_json(data)
    assert again == recipe and again.key == recipe.key and hash(again) == hash(recipe)
    with pytest.raises(InvalidInput, match="digest"):
        again.steps[1].apply(tiny_model("llama", layers=4))
    other = Sparsify.of("sparsegpt", pattern="2:4", calibration=Calibration(source="text", text="other words"))
    assert Recipe.block(6, 2, 4).then(other).key != recipe.key

    plain = Recipe((Sparsify.of("magnitude", 0.5),))
    assert Recipe.from_json(plain.to_json()) == plain and plain.steps[0].calibration is None
    wiki = Sparsify.of("wanda", 0.5, calibration=Calibration(source="wikitext2", path="/data"))
    assert Recipe.from_json(Recipe((wiki,)).to_json()).steps[0] == wiki
    assert plain.short() == "magnitude 50%" and recipe.steps[1].short() == "sparsegpt 2:4"
    assert "SparseGPT, 2:4 sparsity" in recipe.describe()


def test_bad_requests_are_refused_clearly(tiny_tokenizer):
    with pytest.raises(InvalidInput, match="conflicts"):
        Sparsify.of("wanda", 0.6, pattern="2:4")
    assert Sparsify.of("wanda", 0.5, pattern="2:4") == Sparsify.of("wanda", None, pattern="2:4")
    with pytest.raises(UnknownMethod, match="magnitude, wanda, sparsegpt"):
        Sparsify.of("obs", 0.5)
    for bad in (1.0, -0.1, None, float("nan")):
        with pytest.raises(InvalidInput, match="fraction"):
            Sparsify.of("magnitude", bad)
    for bad in ("2-4", "4:2", "0:4", "dense"):
        with pytest.raises(InvalidInput, match="pattern"):
            Sparsify.of("magnitude", None, pattern=bad)
    model = tiny_model("llama", layers=2)
    with pytest.raises(InvalidInput, match="divisible by 12"):
        prune.sparsify(model, tiny_tokenizer, "magnitude", None, pattern="5:12")
    with pytest.raises(InvalidInput, match="tokenizer"):
        prune.sparsify(model, None, "wanda", 0.5)


def test_raising_in_progress_stops_the_work_and_leaves_the_original_alone(tiny_tokenizer):
    model = tiny_model("opt", layers=3)
    reference = logits(model)

    def cancel(fraction, _message):
        if fraction > 0.3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        prune.sparsify(model, tiny_tokenizer, "sparsegpt", 0.5, calibration=CAL, progress=cancel)
    assert torch.equal(logits(model), reference) and zero_fraction(model) == 0


def test_the_model_card_says_the_zeros_are_stored_densely(tiny_tokenizer):
    model = tiny_model("llama", layers=4)
    recipe = Recipe((Sparsify.of("magnitude", None, pattern="2:4"),))
    card = export_texts.model_card(recipe.apply(model), recipe, base_name="tiny", num_layers=4)
    assert "- sparse" in card and "50.0 % of the decoder layers' linear weights are zero" in card
    assert "stored densely" in card


def test_the_backend_builds_a_sparse_column_with_the_base_tokenizer_and_says_zeros_save_nothing(tiny_folder):
    from evaluation.serving.backend import Backend
    from evaluation.core.pool import ModelSpec

    backend, spec = Backend(data_dir="", device="cpu"), ModelSpec(tiny_folder)
    messages = []
    found = backend.measure.memory(spec, {"sparse": Recipe((Sparsify.of("wanda", 0.5, calibration=CAL),))},
                                   new_tokens=2,
                           progress=lambda fraction, message: messages.append(message))
    assert any(m.startswith("Building sparse: wanda: layer 4 of 4") for m in messages)
    memory = {(m.model, m.name): m for m in found if m.name == "weight memory"}
    original, sparse = memory[("original", "weight memory")], memory[("sparse", "weight memory")]
    assert sparse.value == original.value and original.details["note"] is None
    assert sparse.details["zero_fraction_of_layer_matrices"] == 0.5 and "no memory saving" in sparse.details["note"]
    assert backend.models.variants.used_bytes == sparse_copy_bytes(backend.models.model(spec))
