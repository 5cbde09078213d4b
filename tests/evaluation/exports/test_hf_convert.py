"""GGUF for the architectures LayerCut's own writer does not write — mixtures of experts and hybrids — by llama.cpp's
own converter (unpacked by setup.sh from llama-cpp-python's source): tiny random models of each type with the
default model's tokenizer (one the converter knows), cut or quantized, converted, run by the real llama.cpp in a child
process with LayerCut's logits, their expert tensors as llama.cpp's ``ffn_*_exps``, their decoded bytes counted k of
E experts; what the converter or llama.cpp cannot take is one line."""

from __future__ import annotations

import math

import gguf
import numpy as np
import pytest
import torch

import prune
from evaluation.core.pool import ModelSpec
from evaluation.engines import llama_cpp
from evaluation.exports import gguf_file, hf_convert
from evaluation.serving.backend import Backend
from evaluation.serving.engine import NOTE
from llama_helpers import llama_logits, needs_llama_type
from prune.core.errors import InvalidInput
from tiny_architectures import tiny

TEXT = "The quick brown fox jumps over the lazy dog because it was late"


@pytest.fixture(scope="module")
def tokenizer(default_model):
    return default_model[1]


def tiny_with(model_type: str, tokenizer):
    """A tiny random ``model_type`` whose vocabulary is the default model's (the converter knows its tokenizer)."""
    return tiny(model_type, vocab_size=len(tokenizer))


def test_the_converter_is_installed_beside_the_binding():
    assert hf_convert.home() is not None and hf_convert.why_not() is None  # setup.sh unpacks it


@pytest.mark.parametrize("model_type, arch", [("gpt_oss", "gpt-oss"),  # transposed, biased experts (Qwen3-MoE below)
                                              ("granitemoehybrid", "granitehybrid")])  # state space, attention, experts
def test_a_cut_mixture_of_experts_or_hybrid_is_converted_and_llama_cpp_computes_its_logits(model_type, arch, tokenizer,
                                                                                         tmp_path):
    needs_llama_type("F16")
    cut = prune.cut(tiny_with(model_type, tokenizer), 1, 3)  # two layers of four removed: patterns kept
    written = gguf_file.write(cut, tokenizer, tmp_path / "cut.gguf", "F16")
    assert written.quantizer == gguf_file.CONVERTER and "convert_hf_to_gguf.py" in written.note()
    reader = gguf.GGUFReader(written.path)
    assert str(bytes(reader.fields["general.architecture"].parts[-1]), "utf-8") == arch
    assert int(reader.fields[f"{arch}.block_count"].parts[-1][0]) == 2
    experts = [t for t in reader.tensors if "_exps." in t.name]
    assert {t.name.split(".")[1] for t in experts} == {"0", "1"} and all(t.shape[-1] == 4 for t in experts)
    ids = tokenizer(TEXT)["input_ids"]
    theirs = llama_logits(written.path, ids)
    with torch.no_grad():
        ours = cut(torch.tensor([ids])).logits[0].double().numpy()
    assert np.abs(theirs - ours).max() <= 0.05 * np.abs(ours).max()  # F16 weights against float32
    assert (theirs.argmax(-1) == ours.argmax(-1)).mean() >= 0.8


def test_an_expert_pruned_mixture_of_experts_is_converted_with_its_kept_experts_and_llama_cpp_computes_its_logits(
        tokenizer, tmp_path):
    needs_llama_type("F16")
    pruned = prune.ExpertPrune.of("reap", 0.5).apply(tiny_with("qwen3_moe", tokenizer), tokenizer)  # 2 of 4 kept
    written = gguf_file.write(pruned, tokenizer, tmp_path / "pruned.gguf", "F16")
    reader = gguf.GGUFReader(written.path)
    assert int(reader.fields["qwen3moe.expert_count"].parts[-1][0]) == 2
    assert all(t.shape[-1] == 2 for t in reader.tensors if "_exps." in t.name)
    ids = tokenizer(TEXT)["input_ids"]
    theirs = llama_logits(written.path, ids)
    with torch.no_grad():
        ours = pruned(torch.tensor([ids])).logits[0].double().numpy()
    assert np.abs(theirs - ours).max() <= 0.05 * np.abs(ours).max()


def test_int8_experts_become_q8_0_expert_tensors_and_a_token_reads_k_of_e(tokenizer, tmp_path):
    needs_llama_type("Q8_0")
    column = prune.Quantize.of(8).apply(tiny_with("qwen3_moe", tokenizer))  # 4 experts, 2 a token
    assert llama_cpp.column_type(column) == "Q8_0"  # an int4 column's Q4_0: llama.cpp's quantizer on the F16
    path = gguf_file.write(column, tokenizer, tmp_path / "int8.gguf", "Q8_0").path
    reader = gguf.GGUFReader(path)
    experts = [t for t in reader.tensors if "_exps." in t.name]
    assert experts and {t.tensor_type.name for t in experts} == {"Q8_0"}
    everything = sum(int(t.n_bytes) for t in reader.tensors)
    routed = sum(int(t.n_bytes) for t in experts)
    embedding = next(t for t in reader.tensors if t.name == "token_embd.weight")
    unread = int(embedding.n_bytes) - int(embedding.n_bytes) // int(embedding.shape[-1])  # all but one row
    assert llama_cpp.decode_bytes(path, 0) == everything - routed // 2 - unread  # 2 of the 4 experts a token
    assert np.isfinite(llama_logits(path, tokenizer(TEXT)["input_ids"])).all()


def test_what_the_converter_or_llama_cpp_cannot_take_is_one_line(tokenizer, tmp_path):
    odd = prune.cut(tiny_with("gpt_oss", tokenizer), 1, 2)  # sliding and full attention alternate: one layer removed
    with pytest.raises(InvalidInput, match=r"^llama\.cpp derives gpt-oss's attention from the layer index"):
        gguf_file.write(odd, tokenizer, tmp_path / "odd.gguf", "F16")
    with pytest.raises(InvalidInput, match=r"^llama\.cpp's converter cannot convert this model: AssertionError \("):
        gguf_file.write(tiny_with("qwen3_next", tokenizer), tokenizer, tmp_path / "next.gguf", "F16")
    dropped = prune.SubLayerDrop.of(4, mlp=[1]).apply(tiny_with("qwen3_moe", tokenizer))
    assert gguf_file.refusal(dropped) == ("llama.cpp's converter reads standard layers: dropped blocks and low-rank "
                                          "factors have no GGUF form.")
    assert not list(tmp_path.iterdir())  # nothing half-written is left


def test_the_engine_times_a_mixture_of_experts_in_llama_cpp_beside_layercut(tokenizer, tmp_path):
    needs_llama_type("F16")
    tiny_with("qwen3_moe", tokenizer).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    found = Backend(device="cpu", data_dir="").measure.speed(
        ModelSpec(str(tmp_path)), {}, engine=llama_cpp.LLAMA_CPP, batch_sizes=(1,), prompt_len=8, new_tokens=(4,),
        repeats=1)
    theirs = [m for m in found if m.name == "decode latency per token (batch 1, 4 new) (llama.cpp)"]
    ours = [m for m in found if m.name == "decode latency per token (batch 1, 4 new)"]
    assert len(theirs) == len(ours) == 1 and theirs[0].model == "original"
    assert theirs[0].value > 0 and not math.isnan(theirs[0].value) and NOTE not in theirs[0].details
    assert theirs[0].details["gguf_type"] == "F16" and theirs[0].details["bytes_per_token"] > 0
