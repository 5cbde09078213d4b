"""GGUF export on tiny real models: written, reloaded by transformers' GGUF loader, logits compared with the model
whose matrices are rounded through the same GGUF type (a known answer); metadata and refusals checked."""

import copy

import gguf
import pytest
import torch
import transformers
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from torch import nn
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

import prune
from conftest import TINY_CONFIGS, tiny_gemma, tiny_model, tiny_qwen2, with_random_norms
from evaluation.exports.gguf_out import (BELOW_Q8_0, GGUF_TYPES, OUTPUT_TYPE, gguf_refusal, llama3_rope_factors,
                                         pattern_break, write_gguf)
from evaluation.exports.gguf_tokenizer import PRE_TOKENIZERS
from prune.core.calibration import BUILTIN_TEXTS
from prune.core.errors import InvalidInput
from prune.core.factored import Factored
from prune.drop.sublayers import drop

IDS = torch.arange(3, 35).view(2, 16)  # [2, 16]: longer than the Gemma models' 4-token window
SENTENCES = ["(the quick brown fox) jumps over the lazy dog's tail.", "  Two spaces, digits 12345 and a tab\there!",
             "Ünïcödé — and <|endoftext|> in the middle."]
QUANTIZED = [t for t in GGUF_TYPES if t not in ("F16", "BF16")]


MODELS = {
    "llama": lambda: tiny_model("llama", 4),
    "mistral": lambda: tiny_model("mistral", 4),
    "qwen2": tiny_qwen2,
    "gemma2": lambda: tiny_gemma(transformers.Gemma2Config, 6),
    "gemma3": lambda: tiny_gemma(transformers.Gemma3TextConfig, 13),
}
ROUND_TRIPS = ([("llama", t) for t in GGUF_TYPES] + [("mistral", "F16")]
               + [(arch, t) for arch in ("qwen2", "gemma2", "gemma3") for t in ("F16", "Q8_0", "Q4_0")])


@pytest.fixture(scope="module")
def built():
    return {arch: make() for arch, make in MODELS.items()}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("gguf")


def _logits(model):
    with torch.no_grad():
        return model(input_ids=IDS).logits


def _reload(path):
    return AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32).eval()


def _through(array, qtype):
    """``array`` as the file gives it back: quantized to ``qtype`` (F16 where its rows do not split into blocks)."""
    try:
        packed = gguf.quants.quantize(array, qtype)
    except gguf.QuantError:
        qtype = gguf.GGMLQuantizationType.F16
        packed = gguf.quants.quantize(array, qtype)
    return gguf.quants.dequantize(packed, qtype)


def rounded(model, file_type: str):
    """A copy of ``model`` with every matrix rounded through ``file_type`` (the output layer through Q8_0 below it);
    vectors (norms, biases) stay F32."""
    twin = copy.deepcopy(model)
    qtype = gguf.GGMLQuantizationType[file_type]
    output = twin.get_output_embeddings().weight
    with torch.no_grad():
        for param in twin.parameters():
            if param.dim() == 2:
                kind = OUTPUT_TYPE if param is output and file_type in BELOW_Q8_0 else qtype
                param.copy_(torch.from_numpy(_through(param.numpy(), kind)))
    return twin


def _fields(path) -> dict:
    return {name: field.contents() for name, field in gguf.GGUFReader(path).fields.items()}


def _tensors(path) -> dict:
    return {t.name: t for t in gguf.GGUFReader(path).tensors}


# ---------------------------------------------------------------- round trips


@pytest.mark.parametrize("arch, file_type", ROUND_TRIPS)
def test_reloaded_gguf_gives_the_logits_of_the_model_rounded_to_its_type(built, folder, tiny_tokenizer, arch,
                                                                         file_type):
    model = built[arch]
    path = write_gguf(model, tiny_tokenizer, folder / f"{arch}-{file_type}.gguf", file_type)
    torch.testing.assert_close(_logits(_reload(path)), _logits(rounded(model, file_type)), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("file_type", QUANTIZED)
def test_a_quantized_file_holds_every_matrix_in_its_type_and_vectors_in_f32(built, folder, tiny_tokenizer, file_type):
    path = write_gguf(built["gemma3"], tiny_tokenizer, folder / f"types-{file_type}.gguf", file_type)
    kinds = {name: t.tensor_type.name for name, t in _tensors(path).items()}
    matrices = {name for name, t in _tensors(path).items() if len(t.shape) == 2}
    assert len(matrices) == 1 + 7 * 13 and "output.weight" not in matrices  # token_embd (tied), seven per layer
    assert {kinds[name] for name in matrices - {"token_embd.weight"}} == {file_type}
    assert kinds["token_embd.weight"] == ("Q8_0" if file_type in BELOW_Q8_0 else file_type)  # the output layer
    assert {kinds[name] for name in kinds if name not in matrices} == {"F32"}
    assert _fields(path)["general.file_type"] == gguf.LlamaFileType[f"MOSTLY_{file_type}"]


def test_q8_0_moves_the_logits_a_little_from_f16(built, folder, tiny_tokenizer):
    model = built["llama"]
    f16 = _logits(_reload(write_gguf(model, tiny_tokenizer, folder / "near-f16.gguf", "F16")))
    q8 = _logits(_reload(write_gguf(model, tiny_tokenizer, folder / "near-q8.gguf", "Q8_0")))
    gap = (q8 - f16).abs().max().item()
    assert 0 < gap < 0.05 * f16.abs().max().item()


def test_a_cut_model_is_written_with_its_own_layer_count_and_runs_as_cut(built, folder, tiny_tokenizer):
    cut = prune.cut(tiny_model("llama", 6), 1, 3)
    path = write_gguf(cut, tiny_tokenizer, folder / "cut.gguf", "F16")
    assert _fields(path)["llama.block_count"] == 4
    assert {name.split(".")[1] for name in _tensors(path) if name.startswith("blk.")} == {"0", "1", "2", "3"}
    torch.testing.assert_close(_logits(_reload(path)), _logits(rounded(cut, "F16")), rtol=1e-4, atol=1e-4)


def test_a_gemma3_cut_that_keeps_the_pattern_runs_as_cut(built, folder, tiny_tokenizer):
    cut = prune.cut(built["gemma3"], 6, 12)  # six layers: index mod 6 unchanged, layer 5 stays the full one
    assert cut.config.layer_types == ["full_attention" if i % 6 == 5 else "sliding_attention" for i in range(7)]
    path = write_gguf(cut, tiny_tokenizer, folder / "gemma3-cut.gguf", "Q8_0")
    assert _fields(path)["gemma3.block_count"] == 7
    torch.testing.assert_close(_logits(_reload(path)), _logits(rounded(cut, "Q8_0")), rtol=1e-4, atol=1e-4)


def test_torchao_weights_are_dequantized_then_written(folder, tiny_tokenizer):
    from torchao.quantization import Int8WeightOnlyConfig, quantize_

    model = tiny_model("llama", 2)
    quantize_(model.model.layers, Int8WeightOnlyConfig())
    assert type(model.model.layers[0].mlp.down_proj.weight) is not nn.Parameter
    assert gguf_refusal(model) is None
    path = write_gguf(model, tiny_tokenizer, folder / "torchao.gguf", "F16")
    torch.testing.assert_close(_logits(_reload(path)), _logits(model), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("bits", [8, 4])
def test_layercuts_packed_weights_are_dequantized_then_written(bits, folder, tiny_tokenizer):
    from prune.core.storage import dense
    from prune.quantize.step import Quantize

    model = Quantize.of(bits).apply(tiny_model("llama", 2))
    path = write_gguf(model, tiny_tokenizer, folder / f"int{bits}.gguf", "F16")
    reference = tiny_model("llama", 2)  # the dequantized weights (float32; the file rounds them to F16)
    for mine, theirs in zip(model.model.layers, reference.model.layers):
        for (_, module), (_, plain) in zip(mine.named_modules(), theirs.named_modules()):
            if isinstance(module, nn.Linear):
                plain.weight = nn.Parameter(dense(module.weight), requires_grad=False)
    torch.testing.assert_close(_logits(_reload(path)), _logits(reference), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("tied, head", [(True, False), (False, True)])
def test_an_int8_input_embedding_is_written_q8_0_beside_q4_0_layers(tied, head, folder, tiny_tokenizer):
    from conftest import tied_llama
    from prune.quantize.step import Quantize

    model = Quantize.of(4, head=head, embedding=True).apply(tied_llama(2) if tied else tiny_model("llama", 2))
    path = write_gguf(model, tiny_tokenizer, folder / f"emb-{tied}.gguf", "Q4_0")
    types = {t.name: t.tensor_type for t in gguf.GGUFReader(path).tensors}
    q8, q4 = gguf.GGMLQuantizationType.Q8_0, gguf.GGMLQuantizationType.Q4_0
    assert types["token_embd.weight"] == q8 and types["blk.0.ffn_down.weight"] == q4
    assert ("output.weight" not in types) if tied else types["output.weight"] == q8  # two int8 matrices: not tied
    plain = write_gguf(tiny_model("llama", 2), tiny_tokenizer, folder / "plain.gguf", "Q4_0")
    assert {t.name: t.tensor_type for t in gguf.GGUFReader(plain).tensors}["token_embd.weight"] == q4  # as before


# ---------------------------------------------------------------- metadata and tensors


def test_gemma2_metadata_and_norms_follow_the_converter(built, folder, tiny_tokenizer):
    model = built["gemma2"]
    path = write_gguf(model, tiny_tokenizer, folder / "gemma2-meta.gguf", "F16")
    fields, tensors = _fields(path), _tensors(path)
    assert fields["general.architecture"] == "gemma2"
    assert (fields["gemma2.attn_logit_softcapping"], fields["gemma2.final_logit_softcapping"]) == (50.0, 30.0)
    expected = {"block_count": 6, "embedding_length": 64, "feed_forward_length": 128, "context_length": 256,
                "attention.head_count": 2, "attention.head_count_kv": 1, "attention.key_length": 256,
                "attention.value_length": 256, "attention.sliding_window": 4}
    assert {key: fields[f"gemma2.{key}"] for key in expected} == expected
    assert "output.weight" not in tensors  # tied: llama.cpp reads token_embd
    norm = model.model.layers[0].input_layernorm.weight.detach().numpy()
    assert (tensors["blk.0.attn_norm.weight"].data == norm + 1).all()  # GemmaModel.modify_tensors


def test_gemma3_keeps_both_rope_bases_and_gemma_writes_its_norms_shifted(folder, tiny_tokenizer):
    gemma3 = tiny_gemma(transformers.Gemma3TextConfig, 2)
    fields = _fields(write_gguf(gemma3, tiny_tokenizer, folder / "gemma3-rope.gguf", "F16"))
    assert (fields["gemma3.rope.freq_base"], fields["gemma3.rope.freq_base_swa"]) == (1_000_000.0, 10_000.0)
    torch.manual_seed(0)
    gemma = with_random_norms(AutoModelForCausalLM.from_config(transformers.GemmaConfig(
        vocab_size=320, hidden_size=64, intermediate_size=128, num_attention_heads=2, num_key_value_heads=1,
        head_dim=32, num_hidden_layers=2, max_position_embeddings=256), dtype=torch.float32))
    tensors = _tensors(write_gguf(gemma, tiny_tokenizer, folder / "gemma.gguf", "F16"))
    assert (tensors["output_norm.weight"].data == gemma.model.norm.weight.detach().numpy() + 1).all()
    q = gemma.model.layers[1].self_attn.q_proj.weight.detach().numpy().astype("float16")
    assert (tensors["blk.1.attn_q.weight"].data == q).all()  # no Q/K permutation outside llama


def test_llama_q_rows_are_permuted_for_llama_cpp_rope_and_an_untied_head_is_written(built, folder, tiny_tokenizer):
    model = built["llama"]
    tensors = _tensors(write_gguf(model, tiny_tokenizer, folder / "llama-permute.gguf", "F16"))
    q = model.model.layers[0].self_attn.q_proj.weight.detach()  # [4 heads × 8 rows, 32]
    order = [head * 8 + row for head in range(4) for row in (0, 4, 1, 5, 2, 6, 3, 7)]  # halves interleaved
    written = torch.from_numpy(tensors["blk.0.attn_q.weight"].data.astype("float32"))
    assert torch.equal(written, q[order].half().float())
    assert "output.weight" in tensors


def test_llama3_rope_factors_match_transformers_and_go_in_rope_freqs(folder, tiny_tokenizer):
    rope = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
    config = transformers.LlamaConfig(**{**TINY_CONFIGS["llama"](2).to_dict(), "rope_parameters": rope,
                                         "hidden_size": 256, "num_attention_heads": 2, "head_dim": 128})
    scaled, _ = ROPE_INIT_FUNCTIONS["llama3"](config, "cpu")
    plain = 1.0 / (500000.0 ** (torch.arange(0, 128, 2).float() / 128))
    factors = llama3_rope_factors(config)
    torch.testing.assert_close(factors, plain / scaled, rtol=1e-5, atol=1e-5)
    assert factors.min() == 1 and factors.max() == 8  # both ends of the band occur
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    tensors = _tensors(write_gguf(model, tiny_tokenizer, folder / "llama3.gguf", "F16"))
    assert (tensors["rope_freqs.weight"].data == factors.numpy()).all()


def test_a_failed_write_leaves_nothing_and_a_finished_one_no_temp_file(built, tmp_path, tiny_tokenizer):
    with pytest.raises(InvalidInput, match="not one LayerCut writes"):
        write_gguf(built["llama"], tiny_tokenizer, tmp_path / "a.gguf", "Q6_K")
    with pytest.raises(InvalidInput, match="SentencePiece"):
        write_gguf(built["llama"], _tokenizer(models.BPE({"a": 0}, [], byte_fallback=True)), tmp_path / "a.gguf")
    assert list(tmp_path.iterdir()) == []
    write_gguf(built["llama"], tiny_tokenizer, tmp_path / "a.gguf")
    assert [p.name for p in tmp_path.iterdir()] == ["a.gguf"]


# ---------------------------------------------------------------- tokenizer


def _tokenizer(model):
    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer(model))


def test_the_bpe_tokenizer_reloads_from_the_gguf_with_the_same_ids(built, folder, tiny_tokenizer):
    path = write_gguf(built["llama"], tiny_tokenizer, folder / "tokenizer.gguf", "F16")
    back = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    for text in SENTENCES:
        assert back(text).input_ids == tiny_tokenizer(text).input_ids
    fields = _fields(path)
    assert (fields["tokenizer.ggml.model"], fields["tokenizer.ggml.pre"]) == ("gpt2", "gpt-2")
    assert fields["tokenizer.ggml.eos_token_id"] == tiny_tokenizer.eos_token_id
    assert fields["tokenizer.ggml.token_type"][tiny_tokenizer.eos_token_id] == gguf.TokenType.CONTROL


def split_bpe(split: str):
    """A byte-level BPE like the tiny one whose text is first cut by ``split`` (Llama 3's or Qwen2's regex)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(split), "isolated"),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=320, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    numbers = "(the) 1234 5678 'S 2024\n" * 1000  # merges only some splits allow: digit runs, "(the" after "\n"
    tok.train_from_iterator([BUILTIN_TEXTS[0].read_text(), numbers], trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>")


@pytest.mark.parametrize("split", [regex for regex in PRE_TOKENIZERS if regex])
def test_llama3_and_qwen2_splits_are_named_for_llama_cpp_and_reload_alike(built, folder, split):
    tokenizer = split_bpe(split)
    path = write_gguf(built["llama"], tokenizer, folder / f"split-{PRE_TOKENIZERS[split]}.gguf", "F16")
    assert _fields(path)["tokenizer.ggml.pre"] == PRE_TOKENIZERS[split]
    back = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    for text in SENTENCES:
        assert back(text).input_ids == tokenizer(text).input_ids


def test_a_gguf_tokenizer_is_copied_field_for_field(built, folder, tiny_tokenizer):
    source = write_gguf(built["llama"], tiny_tokenizer, folder / "source.gguf", "F16")
    copied = write_gguf(built["gemma2"], None, folder / "copied.gguf", "F16", tokenizer_gguf=str(source))
    original, again = gguf.GGUFReader(source).fields, gguf.GGUFReader(copied).fields
    names = [name for name in original if name.startswith("tokenizer.")]
    assert len(names) >= 6 and names == [name for name in again if name.startswith("tokenizer.")]
    for name in names:
        assert (again[name].types, again[name].contents()) == (original[name].types, original[name].contents())


def test_a_gguf_tokenizer_of_another_vocabulary_is_refused(folder, tiny_tokenizer):
    source = write_gguf(tiny_model("llama", 2), tiny_tokenizer, folder / "vocab320.gguf", "F16")
    config = TINY_CONFIGS["llama"](2)
    config.vocab_size = 400
    model = AutoModelForCausalLM.from_config(config)
    with pytest.raises(InvalidInput, match="has 320 tokens, not the model's 400"):
        write_gguf(model, None, folder / "other.gguf", tokenizer_gguf=str(source))


@pytest.mark.parametrize("model, words", [
    (models.BPE({"a": 0}, [], byte_fallback=True), "SentencePiece-style"),
    (models.Unigram([("a", 0.0)], 0, byte_fallback=False), "SentencePiece-style or Unigram"),
    (models.BPE({"a": 0}, []), "cannot name for llama.cpp"),  # no ByteLevel pre-tokenizer
])
def test_tokenizers_llama_cpp_would_split_differently_are_refused(built, tmp_path, model, words):
    with pytest.raises(InvalidInput, match=words):
        write_gguf(built["llama"], _tokenizer(model), tmp_path / "t.gguf")


# ---------------------------------------------------------------- pattern_break


def test_gemma3_cuts_keep_or_break_the_every_sixth_layer_rule(built, tmp_path):
    assert pattern_break(prune.cut(built["gemma3"], 6, 12).config) is None
    assert pattern_break(prune.cut(built["gemma3"], 0, 6).config) is None
    broken = prune.cut(built["gemma3"], 3, 5)  # old layer 5 (full) becomes layer 3, which llama.cpp slides
    assert pattern_break(broken.config) == (
        "llama.cpp derives Gemma 3's attention from the layer index (one layer in 6 full: 5, 11, …); "
        "layer 3 (full attention in this model) would run as sliding-window.")
    with pytest.raises(InvalidInput, match="layer 3 \\(full attention"):
        write_gguf(broken, None, tmp_path / "never-written.gguf")
    assert list(tmp_path.iterdir()) == []


def test_the_attention_llama_cpp_would_derive_for_a_refused_cut_changes_its_logits(built):
    broken = prune.cut(built["gemma3"], 3, 5)
    config = copy.deepcopy(broken.config)
    config.layer_types = ["full_attention" if i % 6 == 5 else "sliding_attention" for i in range(11)]
    derived = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    derived.load_state_dict(broken.state_dict())
    assert not torch.allclose(_logits(derived), _logits(broken), atol=1e-3)


def test_gemma2_cuts_keep_the_alternation_only_with_an_even_count(built):
    assert pattern_break(prune.cut(built["gemma2"], 2, 4).config) is None
    assert pattern_break(prune.cut(built["gemma2"], 1, 3).config) is None
    assert "layer 2 (full attention in this model) would run as sliding-window" in \
        pattern_break(prune.cut(built["gemma2"], 2, 3).config)
    assert "layer 1 (sliding-window in this model) would run as full attention" in \
        pattern_break(prune.cut(built["gemma2"], 1, 2).config)


def test_gemma2_attention_scale_follows_the_layer_count_in_llama_cpp():
    big = dict(hidden_size=4608, num_attention_heads=32, head_dim=128, query_pre_attn_scalar=144)  # 27B
    assert pattern_break(transformers.Gemma2Config(**big, num_hidden_layers=46)) is None
    line = pattern_break(transformers.Gemma2Config(**big, num_hidden_layers=40))
    assert "with 40 layers it would use 1/√128, not this model's 1/√144" in line


def test_sliding_windows_llama_cpp_ignores_are_refused_unless_as_long_as_the_context():
    assert pattern_break(TINY_CONFIGS["qwen2"](4)) == (
        "llama.cpp runs every Qwen2 layer with full attention; layer 2 uses a 16-token sliding window in this model.")
    assert pattern_break(TINY_CONFIGS["mistral"](4)) is None  # 4096-token window, 256-token context
    assert "layer 0 uses a 16-token" in pattern_break(transformers.MistralConfig(sliding_window=16,
                                                                                 max_position_embeddings=256))


# ---------------------------------------------------------------- gguf_refusal


def test_an_unsupported_architecture_is_refused_by_name():
    assert gguf_refusal(tiny_model("gpt2", 2)) == (
        "GGUF export supports Llama, Mistral, Qwen2, Gemma, Gemma 2 and Gemma 3 models; this is GPT2LMHeadModel.")


def test_layers_of_different_widths_are_refused():
    model = tiny_model("llama", 3)
    mlp = model.model.layers[1].mlp
    mlp.gate_proj, mlp.up_proj = nn.Linear(32, 16, bias=False), nn.Linear(32, 16, bias=False)
    mlp.down_proj = nn.Linear(16, 32, bias=False)
    assert gguf_refusal(model) == ("llama.cpp needs one head count and MLP width for every layer; "
                                   "layer 1's mlp.gate_proj is [16, 32], layer 0's [64, 32].")


def test_dropped_blocks_and_low_rank_factors_are_refused():
    model = tiny_model("llama", 3)
    assert gguf_refusal(model) is None
    assert gguf_refusal(drop(model, attention=[1])) == (
        "Layer 1's self_attn is dropped, but llama.cpp needs attention and an MLP in every layer.")
    model.model.layers[2].mlp.down_proj = Factored(torch.randn(8, 64), torch.randn(32, 8), None)
    assert gguf_refusal(model) == ("Layer 2's mlp.down_proj is LayerCut's low-rank factors, but llama.cpp needs one "
                                   "dense matrix per projection.")


def test_gemma2_with_its_own_lm_head_is_refused(built):
    untied = tiny_gemma(transformers.Gemma2Config, 2, tie_word_embeddings=False)
    assert "reads its output layer from the token embeddings" in gguf_refusal(untied)
    assert gguf_refusal(built["gemma2"]) is None


# ---------------------------------------------------------------- the embedded default model


@pytest.mark.slow
def test_the_cut_default_model_round_trips_with_its_own_gguf_tokenizer(default_model, tmp_path):
    model, tokenizer = default_model
    cut = prune.cut(model, 10, 16)
    path = write_gguf(cut, None, tmp_path / "smollm2-cut.gguf", "Q8_0", tokenizer_gguf=model.layercut_gguf)
    assert _fields(path)["llama.block_count"] == 24
    torch.testing.assert_close(_logits(_reload(path)), _logits(rounded(cut, "Q8_0")), rtol=1e-3, atol=1e-3)
    back = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    for text in SENTENCES:
        assert back(text).input_ids == tokenizer(text).input_ids
