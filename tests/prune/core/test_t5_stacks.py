"""T5's two stacks, each on its own: their residual streams, the analyses' block scores, and depth cuts (the stack's
relative position bias handed to a new first layer), against transformers' own states and a T5 rebuilt by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import transformers

import prune
from conftest import build_tiny_tokenizer
from prune.core.architectures import stack_spans
from prune.core.calibration import Calibration, token_windows
from prune.core.errors import InvalidCut
from prune.core.hidden import residual_streams

CAL = Calibration(n_samples=4, seq_len=32)


@pytest.fixture(scope="module")
def tokenizer():
    found = build_tiny_tokenizer()
    found.add_special_tokens({"additional_special_tokens": ["<extra_id_0>", "<extra_id_1>"]})
    return found


def t5(tokenizer, encoder: int = 3, decoder: int = 3, seed: int = 0):
    torch.manual_seed(seed)
    config = transformers.T5Config(vocab_size=len(tokenizer), d_model=32, d_kv=8, d_ff=64, num_layers=encoder,
                                   num_decoder_layers=decoder, num_heads=4, decoder_start_token_id=0, pad_token_id=0)
    return transformers.AutoModelForSeq2SeqLM.from_config(config).eval()


def states_by_transformers(model, windows) -> list[torch.Tensor]:
    """Each stack's h_0 … h_L another way: transformers' recorded hidden states, whose last entry is after the
    stack's final norm, so the last is read at that norm's input instead."""
    final = []
    hooks = [stack.final_layer_norm.register_forward_pre_hook(lambda _m, args: final.append(args[0]))
             for stack in (model.encoder, model.decoder)]
    with torch.no_grad():
        out = model(input_ids=windows, decoder_input_ids=model.prepare_decoder_input_ids_from_labels(labels=windows),
                    output_hidden_states=True)
    for hook in hooks:
        hook.remove()
    return [torch.stack([*states[:-1], last]) for states, last in
            ((out.encoder_hidden_states, final[0]), (out.decoder_hidden_states, final[1]))]


def test_each_stack_is_read_on_its_own_residual_stream(tokenizer):
    model = t5(tokenizer, encoder=3, decoder=2)
    windows = token_windows(tokenizer, CAL)
    assert stack_spans(model) == [("encoder", 0, 3), ("decoder", 3, 5)]
    for ours, theirs in zip(residual_streams(model, windows), states_by_transformers(model, windows), strict=True):
        assert ours.shape == theirs.shape
        torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=0)


def test_angular_distance_scores_each_stack_on_its_own_and_no_block_spans_both(tokenizer):
    model = t5(tokenizer)
    result = prune.score(model, tokenizer, "angular", calibration=CAL, use_cache=False)
    blocks, (encoder, decoder) = result.block_scores, states_by_transformers(model, token_windows(tokenizer, CAL))
    assert blocks.shape == (6, 6) and result.params["stacks"] == [["encoder", 0, 3], ["decoder", 3, 6]]
    for offset, states in ((0, encoder), (3, decoder)):
        for n in (1, 2):
            for start in range(4 - n):
                cos = torch.nn.functional.cosine_similarity(states[start, :, -1], states[start + n, :, -1], dim=-1)
                expected = (torch.arccos(cos.clamp(-1, 1)) / math.pi).mean().item()
                assert blocks[n - 1, offset + start] == pytest.approx(expected, abs=1e-5)
    assert np.isposinf(blocks[1, 2]) and np.isposinf(blocks[2, 1])  # [2, 4) and [1, 4) span both stacks
    assert np.isposinf(blocks[2, 0]) and np.isposinf(blocks[2, 3])  # all of the encoder, all of the decoder
    assert np.isnan(blocks[2, 4]) and np.isnan(blocks[5, 1])  # past the last layer
    assert "Layers 0–2 are the encoder, 3–5 the decoder; each stack is scored" in result.warnings[0]


def test_a_decoder_layer_that_adds_nothing_is_the_most_removable(tokenizer):
    model = t5(tokenizer)
    block = model.decoder.block[1]
    with torch.no_grad():  # each sub-layer's write to the residual stream is zero: the layer passes its input on
        for linear in (block.layer[0].SelfAttention.o, block.layer[1].EncDecAttention.o,
                       block.layer[2].DenseReluDense.wo):
            linear.weight.zero_()
    for method in ("angular", "block_influence", "relative_magnitude"):
        result = prune.score(model, tokenizer, method, calibration=CAL, use_cache=False)
        assert result.best_block(1) == (4, 5), method
        assert result.block_scores[0, 4] == pytest.approx(0.0, abs=1e-3), method


def rebuilt_by_hand(model, removed: list[int]):
    """The cut another way: a fresh T5 of the kept counts, loaded with the kept blocks' weights renumbered and, where a
    stack's first block went, that block's relative position bias in the new first block."""
    state, spans = model.state_dict(), stack_spans(model)
    kept = {name: [i - start for i in range(start, end) if i not in removed] for name, start, end in spans}
    config = model.config.to_dict()
    config.update(num_layers=len(kept["encoder"]), num_decoder_layers=len(kept["decoder"]))
    fresh = transformers.AutoModelForSeq2SeqLM.from_config(transformers.T5Config(**config)).eval()
    weights = {k: v for k, v in state.items() if ".block." not in k}
    for name, indices in kept.items():
        for new, old in enumerate(indices):
            prefix = f"{name}.block.{old}."
            weights.update({f"{name}.block.{new}.{k[len(prefix):]}": v
                            for k, v in state.items() if k.startswith(prefix)})
        bias = f"{name}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"
        weights[bias] = state[bias]
    fresh.load_state_dict(weights, strict=True)
    return fresh


@pytest.mark.parametrize("removed", [[1], [3], [0, 4], [2, 3]])
def test_a_cut_of_t5_is_the_model_rebuilt_by_hand(tokenizer, removed, tmp_path):
    model = t5(tokenizer)
    before = {name: p.clone() for name, p in model.named_parameters()}
    cut = prune.remove_layers(model, removed)
    ids, targets = torch.randint(5, 100, (2, 12)), torch.randint(5, 100, (2, 7))
    with torch.no_grad():
        logits = cut(input_ids=ids, decoder_input_ids=targets).logits
        expected = rebuilt_by_hand(model, removed)(input_ids=ids, decoder_input_ids=targets).logits
    torch.testing.assert_close(logits, expected, atol=1e-6, rtol=0)
    counts = (3 - sum(i < 3 for i in removed), 3 - sum(i >= 3 for i in removed))
    assert (cut.config.num_layers, cut.config.num_decoder_layers) == counts
    assert (cut.encoder.config.num_layers, cut.decoder.config.num_layers) == counts
    assert cut.config.layercut_removed_layers == removed
    cut.save_pretrained(tmp_path)
    reloaded = transformers.AutoModelForSeq2SeqLM.from_pretrained(tmp_path).eval()
    with torch.no_grad():
        torch.testing.assert_close(reloaded(input_ids=ids, decoder_input_ids=targets).logits, logits, atol=1e-6, rtol=0)
    # the original keeps its layers, its flags and its weights
    assert (len(model.encoder.block), len(model.decoder.block), model.config.num_decoder_layers) == (3, 3, 3)
    assert [b.layer[0].SelfAttention.has_relative_attention_bias for b in model.decoder.block] == [True, False, False]
    assert all(torch.equal(p, before[name]) for name, p in model.named_parameters())


def test_a_cut_of_a_cut_counts_in_the_original_numbering(tokenizer):
    model = t5(tokenizer)
    twice = prune.remove_layers(prune.remove_layers(model, [0]), [2])  # then the decoder's first of what is left
    assert twice.config.layercut_removed_layers == [0, 3]
    ids, targets = torch.randint(5, 100, (2, 12)), torch.randint(5, 100, (2, 7))
    with torch.no_grad():
        torch.testing.assert_close(twice(input_ids=ids, decoder_input_ids=targets).logits,
                                   rebuilt_by_hand(model, [0, 3])(input_ids=ids, decoder_input_ids=targets).logits,
                                   atol=1e-6, rtol=0)


def test_a_cut_that_empties_a_stack_refuses_in_one_line(tokenizer):
    model = t5(tokenizer)
    with pytest.raises(InvalidCut, match="^Cutting layers 3…5 would remove every layer of the decoder; each stack "
                                         "keeps at least one.$"):
        prune.cut(model, 3, 6)
    with pytest.raises(InvalidCut, match="^Cutting layers 0…2 would remove every layer of the encoder"):
        prune.remove_layers(model, [0, 1, 2, 4])


def test_the_cli_cuts_t5_by_angular_distance_and_exports_the_cut(tokenizer, tmp_path, data_dir):
    from evaluation import cli

    folder, export = tmp_path / "t5", tmp_path / "export"
    model = t5(tokenizer)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    code = cli.main([str(a) for a in ("--model", folder, "--method", "angular", "--num_layers", 2, "--task",
                                      "cbt_style_cn", "--limit", 2, "--batch_size", 2, "--data_dir", data_dir,
                                      "--export_dir", export, "--output_folder", tmp_path / "out")])
    assert code == 0
    start, end = prune.score(model, tokenizer, "angular", use_cache=False).best_block(2)  # the default calibration
    assert end <= 3 or start >= 3  # inside one stack
    reloaded, _ = prune.load_model(str(export), device="cpu")
    assert reloaded.config.layercut_removed_layers == list(range(start, end))
    assert not (export / "mergekit.yml").exists() and not (export / "llama-quantize-prune-layers.txt").exists()
    assert "this is an encoder-decoder, so `mergekit.yml`" in (export / "README.md").read_text()
    ids, targets = torch.randint(5, 100, (2, 12)), torch.randint(5, 100, (2, 7))
    with torch.no_grad():
        torch.testing.assert_close(reloaded(input_ids=ids, decoder_input_ids=targets).logits,
                                   rebuilt_by_hand(model, list(range(start, end)))(
                                       input_ids=ids, decoder_input_ids=targets).logits, atol=1e-5, rtol=0)


def test_what_reads_next_tokens_refuses_a_t5_cut_in_one_line(tokenizer, tmp_path, data_dir, capsys):
    """The cut's feedback, the logit lens and the divergence read a causal LM's next tokens."""
    from evaluation import cli
    from ui.text import no_feedback
    from evaluation.core.pool import describe

    folder = tmp_path / "t5"
    t5(tokenizer).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    code = cli.main([str(a) for a in ("--model", folder, "--personalized", "--start_block", 4, "--end_block", 4,
                                      "--explain", "--data_dir", data_dir, "--output_folder", tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 2 and err.startswith("layercut-benchmark: error: The cut's next-token feedback (agreement, KL, "
                                        "perplexity) needs a causal (decoder-only) language model; 't5' is an "
                                        "encoder-decoder")
    assert no_feedback(describe(t5(tokenizer), "t5")) == ("No next-token feedback: t5 is an encoder-decoder. Compare "
                                                         "this cut on the cloze tasks (**Benchmarks**).")


def test_the_n_lowest_layers_of_t5_keep_a_layer_in_each_stack():
    """ShortGPT's rule (the N lowest layers anywhere) passes over a layer whose removal would empty its stack."""
    from prune.depth.result import ImportanceResult, blocks_from_layers

    scores = np.array([0.1, 0.2, 0.5, 0.6])
    result = ImportanceResult("block_influence", blocks_from_layers(scores, set()), "1 − cos", layer_scores=scores,
                              params={"stacks": [["encoder", 0, 2], ["decoder", 2, 4]]})
    assert result.best_layers(1) == [0] and result.best_layers(2) == [0, 2]  # layer 1 would empty the encoder
    with pytest.raises(InvalidCut, match="^Only 2 of 4 layers may be removed, not 3.$"):
        result.best_layers(3)
