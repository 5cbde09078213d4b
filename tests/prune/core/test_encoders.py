"""Encoders (BERT, RoBERTa, ELECTRA) load as masked LMs, T5 as an encoder-decoder; depth cuts (encoders) and sparsity
work on them; what needs a causal LM refuses in one line."""

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
from evaluation.core.pool import describe
from prune.core.architectures import MASKED, SEQ2SEQ, kind_of, layer_stacks, width_of
from prune.core.calibration import Calibration, token_windows
from prune.core.errors import InvalidInput, UnsupportedArchitecture
from prune.core.sequential import matrices
from prune.sparsity.masks import zero_fraction
from ui.text import model_markdown

_COMMON = dict(hidden_size=32, num_hidden_layers=4, num_attention_heads=4, intermediate_size=64,
               max_position_embeddings=64)
CONFIGS = {
    "electra": lambda v: transformers.ElectraConfig(vocab_size=v, embedding_size=16, **_COMMON),
    "bert": lambda v: transformers.BertConfig(vocab_size=v, **_COMMON),
    "roberta": lambda v: transformers.RobertaConfig(vocab_size=v, pad_token_id=0,
                                                    **{**_COMMON, "max_position_embeddings": 66}),
}


@pytest.fixture(scope="module")
def tokenizer():
    found = build_tiny_tokenizer()
    found.add_special_tokens({"mask_token": "[MASK]", "additional_special_tokens": ["<extra_id_0>", "<extra_id_1>"]})
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


@pytest.mark.parametrize("method", ["angular", "block_influence", "relative_magnitude"])
def test_an_encoder_layer_that_changes_nothing_is_found_the_most_removable(method, tokenizer):
    """A known answer: layer 2's attention and MLP write zeros, so (post-norm, on an already normalised stream) its
    output is its input; every method that reads hidden states ranks it first."""
    model = encoder("bert", tokenizer)
    with torch.no_grad():
        layer = model.bert.encoder.layer[2]
        for dense in (layer.attention.output.dense, layer.output.dense):
            dense.weight.zero_()
            dense.bias.zero_()
    result = prune.score(model, tokenizer, method, calibration=Calibration(n_samples=4, seq_len=32), use_cache=False)
    assert result.best_block(1) == (2, 3)


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


@pytest.mark.parametrize("arch", ["bert", "t5"])
def test_an_encoders_speed_run_is_one_pass_and_its_estimate_counts_only_those(arch, tokenizer):
    from evaluation.measure import estimate

    model = tiny_t5(tokenizer) if arch == "t5" else encoder(arch, tokenizer)
    passes = []
    model.register_forward_hook(lambda _m, args, kwargs, _out: passes.append(kwargs["input_ids"].shape),
                                with_kwargs=True)
    measure_speed({"original": model}, batch_sizes=(2,), prompt_len=8, new_tokens=(16,), repeats=2, warmup=1)
    assert passes == [(2, 8)] * 3  # the warm-up and two runs, each one pass over the prompt, no one-token passes
    rates = estimate.Rates(forward_tokens_per_s=100.0, decode_s_per_token=0.5)
    settings = dict(batch_sizes=(2,), prompt_len=8, new_tokens=16, repeats=2)
    assert estimate.speed(rates, [1.0], **settings, generates=False) == pytest.approx(3 * 2 * 8 / 100.0)
    assert estimate.speed(rates, [1.0], **settings) > 15 * 0.5  # a decoder's runs decode too


def test_what_needs_a_causal_lm_refuses_an_encoder_in_one_line(tokenizer):
    model = encoder("bert", tokenizer)
    for run in (lambda: check_seq_lens(model, (16,)),
                lambda: next(stream_side_by_side({"original": model}, tokenizer, "Hello", max_new_tokens=2)),
                lambda: drop(model, attention=[1]),
                lambda: prune.score(model, tokenizer, "taylor", use_cache=False)):
        with pytest.raises(UnsupportedArchitecture, match="^[^\n]*'bert' is an encoder \\(a masked LM\\)[^\n]*$"):
            run()
    with pytest.raises(UnsupportedArchitecture,
                       match="^[^\n]*'bert' \\(the width of an encoder \\(a masked LM\\) is not"):
        width_of(model)


def tiny_t5(tokenizer):
    torch.manual_seed(0)
    config = transformers.T5Config(vocab_size=len(tokenizer), d_model=32, d_kv=8, d_ff=64, num_layers=3,
                                   num_decoder_layers=2, num_heads=4, decoder_start_token_id=0, pad_token_id=0)
    return transformers.AutoModelForSeq2SeqLM.from_config(config).eval()


def test_t5_loads_as_an_encoder_decoder_and_says_so(tokenizer, tmp_path):
    tiny_t5(tokenizer).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    model, _ = prune.load_model(str(tmp_path), device="cpu")
    assert type(model).__name__ == "T5ForConditionalGeneration" and kind_of(model) == SEQ2SEQ
    assert [len(stack) for stack in layer_stacks(model)] == [3, 2]
    assert "an encoder-decoder: it answers cloze tasks; its layers, the encoder's then the decoder's, can be cut" in \
        model_markdown(describe(model, "t5"))


def test_wanda_prunes_t5s_decoder_on_the_pruned_encoders_output(tokenizer):
    """The decoder's first block, by an independent route: its matrices' inputs read by hooks on a plain forward of the
    original decoder behind the already-pruned encoder, each row's lowest |W|·‖X‖ half zeroed by hand."""
    model, cal = tiny_t5(tokenizer), Calibration(n_samples=4, seq_len=32)
    before = {name: p.clone() for name, p in model.named_parameters()}
    sparse = prune.sparsify(model, tokenizer, "wanda", 0.5, calibration=cal)
    assert all(torch.equal(p, before[name]) for name, p in model.named_parameters())
    for stack in layer_stacks(sparse):
        for layer in stack:
            for module in matrices(layer).values():
                assert (module.weight == 0).float().mean() == 0.5  # every matrix of both stacks, half of each row
    mixed = copy.deepcopy(model)
    mixed.encoder = sparse.encoder  # the pruned encoder before the original decoder
    windows = token_windows(tokenizer, cal)
    squares = {}
    block = mixed.decoder.block[0]

    def keep(name):
        def hook(_module, args, _out):
            x = args[0].reshape(-1, args[0].shape[-1])
            squares[name] = squares.get(name, 0) + (x * x).sum(0)
        return hook

    handles = [m.register_forward_hook(keep(n)) for n, m in matrices(block).items()]
    with torch.no_grad():
        mixed(input_ids=windows, decoder_input_ids=mixed.prepare_decoder_input_ids_from_labels(labels=windows))
    for handle in handles:
        handle.remove()
    pruned = matrices(sparse.decoder.block[0])
    for name, module in matrices(model.decoder.block[0]).items():
        score = module.weight.abs() * squares[name].sqrt()[None, :]
        highest_zeroed = score.sort(dim=1).values[:, score.shape[1] // 2 - 1]  # each row's half lowest go
        assert torch.equal(pruned[name].weight, module.weight * (score > highest_zeroed[:, None])), name


def test_what_t5_cannot_do_refuses_in_one_line(tokenizer, data_dir):
    from evaluation.quality import lm_eval_adapter

    model = tiny_t5(tokenizer)
    request = lm_eval_adapter.check_request(["arc_easy"], limit=2, data_dir=data_dir)
    with pytest.raises(InvalidInput, match="^arc_easy is scored by log-likelihood, which LayerCut reads from causal "
                                           "LMs only: ask an encoder or an encoder-decoder the cloze tasks"):
        lm_eval_adapter.evaluate(model, tokenizer, request)
    for run, words in ((lambda: prune.score(model, tokenizer, "taylor", use_cache=False),
                        "^Taylor\\+ \\(Shortened LLaMA\\) needs a causal .* 't5' is an encoder-decoder"),
                       (lambda: check_seq_lens(model, (16,)),
                        "^Perplexity needs a causal .* 't5' is an encoder-decoder"),
                       (lambda: next(stream_side_by_side({"original": model}, tokenizer, "Hello", max_new_tokens=2)),
                        "^Generation needs a causal .* 't5' is an encoder-decoder")):
        with pytest.raises(UnsupportedArchitecture, match=words):
            run()


@pytest.mark.parametrize("arch", ["electra", "t5"])
def test_a_sparse_encoder_exports_as_a_folder_that_loads_back_with_its_zeros(arch, tokenizer, tmp_path, data_dir):
    from evaluation import cli

    folder, export = tmp_path / "model", tmp_path / "export"
    (tiny_t5(tokenizer) if arch == "t5" else encoder(arch, tokenizer)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    code = cli.main([str(a) for a in ("--model", folder, "--full", "--task", "cbt_style_cn", "--limit", 2, "--sparsify",
                                      "magnitude", "--sparsity", 0.5, "--export_dir", export, "--data_dir", data_dir,
                                      "--output_folder", tmp_path / "out")])
    assert code == 0
    reloaded, _ = prune.load_model(str(export), device="cpu")
    assert zero_fraction(reloaded) == pytest.approx(0.5, abs=0.01)
    auto = "AutoModelForSeq2SeqLM" if arch == "t5" else "AutoModelForMaskedLM"
    assert f"model = {auto}.from_pretrained(" in (export / "README.md").read_text()
    assert "cloze tasks, one device" in (export / "SCALE_OUT.md").read_text()
