"""Encoders (BERT, RoBERTa, ELECTRA) load as masked LMs; depth cuts and sparsity work on them; what needs a causal
LM refuses in one line."""

from __future__ import annotations

import copy

import pytest
import torch
import transformers
from torch import nn

import prune
from prune.drop.sublayers import drop
from conftest import build_tiny_tokenizer
from evaluation.measure.generation import stream_side_by_side
from evaluation.measure.memory import measure_memory
from evaluation.measure.speed import measure_speed
from evaluation.quality.perplexity import check_seq_lens
from evaluation.serving.models import describe
from prune.core.architectures import MASKED, kind_of, width_of
from prune.core.calibration import Calibration
from prune.core.errors import InvalidInput, UnsupportedArchitecture
from prune.sparsity.masks import zero_fraction
from ui.text import model_markdown

_COMMON = dict(hidden_size=32, num_hidden_layers=4, num_attention_heads=4, intermediate_size=64,
               max_position_embeddings=64)
CONFIGS = {
    "electra": lambda v: transformers.ElectraConfig(vocab_size=v, embedding_size=16, **_COMMON),
    "bert": lambda v: transformers.BertConfig(vocab_size=v, **_COMMON),
    "roberta": lambda v: transformers.RobertaConfig(vocab_size=v, pad_token_id=0, **{**_COMMON, "max_position_embeddings": 66}),
}


@pytest.fixture(scope="module")
def tokenizer():
    found = build_tiny_tokenizer()
    found.add_special_tokens({"mask_token": "[MASK]"})
    return found


def encoder(arch: str, tokenizer):
    torch.manual_seed(0)
    return transformers.AutoModelForMaskedLM.from_config(CONFIGS[arch](len(tokenizer))).eval()


@pytest.mark.parametrize("arch", list(CONFIGS))
def test_an_encoder_loads_from_its_folder_as_a_masked_lm(arch, tokenizer, tmp_path):
    encoder(arch, tokenizer).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    model, _ = prune.load_model(str(tmp_path), device="cpu")
    assert isinstance(model, transformers.AutoModelForMaskedLM._model_mapping[type(model.config)])
    assert kind_of(model) == MASKED
    line = model_markdown(describe(model, "tiny"))
    assert "4 layers" in line and "an encoder (masked LM): it answers cloze tasks" in line


@pytest.mark.parametrize("arch", list(CONFIGS))
def test_a_depth_cut_of_an_encoder_is_the_model_without_those_layers(arch, tokenizer):
    model = encoder(arch, tokenizer)
    ids = torch.randint(0, len(tokenizer), (2, 12), generator=torch.Generator().manual_seed(1))
    before = model(ids).logits
    pruned = prune.cut(model, 1, 3)
    by_hand = copy.deepcopy(model)  # an independent route: the layer list rebuilt without layers 1 and 2
    layers = getattr(by_hand, by_hand.base_model_prefix).encoder
    layers.layer = nn.ModuleList([layers.layer[0], layers.layer[3]])
    with torch.no_grad():
        assert torch.allclose(pruned(ids).logits, by_hand(ids).logits, atol=1e-5)
        assert torch.equal(model(ids).logits, before)  # the original untouched
    assert pruned.config.num_hidden_layers == 2 and model.config.num_hidden_layers == 4


@pytest.mark.parametrize("method", ["magnitude", "wanda", "sparsegpt"])
def test_every_sparsity_method_prunes_an_encoders_layers_and_leaves_the_original(method, tokenizer):
    model = encoder("electra", tokenizer)
    before = {name: p.clone() for name, p in model.named_parameters()}
    sparse = prune.sparsify(model, tokenizer, method, 0.5, calibration=Calibration(n_samples=4, seq_len=32))
    assert zero_fraction(sparse) == pytest.approx(0.5, abs=0.01)
    assert zero_fraction(model) == 0.0
    assert all(torch.equal(p, before[name]) for name, p in model.named_parameters())
    assert torch.equal(sparse.get_output_embeddings().weight, model.get_output_embeddings().weight)  # not the head


def test_calibration_longer_than_an_encoders_positions_refuses_in_one_line(tokenizer):
    with pytest.raises(InvalidInput, match="^Calibration windows of 128 tokens exceed this model's 64 positions"):
        prune.sparsify(encoder("bert", tokenizer), tokenizer, "wanda", 0.5, calibration=Calibration(n_samples=2))


def test_speed_and_memory_of_an_encoder_are_its_passes(tokenizer):
    model = encoder("bert", tokenizer)
    speed = measure_speed({"original": model}, batch_sizes=(1,), prompt_len=8, new_tokens=(2,), repeats=1, warmup=0)
    assert [m.name for m in speed] == ["prefill latency (batch 1, 8 tokens)"]
    memory = measure_memory(model, torch.arange(8)[None], label="original", new_tokens=2)
    assert [m.name for m in memory] == ["parameters", "weight memory", "peak memory of one pass (8 tokens)",
                                        "checkpoint size on disk"]
    assert memory[0].value == sum(p.numel() for p in model.parameters())


def test_what_needs_a_causal_lm_refuses_an_encoder_in_one_line(tokenizer):
    model = encoder("bert", tokenizer)
    for run in (lambda: check_seq_lens(model, (16,)),
                lambda: next(stream_side_by_side({"original": model}, tokenizer, "Hello", max_new_tokens=2)),
                lambda: drop(model, attention=[1]),
                lambda: prune.score(model, tokenizer, "taylor", use_cache=False)):
        with pytest.raises(UnsupportedArchitecture, match="^[^\n]*'bert' is an encoder \\(a masked LM\\)[^\n]*$"):
            run()
    with pytest.raises(UnsupportedArchitecture, match="^[^\n]*'bert' \\(an encoder's width is not pruned yet\\)"):
        width_of(model)
