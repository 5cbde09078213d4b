"""The input embedding stored in int8 (``Quantize(embedding=True)``): its rows by hand, a tied head sharing the one
int8 matrix, the original untouched, a token reading one int8 row, the bytes counted by arithmetic equal to the built
model's (tied and untied, by hand), the record, GPTQ beside it, and an export that transformers and LayerCut reload."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from transformers import AutoModelForCausalLM

import prune  # registers the steps
from evaluation.measure.memory import checkpoint_bytes, folder_bytes, save_checkpoint
from evaluation.serving.variants import estimated_bytes, own_bytes
from prune.core.errors import InvalidInput
from prune.core.recipe import Recipe
from prune.core.sizes import size_of
from prune.core.storage import dense, is_quantized, weight_bytes
from prune.core.surgery import clone_layers, shallow_clone
from prune.quantize.step import Quantize
from prune.quantize.packed import INT8_KERNEL
from prune.quantize.weights import QUANTIZED_FIELD

from conftest import tied_llama, tiny_model
from test_quantize import by_hand, logits

# The tiny Llama: vocabulary 320, hidden 32, float32; 4 layers of q 32×32, k 16×32, v 16×32, o 32×32, gate and up
# 64×32, down 32×64, two norms of 32; a final norm of 32.
VOCAB, HIDDEN = 320, 32
LAYER = [(32, 32), (16, 32), (16, 32), (32, 32), (64, 32), (64, 32), (32, 64)]
NORMS = 2 * 32 * 4  # per layer


def int8(rows, inputs):  # a byte per weight, a float32 scale per row
    return rows * inputs + rows * 4


def int4(rows, inputs):  # two values a byte, a bfloat16 scale and zero per group of 32 inputs
    return rows * inputs // 2 + inputs // 32 * rows * 2 * 2


@pytest.mark.parametrize("bits", [8, 4])
def test_the_tied_embedding_is_int8_by_hand_the_head_shares_it_and_the_original_is_untouched(bits):
    model = tied_llama(2)
    original = model.model.embed_tokens.weight.detach().clone()
    step = Quantize.of(bits, embedding=True)
    variant = step.apply(model)
    weight = variant.model.embed_tokens.weight
    levels, scales = by_hand(original, 8, None)  # int8 whatever the layers' bits: a scale per row
    assert torch.equal(weight.values(), levels) and torch.equal(weight.scales(), scales)
    assert variant.lm_head.weight is weight and variant.config.tie_word_embeddings  # one int8 matrix, still tied
    assert model.lm_head.weight is model.model.embed_tokens.weight and torch.equal(model.lm_head.weight, original)
    assert not is_quantized(model.model.embed_tokens.weight) and getattr(model, "hf_quantizer", None) is None
    recorded = getattr(variant.config, QUANTIZED_FIELD)
    assert recorded["embedding"] and not recorded["head"]
    assert variant.lm_head.weight.kernel() == INT8_KERNEL  # the tied head's product runs the int8 kernel
    assert torch.allclose(logits(variant), logits(model), atol=0.05)
    assert torch.equal(Quantize.of(bits, head=True, embedding=True).apply(model).lm_head.weight.values(), levels)


def test_a_token_reads_its_int8_row_times_its_scale_without_dequantizing_the_matrix(monkeypatch):
    weight = Quantize.of(8, embedding=True).apply(tiny_model("llama", 1)).model.embed_tokens.weight
    ids = torch.tensor([[5, 17, 5], [319, 0, 42]])
    expected = dense(weight)[ids]  # [2, 3, 32]
    monkeypatch.setattr(type(weight), "dequantize", lambda self: pytest.fail("the whole matrix dequantized"))
    assert torch.equal(nn.functional.embedding(ids, weight), expected)
    assert torch.equal(torch.ops.aten.embedding(weight, ids), expected) and expected.dtype == torch.float32


def test_an_untied_head_stays_the_originals_unless_asked():
    model = tiny_model("llama", 2)
    variant = Quantize.of(4, embedding=True).apply(model)
    assert is_quantized(variant.model.embed_tokens.weight) and variant.lm_head.weight is model.lm_head.weight
    both = Quantize.of(4, head=True, embedding=True).apply(model)
    assert is_quantized(both.lm_head.weight) and both.lm_head.weight is not both.model.embed_tokens.weight


def by_hand_bytes(tied: bool, head: bool) -> int:
    """The int4 model's weight bytes with an int8 embedding: layers, norms, the final norm, then the embedding (int8)
    and the head (tied: none of its own; untied: int8 with ``head``, else float32)."""
    layers = 4 * (sum(int4(rows, inputs) for rows, inputs in LAYER) + NORMS) + HIDDEN * 4
    own_head = 0 if tied else int8(VOCAB, HIDDEN) if head else VOCAB * HIDDEN * 4
    return layers + int8(VOCAB, HIDDEN) + own_head


CASES = {(tied, head): (tied_llama if tied else (lambda layers: tiny_model("llama", layers)),
                        Quantize.of(4, head=head, embedding=True)) for tied in (True, False) for head in (False, True)}


@pytest.mark.parametrize("tied, head", list(CASES), ids=[f"{'tied' if t else 'untied'}{'-head' if h else ''}"
                                                         for t, h in CASES])
def test_the_bytes_by_arithmetic_are_a_hand_count_and_the_built_models(tied, head, tiny_tokenizer):
    make, step = CASES[tied, head]
    model, recipe = make(4), Recipe((step,))
    variant = recipe.apply(model, tiny_tokenizer)
    assert recipe.stored_bytes(size_of(model), 4) == weight_bytes(variant) == by_hand_bytes(tied, head)
    assert estimated_bytes(model, recipe) == own_bytes(variant, model)
    cut = Recipe((prune.DepthCut.of(4, [1, 2]), Quantize.of(8, head=head, embedding=True)))
    assert cut.stored_bytes(size_of(model), 4) == weight_bytes(cut.apply(model)) and estimated_bytes(
        model, cut) == own_bytes(cut.apply(model), model)


def test_the_record_names_and_words_say_the_embedding_and_old_records_keep_theirs():
    step = Quantize.of(4, embedding=True)
    assert step.record() == {"bits": 4, "group": 32, "head": False, "embedding": True}
    assert Quantize.of(4).record() == {"bits": 4, "group": 32, "head": False}  # old recipes' keys unchanged
    assert Quantize.from_record({"bits": 4, "group": 32, "head": False}) == Quantize.of(4)
    assert Quantize.from_record(step.record()) == step and Recipe.from_json(Recipe((step,)).to_json()).steps == (step,)
    shorts = {Quantize.of(8, embedding=True).short(), step.short(), Quantize.of(8, head=True, embedding=True).short(),
              Quantize.of(8, head=True).short(), Quantize.of(8).short()}
    assert step.short() == "int4 g32+emb" and len(shorts) == 5
    assert "input embedding in int8" in step.describe()
    assert "the input embedding (int8" in step.card_line(step.apply(tied_llama(1)))
    with pytest.raises(InvalidInput, match="input embedding is quantized is true or false"):
        Quantize.of(8, embedding=1)


def test_gptq_layers_take_an_int8_embedding_rounded_to_nearest(tiny_tokenizer):
    model = tied_llama(2)
    from prune.core.calibration import Calibration

    step = Quantize.of(4, method="gptq", calibration=Calibration(n_samples=2, seq_len=16), embedding=True)
    variant = step.apply(model, tiny_tokenizer)
    levels, _ = by_hand(model.model.embed_tokens.weight.detach(), 8, None)
    assert torch.equal(variant.model.embed_tokens.weight.values(), levels) and variant.lm_head.weight is \
        variant.model.embed_tokens.weight
    assert Quantize.from_record(step.record()) == step and step.short() == "int4 g32 gptq+emb"


def in_torchao_form(variant):
    """A copy of ``variant`` whose kernel-form weights (layers, head, embedding) are torchao's plain tensors, a tied
    one converted once."""
    reference = clone_layers(variant)
    reference.set_input_embeddings(shallow_clone(variant.get_input_embeddings()))
    reference.set_output_embeddings(shallow_clone(variant.get_output_embeddings()))
    made: dict[int, nn.Parameter] = {}
    for module in reference.modules():
        if isinstance(module, (nn.Linear, nn.Embedding)) and is_quantized(module.weight):
            found = module.weight
            made.setdefault(id(found), nn.Parameter(found.to_torchao(), requires_grad=False))
            module.weight = made[id(found)]
    return reference


@pytest.mark.parametrize("tied", [True, False])
def test_an_export_reloads_tied_in_transformers_and_in_layercut_with_the_same_logits(tied, tmp_path, tiny_tokenizer):
    model = tied_llama(2) if tied else tiny_model("llama", 2)
    variant = Quantize.of(4, embedding=True).apply(model)
    save_checkpoint(variant, None, tmp_path)
    assert folder_bytes(tmp_path) == checkpoint_bytes(variant)  # the tied int8 matrix saved once
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32)
    assert is_quantized(reloaded.model.embed_tokens.weight)
    assert (reloaded.lm_head.weight is reloaded.model.embed_tokens.weight) == tied
    assert torch.equal(logits(reloaded), logits(in_torchao_form(variant)))  # torchao's products of the same numbers
    tiny_tokenizer.save_pretrained(tmp_path)
    loaded, _ = prune.load_model(str(tmp_path), device="cpu")  # packed again: the kernels, the same numbers
    assert (loaded.lm_head.weight is loaded.model.embed_tokens.weight) == tied
    assert type(loaded.model.embed_tokens.weight) is type(variant.model.embed_tokens.weight)
    assert torch.equal(logits(loaded), logits(variant))
