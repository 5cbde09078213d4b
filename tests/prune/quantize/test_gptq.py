"""GPTQ: the solver's integers against the authors' algorithm transcribed (gptq_reference.py), round-to-nearest's
integers where no column updates another, a lower layer-wise error than rounding to nearest, each layer calibrated on
the quantized layers before it, the step's JSON, bytes, export and card, a sparsity step's zeros kept, the refusals."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForCausalLM

import prune  # registers the steps
from evaluation.measure.memory import save_checkpoint
from evaluation.serving.variants import estimated_bytes, own_bytes
from prune.core.architectures import decoder_layers
from prune.core.calibration import BUILTIN_TEXTS, Calibration, token_windows
from prune.core.errors import InvalidInput
from prune.core.recipe import Recipe
from prune.core.storage import dense
from prune.quantize import calibrated
from prune.quantize.gptq import Grid, gptq
from prune.quantize.step import Quantize
from prune.quantize.weights import QUANTIZED_FIELD, kernel_of
from prune.sparsity.masks import zero_fraction
from prune.sparsity.step import Sparsify

from conftest import assert_read_sequentially, tiny_model
from gptq_reference import fasterquant
from test_quantize import by_hand, in_torchao_form, logits

CAL = Calibration(source="text", text=BUILTIN_TEXTS[0].read_text()[:6000], n_samples=6, seq_len=32)
INT4 = Grid(4, 32, torch.bfloat16)
INT8 = Grid(8, None, torch.float32)


def correlated_inputs(tokens: int, width: int, seed: int = 1) -> torch.Tensor:
    """[tokens, width] inputs with correlated, unevenly scaled features (a real layer's are), a few always zero."""
    torch.manual_seed(seed)
    mixing = torch.randn(width, width) * (torch.rand(width) * 3)[None, :]
    x = torch.randn(tokens, width) @ mixing + 0.3 * torch.randn(tokens, width)
    x[:, [3, width // 2]] = 0  # dead inputs: H_jj = 0
    return x


def differing_rows(theirs: torch.Tensor, ours: torch.Tensor) -> int:
    """Rows whose integers differ anywhere (after a first difference a row's later columns take other errors)."""
    return int((theirs != ours).any(1).sum())


CASES = {  # name: (grid, columns, the reference's groupsize, actorder, static_groups)
    "int4 g32": (INT4, 256, 32, False, False),  # groups start inside blocks of 128: scales read from W as it began
    "int4 g32 act-order": (INT4, 256, 32, True, True),  # static groups: each group's scale in the original order
    "int4 g256": (Grid(4, 256, torch.bfloat16), 512, 256, False, False),  # a group spans two blocks
    "int8 per row": (INT8, 300, -1, False, False),  # blocks of 128, 128 and 44
    "int8 per row act-order": (INT8, 300, -1, True, False),
}


TIES = dict.fromkeys(CASES, 0)  # rows that round a tie differently with their x / scale, counted on these seeds


@pytest.mark.parametrize("name", CASES)
def test_the_integers_and_scales_are_the_authors_algorithms_up_to_rounding_ties(name):
    grid, columns, groupsize, actorder, static = CASES[name]
    torch.manual_seed(0)
    weight = torch.randn(24, columns) * (1 + torch.rand(columns))[None, :]
    x = correlated_inputs(2048, columns)
    hessian = x.T @ x
    ours, scales = gptq(weight, hessian, grid, actorder=actorder)
    run = dict(groupsize=groupsize, actorder=actorder, static_groups=static)
    theirs, their_scales = fasterquant(weight, hessian, grid.bits, grid.stored, divide=False, **run)
    assert torch.equal(ours, theirs)  # rounded as torchao rounds: the same integers everywhere
    torch.testing.assert_close(scales, their_scales, rtol=2**-8, atol=0)  # the same up to their float rounding
    divided, _ = fasterquant(weight, hessian, grid.bits, grid.stored, **run)  # their own round(x / scale)
    assert differing_rows(divided, ours) == TIES[name]  # x / s a hair from a half: a tie, rounded the other way
    assert int(ours.min()) >= grid.lowest and int(ours.max()) <= grid.highest and ours.dtype == torch.int8
    assert (ours[:, [3, columns // 2]] == 0).all()  # a dead input's weight is zero


@pytest.mark.parametrize("grid, groupsize", [(INT4, 32), (INT8, -1)])
def test_on_a_layer_sized_matrix_the_integers_are_the_authors_exactly(grid, groupsize):
    """960 rows of 576 inputs (the default model's q, k and v solved as one): hundreds of thousands of roundings, where
    an update rounded otherwise than theirs (a fused multiply-add) gives other integers in a few rows."""
    torch.manual_seed(1)
    weight = torch.randn(960, 576) * 0.02
    x = correlated_inputs(4096, 576)
    ours, _ = gptq(weight, x.T @ x, grid)
    theirs, _ = fasterquant(weight, x.T @ x, grid.bits, grid.stored, divide=False, groupsize=groupsize)
    assert torch.equal(ours, theirs)


@pytest.mark.parametrize("grid", [INT4, INT8], ids=["int4", "int8"])
def test_without_correlated_inputs_gptq_rounds_to_nearest_as_torchao_does(grid):
    """A diagonal H: no column's error reaches another, so GPTQ's integers and scales are round-to-nearest's."""
    torch.manual_seed(0)
    weight = torch.randn(16, 64)
    integers, scales = gptq(weight, torch.diag(torch.rand(64) + 0.5), grid)
    levels, expected = by_hand(weight, grid.bits, grid.group)
    assert torch.equal(integers, levels) and torch.equal(scales, expected.to(grid.stored).float())


@pytest.mark.parametrize("grid", [INT4, INT8], ids=["int4", "int8"])
def test_gptq_reconstructs_a_model_layer_better_than_rounding_to_nearest(grid):
    weight = tiny_model("llama", 1).model.layers[0].mlp.down_proj.weight.detach()  # 32 outputs × 64 inputs
    x = correlated_inputs(1024, 64)
    x[:, [3, 32]] = torch.randn(1024, 2)  # every input alive here

    def error(integers, scales):
        values = (integers.view(32, scales.shape[1], -1).float() * scales[..., None]).view(32, 64)
        return float(((weight - values) @ x.T).norm())

    levels, scales = by_hand(weight, grid.bits, grid.group)
    rtn = error(levels, scales.to(grid.stored).float())
    solved = error(*gptq(weight, x.T @ x, grid))
    assert solved < 0.8 * rtn, (solved, rtn)


@pytest.mark.parametrize("grid", [INT4, INT8])
def test_rows_are_solved_on_their_own_so_projections_of_one_input_are_solved_as_one_matrix(grid, tiny_tokenizer,
                                                                                           monkeypatch):
    """GPTQ rounds each row given H alone: two matrices' rows stacked give each matrix's own integers and scales, bit
    for bit; so a Llama layer's q, k, v (one input) and gate, up are solved as one matrix each: four solves a layer."""
    x = correlated_inputs(512, 128)
    torch.manual_seed(3)
    first, second = torch.randn(96, 128), torch.randn(32, 128)
    together = gptq(torch.cat([first, second]), x.T @ x, grid)
    alone = [gptq(w, x.T @ x, grid) for w in (first, second)]
    assert torch.equal(together[0], torch.cat([alone[0][0], alone[1][0]]))
    assert torch.equal(together[1], torch.cat([alone[0][1], alone[1][1]]))
    rows = []
    solve = calibrated.gptq
    monkeypatch.setattr(calibrated, "gptq", lambda weight, *a, **k: rows.append(weight.shape[0]) or solve(weight, *a,
                                                                                                         **k))
    model = tiny_model("llama", 2)
    Quantize.of(grid.bits, method="gptq", calibration=CAL).apply(model, tiny_tokenizer)
    layer = decoder_layers(model)[0]
    width = {name: m.weight.shape[0] for name, m in layer.named_modules() if isinstance(m, torch.nn.Linear)}
    qkv = width["self_attn.q_proj"] + width["self_attn.k_proj"] + width["self_attn.v_proj"]
    assert rows == [qkv, width["self_attn.o_proj"], width["mlp.gate_proj"] + width["mlp.up_proj"],
                    width["mlp.down_proj"]] * 2


@pytest.mark.parametrize("bits", [8, 4])
def test_a_gptq_model_stores_round_to_nearests_form_and_bytes_and_leaves_the_original_alone(bits, tiny_tokenizer):
    model = tiny_model("llama", 3)
    before = {name: (p.detach().clone(), p.data_ptr()) for name, p in model.named_parameters()}
    rtn, solved = Quantize.of(bits), Quantize.of(bits, method="gptq", calibration=CAL)
    variant = solved.apply(model, tiny_tokenizer)
    baseline = rtn.apply(model)
    assert kernel_of(variant) == kernel_of(baseline) is not None
    assert estimated_bytes(model, Recipe((solved,))) == estimated_bytes(model, Recipe((rtn,))) == \
        own_bytes(variant, model) == own_bytes(baseline, model)
    changed = 0
    for ours, theirs in zip(decoder_layers(variant), decoder_layers(baseline)):
        for (name, mine), (_, other) in zip(ours.named_modules(), theirs.named_modules()):
            if isinstance(mine, torch.nn.Linear):
                assert type(mine.weight) is type(other.weight) and mine.weight.shape == other.weight.shape, name
                changed += not torch.equal(mine.weight.values(), other.weight.values())
    assert changed == 21  # every projection's integers differ somewhere
    for name, p in model.named_parameters():
        assert torch.equal(p, before[name][0]) and p.data_ptr() == before[name][1], name
    assert getattr(variant.config, QUANTIZED_FIELD) == {"bits": bits, "group": rtn.group, "quantized": 21, "dense": 0,
                                                      "head": False, "method": "gptq", "embedding": False}
    assert not hasattr(model.config, QUANTIZED_FIELD) and getattr(model, "hf_quantizer", None) is None


def test_each_layer_is_calibrated_on_the_outputs_of_the_quantized_layers_before_it(tiny_tokenizer, monkeypatch):
    seen = []
    hessians = calibrated.input_statistics

    def recording(layer, modules, hidden, calls, **options):
        seen.append(torch.cat(hidden))
        return hessians(layer, modules, hidden, calls, **options)

    monkeypatch.setattr(calibrated, "input_statistics", recording)
    model = tiny_model("qwen2", 4)  # sliding-window and full-attention layers: each keeps its own mask
    variant = Quantize.of(4, method="gptq", calibration=CAL).apply(model, tiny_tokenizer)
    assert_read_sequentially(seen, variant, model, token_windows(tiny_tokenizer, CAL))


@pytest.mark.parametrize("bits", [8, 4])
def test_a_saved_gptq_model_reloads_with_the_same_logits(bits, tmp_path, tiny_tokenizer):
    recipe = Recipe((prune.DepthCut.of(4, [2]), Quantize.of(bits, method="gptq", calibration=CAL)))
    variant = recipe.apply(tiny_model("llama", 4), tiny_tokenizer)
    save_checkpoint(variant, None, tmp_path)
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32)
    assert torch.equal(logits(reloaded), logits(in_torchao_form(variant)))  # torchao's products of the same numbers
    tiny_tokenizer.save_pretrained(tmp_path)
    loaded, _ = prune.load_model(str(tmp_path), device="cpu")  # packed again: the kernels, the same numbers
    assert kernel_of(loaded) == kernel_of(variant) and torch.equal(logits(loaded), logits(variant))
    assert Recipe.from_json(json.loads((tmp_path / "config.json").read_text())["layercut"]) == recipe


def test_the_step_records_its_method_and_calibration_and_an_old_record_rounds_to_nearest():
    solved = Quantize.of(4, 64, method="gptq", calibration=CAL)
    data = json.loads(json.dumps(Recipe((solved,)).to_json()))
    assert CAL.text[:40] not in json.dumps(data)  # an inline text by its digest
    again = Recipe.from_json(data)
    assert again == Recipe((solved,)) and again.key == Recipe((solved,)).key
    with pytest.raises(InvalidInput, match="digest"):
        again.steps[0].apply(tiny_model("llama", 1))
    old = Recipe.from_json({"steps": [{"kind": "quantize", "bits": 4, "group": 32, "head": False}]})  # before GPTQ
    assert old == Recipe((Quantize.of(4),)) and old.steps[0].method == "rtn" and old.steps[0].calibration is None
    assert Quantize.of(4).record() == {"bits": 4, "group": 32, "head": False}  # RTN's key as it was
    assert len({Recipe((s,)).key for s in (Quantize.of(4), solved, Quantize.of(4, 64, method="gptq"))}) == 3
    assert solved.short() == "int4 g64 gptq" and Quantize.of(8, method="gptq", head=True).short() == "int8 gptq+head"
    assert solved.describe() == ("int4 weight-only quantization (GPTQ, symmetric, groups of 64 inputs) (calibration: "
                                 "text, 6 × 32 tokens)")
    assert Quantize.of(8, calibration=CAL).calibration is None  # round to nearest reads no data


def test_the_card_and_the_handoff_say_gptq(tiny_tokenizer):
    step = Quantize.of(4, method="gptq", calibration=CAL)
    variant = step.apply(tiny_model("llama", 2), tiny_tokenizer)
    assert "chosen by GPTQ" in step.card_line(variant) and "GPTQ, symmetric" in step.card_line(variant)
    assert "quantized by GPTQ" in step.handoff_note() and "quantized by torchao" in Quantize.of(4).handoff_note()


def test_gptq_after_a_sparsity_step_keeps_its_zeros(tiny_tokenizer):
    """SparseGPT's zeros and GPTQ's int4 by recipe: the zeros fixed by the first pass stay zero in the second."""
    model = tiny_model("llama", 2)
    sparse = Recipe((Sparsify.of("sparsegpt", 0.5, calibration=CAL),))
    both = sparse.then(Quantize.of(4, method="gptq", calibration=CAL)).apply(model, tiny_tokenizer)
    first = sparse.apply(model, tiny_tokenizer)
    for ours, theirs in zip(decoder_layers(both), decoder_layers(first)):
        for name, module in theirs.named_modules():
            if isinstance(module, torch.nn.Linear):
                zeros = module.weight == 0
                assert zeros.float().mean() == 0.5 and (dense(ours.get_submodule(name).weight)[zeros] == 0).all()
    assert 0.5 <= zero_fraction(both) < 0.55  # and a few more weights round to 0


def test_bad_requests_are_refused_in_one_line(tiny_tokenizer):
    with pytest.raises(InvalidInput, match="rounds to nearest \\(rtn\\) or solves by GPTQ \\(gptq\\), not 'awq'"):
        Quantize.of(4, method="awq")
    with pytest.raises(InvalidInput, match="needs the model's tokenizer"):
        Quantize.of(4, method="gptq").apply(tiny_model("llama", 1))
    with pytest.raises(InvalidInput, match="by round-to-nearest \\(method rtn\\)"):
        Quantize.of(8, method="gptq").apply(tiny_encoder_decoder(), tiny_tokenizer)
    with pytest.raises(InvalidInput, match="nn.Linear"):  # GPT-2's projections are Conv1D
        Quantize.of(8, method="gptq").apply(tiny_model("gpt2", 1), tiny_tokenizer)
    with pytest.raises(InvalidInput, match="already quantized"):
        Quantize.of(8, method="gptq").apply(Quantize.of(4).apply(tiny_model("llama", 1)), tiny_tokenizer)


def tiny_encoder_decoder():
    import transformers

    config = transformers.T5Config(vocab_size=320, d_model=32, d_kv=8, d_ff=64, num_layers=1, num_heads=4)
    return transformers.T5ForConditionalGeneration(config).eval()
