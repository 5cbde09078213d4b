"""Low-rank decomposition: exact at full rank, weight space = the truncated SVD, feature space = the projection onto
the output covariance's top eigenvectors (by hand), parameter counts by arithmetic, the original untouched, both saved
forms reloaded, the recipe step."""

from __future__ import annotations

import json

import pytest
import torch
import transformers
from torch import nn
from transformers import AutoModelForCausalLM

import prune
from evaluation.exports import texts as export_texts, folder as exports
from evaluation.exports.folder import model_files_bytes
from evaluation.measure.memory import checkpoint_bytes, save_checkpoint
from evaluation.serving.variants import estimated_bytes, own_bytes
from prune.lowrank import bases, decomposition as lowrank
from prune.core.architectures import decoder_layers
from prune.core.calibration import BUILTIN_TEXTS, Calibration, token_windows
from prune.core.errors import InvalidInput
from prune.core.factored import Factored
from prune.lowrank.step import Decompose
from prune.core.recipe import Recipe, recipe_of
from prune.sparsity.step import Sparsify
from prune.width.step import WidthPrune
from prune.core.sequential import layer_calls, matrices, rows_of
from prune.core.sizes import size_of

from conftest import TINY_CONFIGS, assert_read_sequentially, tiny_model

CAL = Calibration(source="text", text=BUILTIN_TEXTS[0].read_text()[:8000], n_samples=8, seq_len=64)
PROMPT = torch.tensor([[5, 17, 42, 9, 120, 77, 3, 250]])
LLAMA = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
         "mlp.up_proj", "mlp.down_proj")


def logits(model, ids=PROMPT):
    with torch.no_grad():
        return model(input_ids=ids).logits


def count(model) -> int:
    return sum(p.numel() for p in model.parameters())


def product(module: nn.Module) -> torch.Tensor:
    """The [outputs, inputs] matrix a (possibly factored) projection applies."""
    return module.dense().weight.detach() if isinstance(module, Factored) else rows_of(module)


def linear(outputs: int, inputs: int, bias: bool = True) -> nn.Linear:
    torch.manual_seed(1)
    return nn.Linear(inputs, outputs, bias=bias).double()


# ---------------------------------------------------------------- the factors of one matrix


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("outputs, inputs", [(6, 4), (4, 6), (5, 5)])
def test_factors_at_full_rank_reproduce_the_layer_exactly_in_both_spaces(outputs, inputs, bias):
    layer, x = linear(outputs, inputs, bias), torch.randn(50, inputs, dtype=torch.float64)
    y = x @ layer.weight.detach().T
    seen = bases.Moments("output", 50, y.sum(0), y.T @ y) if outputs <= inputs else bases.Moments(
        "input", 50, x.sum(0), x.T @ x)
    for basis in (bases.weight_basis(rows_of(layer)), bases.feature_basis(layer, seen)):
        rank = min(outputs, inputs)
        first, second, shift = bases.factors(rows_of(layer), basis, rank)
        new_bias = None if not bias else layer.bias.detach() + (0 if shift is None else shift)
        factored = Factored(first, second, new_bias)
        torch.testing.assert_close(factored(x), layer(x), rtol=0, atol=1e-10)
        assert factored.rank == rank and first.shape == (rank, inputs) and second.shape == (outputs, rank)


def test_weight_space_is_the_truncated_svd():
    layer = linear(12, 20, bias=False)
    u, s, vh = torch.linalg.svd(layer.weight.detach(), full_matrices=False)
    for rank in (1, 3, 7):
        module = bases.factored_module(layer, bases.weight_basis(rows_of(layer)), rank)
        assert isinstance(module, Factored) and module.rank == rank  # 7 < 12·20/32 = 7.5: factors pay
        torch.testing.assert_close(product(module), u[:, :rank] @ torch.diag(s[:rank]) @ vh[:rank], rtol=0, atol=1e-12)
        # the authors' factors: Σ_r V_rᵀ then U_r, up to the sign of each singular pair
        signs = torch.sign((module.second.weight * u[:, :rank]).sum(0))
        torch.testing.assert_close(module.first.weight * signs[:, None], torch.diag(s[:rank]) @ vh[:rank], atol=1e-12,
                                   rtol=0)


@pytest.mark.parametrize("bias", [True, False])
def test_feature_space_keeps_the_directions_the_outputs_need_by_hand(bias):
    """Outputs y = x (W = I) of four tokens: ±10, ±3 and 50 ± 0.1 along the axes in orthogonal sign patterns (no
    cross moments). With a bias (which can carry the mean) the covariance's top two eigenvectors are the first two
    axes: rank 2 keeps diag(1, 1, 0) and the bias takes the third axis' mean, (0, 0, 50). Without one the second
    moment's are the third (50² + 0.1²) and the first (10²): diag(1, 0, 1)."""
    signs = torch.tensor([[1.0, 1.0, 1.0], [-1.0, 1.0, -1.0], [1.0, -1.0, -1.0], [-1.0, -1.0, 1.0]],
                         dtype=torch.float64)
    x = (signs * torch.tensor([10.0, 3.0, 0.1], dtype=torch.float64)
         + torch.tensor([0.0, 0.0, 50.0], dtype=torch.float64))
    layer = nn.Linear(3, 3, bias=bias).double()
    layer.weight.data = torch.eye(3, dtype=torch.float64)
    if bias:
        layer.bias.data.zero_()
    basis = bases.feature_basis(layer, bases.Moments("output", len(x), x.sum(0), x.T @ x))
    module = bases.factored_module(layer, basis, 2)
    assert not isinstance(module, Factored)  # 2 · (3 + 3) > 9 weights: stored as the one dense matrix
    kept = [1.0, 1.0, 0.0] if bias else [1.0, 0.0, 1.0]
    torch.testing.assert_close(product(module).abs(), torch.diag(torch.tensor(kept, dtype=torch.float64)), rtol=0,
                               atol=1e-12)
    if bias:
        torch.testing.assert_close(module.bias.detach(), torch.tensor([0.0, 0.0, 50.0], dtype=torch.float64), rtol=0,
                                   atol=1e-12)


def captured_inputs(model, module, tokenizer) -> torch.Tensor:
    """[tokens, k] float64: what ``module`` reads on the calibration windows."""
    seen = []
    handle = module.register_forward_hook(lambda _m, args, _out: seen.append(args[0].reshape(-1, args[0].shape[-1])))
    with torch.no_grad():
        model(input_ids=token_windows(tokenizer, CAL))
    handle.remove()
    return torch.cat(seen).double()


@pytest.mark.parametrize("arch, path, rank", [("llama", "self_attn.q_proj", 5), ("llama", "mlp.gate_proj", 7),
                                              ("qwen2", "self_attn.k_proj", 3)])
def test_feature_space_on_a_model_equals_the_projection_computed_by_hand(arch, path, rank, tiny_tokenizer):
    """Layer 0 reads the embeddings (the same before and after). By hand from its outputs Y = X Wᵀ: Llama's
    unbiased q_proj and gate_proj (64 outputs of 32 inputs: LayerCut goes through the inputs) take the top
    eigenvectors of Yᵀ Y; Qwen2's biased k_proj those of torch.cov(Y), its bias b + (I − V Vᵀ) ȳ."""
    model = tiny_model(arch, 2)
    module = decoder_layers(model)[0].get_submodule(path)
    weight = module.weight.detach().double()
    y = captured_inputs(model, module, tiny_tokenizer) @ weight.T
    moment = torch.cov(y.T) if module.bias is not None else y.T @ y
    top = torch.linalg.eigh(moment).eigenvectors[:, -rank:]  # eigh sorts ascending
    by_hand = top @ top.T @ weight

    derived = lowrank.decompose(model, tiny_tokenizer, space="feature", ranks={(0, path): rank}, calibration=CAL)
    found = decoder_layers(derived)[0].get_submodule(path)
    assert isinstance(found, Factored) and found.rank == rank
    torch.testing.assert_close(product(found).double(), by_hand, rtol=0, atol=2e-5)
    if module.bias is not None:
        mean = y.mean(0)
        torch.testing.assert_close(found.second.bias.double(), module.bias.double() + mean - top @ (top.T @ mean),
                                   rtol=0, atol=2e-5)
    for other, matrix in matrices(decoder_layers(model)[0]).items():  # nothing else changed, and shared
        if other != path:
            assert decoder_layers(derived)[0].get_submodule(other).weight is matrix.weight


def test_gate_and_up_read_one_input_reduced_once_into_one_moments_by_hand(tiny_tokenizer):
    """Llama's gate and up projections (64 outputs of 32 inputs: their inputs' side) read one tensor: one
    :class:`bases.Moments` for both (its eigen-decomposition computed once), equal to Σ x xᵀ of what each reads;
    q_proj (32 of 32: its outputs' side) has its own."""
    model = tiny_model("llama", 2)
    layer = decoder_layers(model)[0]
    hidden, calls = layer_calls(model, token_windows(tiny_tokenizer, CAL), 8)
    found = bases.moments(layer, ["self_attn.q_proj", "mlp.gate_proj", "mlp.up_proj"], hidden, [c[0] for c in calls])
    gate, up, query = found["mlp.gate_proj"], found["mlp.up_proj"], found["self_attn.q_proj"]
    assert gate is up and gate.side == "input" and query.side == "output" and query is not gate
    for path in ("mlp.gate_proj", "mlp.up_proj"):
        x = captured_inputs(model, layer.get_submodule(path), tiny_tokenizer)
        assert gate.count == x.shape[0]
        scale = float((x.T @ x).abs().max())  # float32 products a batch: rounding at that scale
        torch.testing.assert_close(gate.gram, x.T @ x, rtol=0, atol=1e-6 * scale)
        torch.testing.assert_close(gate.total, x.sum(0), rtol=0, atol=1e-6 * scale)
    assert gate.spectrum is gate.spectrum  # computed once


def test_each_layer_is_calibrated_on_the_outputs_of_the_decomposed_layers_before_it(tiny_tokenizer, monkeypatch):
    seen = []
    statistics = lowrank.moments

    def recording(layer, paths, hidden, calls):
        seen.append(torch.cat(hidden))
        return statistics(layer, paths, hidden, calls)

    monkeypatch.setattr(lowrank, "moments", recording)
    model = tiny_model("qwen2", 4)
    derived = lowrank.decompose(model, tiny_tokenizer, param_ratio=0.7, calibration=CAL)
    assert_read_sequentially(seen, derived, model, token_windows(tiny_tokenizer, CAL))


# ---------------------------------------------------------------- whole models


@pytest.mark.parametrize("arch", list(TINY_CONFIGS))
@pytest.mark.parametrize("space", lowrank.SPACES)
def test_each_architecture_meets_the_ratio_counts_by_arithmetic_and_leaves_the_original_alone(arch, space,
                                                                                            tiny_tokenizer):
    model = tiny_model(arch)
    before = {name: (t.clone(), t.data_ptr()) for name, t in model.state_dict().items()}
    reference = logits(model)
    size = size_of(model)

    derived = lowrank.decompose(model, tiny_tokenizer, space=space, param_ratio=0.7, calibration=CAL)

    ranks = lowrank.ranks_of(derived)
    kept = count(model)
    for layer_index, layer in enumerate(decoder_layers(model)):  # by hand: every matrix d·k → r·(d + k)
        for path, module in matrices(layer).items():
            d, k = rows_of(module).shape
            rank = ranks[(layer_index, path)]
            assert 1 <= rank < d * k / (d + k)  # below break-even: the factors are smaller
            kept -= d * k - rank * (d + k)
    assert count(derived) == kept == lowrank.resized(size, ranks).total
    assert kept <= 0.7 * count(model)
    steps = sum(d + k for layer in decoder_layers(model)
                for d, k in (rows_of(m).shape for m in matrices(layer).values()))
    assert 0.7 * count(model) - kept < steps  # one more rank in every matrix would not fit
    assert all(torch.equal(before[n][0], t) and before[n][1] == t.data_ptr() for n, t in model.state_dict().items())
    assert torch.equal(logits(model), reference)
    out = logits(derived)
    assert torch.isfinite(out).all() and not torch.equal(out, reference)


def test_the_uniform_ratio_gives_every_matrix_the_same_fraction_of_its_break_even_rank(tiny_tokenizer):
    model = tiny_model("llama", 3)
    ranks = lowrank.plan(size_of(model), param_ratio=0.75)
    # d·k/(d + k): q, o 16; k, v 32·16/48; gate, up 32·64/96; down 64·32/96 — one fraction f for all
    kappa = {"self_attn.q_proj": 16, "self_attn.k_proj": 32 * 16 / 48, "self_attn.v_proj": 32 * 16 / 48,
             "self_attn.o_proj": 16, "mlp.gate_proj": 32 * 64 / 96, "mlp.up_proj": 32 * 64 / 96,
             "mlp.down_proj": 64 * 32 / 96}
    fractions = [(ranks[(i, p)] / kappa[p], (ranks[(i, p)] + 1) / kappa[p]) for i in range(3) for p in LLAMA]
    assert max(low for low, _ in fractions) < min(high for _, high in fractions)  # some f gives every floor


def test_full_rank_through_the_model_reproduces_its_logits(tiny_tokenizer):
    model = tiny_model("mistral", 2)
    full = {(i, p): min(rows_of(m).shape)
            for i, layer in enumerate(decoder_layers(model)) for p, m in matrices(layer).items()}
    for space in lowrank.SPACES:
        derived = lowrank.decompose(model, tiny_tokenizer, space=space, ranks=full,
                                    calibration=Calibration(source="builtin", n_samples=16, seq_len=128))
        torch.testing.assert_close(logits(derived), logits(model), rtol=1e-4, atol=1e-4)
        assert count(derived) == count(model)  # where factors would not pay, the product is stored densely


def test_feature_space_fits_the_calibration_outputs_at_least_as_well_as_weight_space(tiny_tokenizer):
    """Eckart–Young on the outputs: for the inputs it was calibrated on, no rank-r projection of a layer-0
    map's outputs is closer to them than the feature-space one (weight space's U_r U_rᵀ included)."""
    model = tiny_model("llama", 2)
    derived = {space: lowrank.decompose(model, tiny_tokenizer, space=space, param_ratio=0.7, calibration=CAL)
               for space in lowrank.SPACES}
    for path, module in matrices(decoder_layers(model)[0]).items():
        x = captured_inputs(model, module, tiny_tokenizer).float()
        with torch.no_grad():
            y = module(x)
            errors = {space: float((decoder_layers(d)[0].get_submodule(path)(x) - y).square().sum())
                      for space, d in derived.items()}
        assert errors["feature"] <= errors["weight"] * (1 + 1e-5), path


def test_layers_and_projections_choose_what_is_decomposed(tiny_tokenizer):
    model = tiny_model("llama", 3)
    derived = lowrank.decompose(model, tiny_tokenizer, space="weight", ranks=4, projections=["q_proj", "mlp.up_proj"],
                                layers=[1])
    assert set(lowrank.ranks_of(derived)) == {(1, "self_attn.q_proj"), (1, "mlp.up_proj")}
    factored = [(i, p) for i, layer in enumerate(decoder_layers(derived)) for p, m in layer.named_modules()
                if isinstance(m, Factored)]
    assert factored == [(1, "self_attn.q_proj"), (1, "mlp.up_proj")]


# ---------------------------------------------------------------- saving


def test_the_merged_export_reloads_in_plain_transformers_and_the_factored_one_in_layercut(tiny_tokenizer, tmp_path):
    torch.manual_seed(0)
    config = transformers.LlamaConfig(**{**TINY_CONFIGS["llama"](3).to_dict(), "tie_word_embeddings": True})
    model = AutoModelForCausalLM.from_config(config).eval()  # tied embeddings, as SmolLM2's
    recipe = Recipe((Decompose.of("feature", 0.7, calibration=CAL),))
    derived = recipe.apply(model, tiny_tokenizer)
    out = logits(derived)
    saved = {form: exports.export(derived, tiny_tokenizer, recipe, base_name="tiny", num_layers=3,
                                  target=tmp_path / form, factored=form == "factored")
             for form in ("merged", "factored")}

    plain = AutoModelForCausalLM.from_pretrained(saved["merged"]).eval()
    assert not any(isinstance(m, Factored) for m in plain.modules()) and count(plain) == count(model)
    torch.testing.assert_close(logits(plain), out, rtol=1e-5, atol=1e-5)
    assert lowrank.ranks_of(plain) == lowrank.ranks_of(derived) and recipe_of(plain) == recipe
    assert checkpoint_bytes(derived) == model_files_bytes(saved["merged"])
    assert "Saved merged back" in (saved["merged"] / "README.md").read_text()

    back, _ = prune.load_model(str(saved["factored"]), device="cpu")
    assert count(back) == count(derived) and isinstance(decoder_layers(back)[0].self_attn.q_proj, Factored)
    assert torch.equal(logits(back), out)
    assert model_files_bytes(saved["factored"]) < 0.8 * model_files_bytes(saved["merged"])
    assert "prune.load_model" in (saved["factored"] / "README.md").read_text()
    assert not getattr(derived.config, lowrank.FACTORED_FIELD, False)  # the saved view marked its own config copy
    exports.export(back, tiny_tokenizer, recipe, base_name="tiny", num_layers=3, target=tmp_path / "again")
    again, _ = prune.load_model(str(tmp_path / "again"), device="cpu")  # merged again: dense, no longer marked
    assert not any(isinstance(m, Factored) for m in again.modules())
    torch.testing.assert_close(logits(again), out, rtol=1e-5, atol=1e-5)


def test_a_gpt2_conv1d_merges_back_into_a_conv1d(tiny_tokenizer, tmp_path):
    model = tiny_model("gpt2", 2)
    derived = lowrank.decompose(model, tiny_tokenizer, space="weight", param_ratio=0.8)
    save_checkpoint(derived, tiny_tokenizer, tmp_path)
    plain = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    torch.testing.assert_close(logits(plain), logits(derived), rtol=1e-5, atol=1e-5)


def test_the_model_card_lists_the_ranks_and_says_how_it_is_saved(tiny_tokenizer):
    model = tiny_model("llama", 2)
    recipe = Recipe((Decompose.of("weight", ranks=3),))
    card = export_texts.model_card(recipe.apply(model), recipe, base_name="tiny", num_layers=2)
    assert "- low-rank" in card and "weight-space low-rank decomposition at rank 3" in card
    assert "| layer | q_proj | k_proj | v_proj | o_proj | gate_proj | up_proj | down_proj |" in card
    assert "| 1 | 3 | 3 | 3 | 3 | 3 | 3 | 3 |" in card and "merged back" in card


# ---------------------------------------------------------------- the recipe step


def test_the_recipe_step_counts_by_arithmetic_after_depth_and_width_and_round_trips(tiny_tokenizer):
    model = tiny_model("qwen2", 4)
    recipe = Recipe.block(4, 1, 2).then(WidthPrune.of(0.8, CAL)).then(Decompose.of("feature", 0.6, calibration=CAL))
    derived = recipe.apply(model, tiny_tokenizer)
    assert recipe.size(size_of(model)).total == count(derived)
    assert estimated_bytes(model, Recipe((recipe.steps[2],))) == own_bytes(
        Recipe((recipe.steps[2],)).apply(model, tiny_tokenizer), model)

    data = json.loads(json.dumps(recipe.to_json()))
    again = Recipe.from_json(data)
    assert again == recipe and again.key == recipe.key and recipe_of(derived) == recipe
    assert data["steps"][2]["calibration"]["text"] is None and data["steps"][2]["text_digest"]
    with pytest.raises(InvalidInput, match="digest"):
        Recipe((again.steps[2],)).apply(model, tiny_tokenizer)
    assert recipe.steps[2].short() == "feature 60%" and "feature-space low-rank" in recipe.describe()

    searched = Decompose.of("weight", ranks={(0, "self_attn.q_proj"): 2, (3, "mlp.down_proj"): 5})
    assert searched.ranks == ((0, "self_attn.q_proj", 2), (3, "mlp.down_proj", 5)) and searched.calibration is None
    assert Recipe.from_json(Recipe((searched,)).to_json()).steps == (searched,)
    assert searched.short() == "weight ranks"
    assert lowrank.ranks_of(Recipe((searched,)).apply(model)) == {(0, "self_attn.q_proj"): 2, (3, "mlp.down_proj"): 5}


def test_a_recipe_refuses_an_order_that_undoes_or_cannot_follow_a_step_and_keeps_the_reverse(tiny_tokenizer):
    model = tiny_model("llama", 2)
    sparse, low, width = Sparsify.of("magnitude", 0.5), Decompose.of("weight", 0.8), WidthPrune.of(0.8, CAL)
    with pytest.raises(InvalidInput, match="decompose first, then sparsify"):
        Recipe((sparse, low))
    with pytest.raises(InvalidInput, match="prune the width before decomposing"):
        Recipe.block(2, 0, 1).then(low).then(width)
    saved = Recipe((low, sparse)).to_json()  # the reverse is allowed; a saved recipe in the wrong order is not
    with pytest.raises(InvalidInput, match="decompose first"):
        Recipe.from_json({"steps": saved["steps"][::-1]})
    sparse_factors = Recipe((low, sparse)).apply(model)  # the factors themselves lose half their weights
    weights = [m.weight for layer in decoder_layers(sparse_factors)
               for m in layer.modules() if isinstance(m, nn.Linear)]
    assert sum(int((w == 0).sum()) for w in weights) == pytest.approx(sum(w.numel() for w in weights) / 2, rel=0.02)
    assert count(Recipe((width, low)).apply(model, tiny_tokenizer)) < count(model)


def test_ratio_one_decomposes_nothing_and_shares_every_tensor():
    model = tiny_model("llama", 2)
    same = lowrank.decompose(model, None, param_ratio=1.0)
    assert torch.equal(logits(same), logits(model)) and own_bytes(same, model) == 0


def test_raising_in_progress_stops_the_work_and_leaves_the_original_alone(tiny_tokenizer):
    model = tiny_model("opt", 3)
    reference = logits(model)

    def cancel(fraction, _message):
        if fraction > 0.3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        lowrank.decompose(model, tiny_tokenizer, param_ratio=0.7, calibration=CAL, progress=cancel)
    assert torch.equal(logits(model), reference)


def test_bad_requests_are_refused_clearly(tiny_tokenizer):
    model = tiny_model("llama", 2)
    cases = [
        (dict(space="pixel", param_ratio=0.8), "Unknown decomposition space"),
        (dict(param_ratio=0.8, ranks=4), "either a parameter ratio or ranks"),
        (dict(), "either a parameter ratio or ranks"),
        (dict(param_ratio=1.5), "fraction of the model's parameters kept"),
        (dict(param_ratio=0.05), "at least"),
        (dict(ranks=0), "whole number from 1 to"),
        (dict(ranks=17), "whole number from 1 to 16"),
        (dict(ranks=2.5), "whole number"),
        (dict(ranks=4, projections=["qq_proj"]), "No projection named 'qq_proj'"),
        (dict(ranks=4, layers=[5]), "Layers to decompose are 0…1"),
        (dict(ranks={(0, "self_attn.q_proj"): 2}, layers=[0]), "name their own projections"),
        (dict(ranks={(9, "self_attn.q_proj"): 2}), "No projection"),
    ]
    for kwargs, message in cases:
        with pytest.raises(InvalidInput, match=message):
            lowrank.decompose(model, tiny_tokenizer, **{"space": "weight", **kwargs})
    with pytest.raises(InvalidInput, match="tokenizer"):
        lowrank.decompose(model, None, param_ratio=0.8)
    with pytest.raises(InvalidInput, match="already decomposed"):
        lowrank.decompose(lowrank.decompose(model, None, space="weight", ranks=2), None, space="weight", ranks=2)
    for kwargs in (dict(space="x", param_ratio=0.5), dict(space="weight"), dict(space="weight", ranks=-1),
                   dict(space="weight", ranks=[(0, "q_proj", 0)]),
                   dict(space="weight", ranks={(0, "q"): 2}, layers=[0])):
        with pytest.raises(InvalidInput):
            Decompose.of(**kwargs)
