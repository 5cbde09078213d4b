"""GGUF both ways through LayerCut itself: a ``.gguf`` loads like any model (converted once, cached), is cut, and is
exported with a GGUF beside the folder that transformers reads back; a GGUF of an architecture transformers cannot
read, a missing file and a cut llama.cpp would run wrong are each one line."""

from __future__ import annotations

import gguf
import pytest
import torch
import transformers
from transformers import AutoModelForCausalLM

import prune
from evaluation.exports import folder as exports
from evaluation.exports.gguf_out import write_gguf
from evaluation.exports.texts import LLAMA_FILE
from prune.core import gguf_in
from prune.core.errors import InvalidInput, LayerCutError, ModelNotFound, UnsupportedArchitecture
from prune.core.recipe import Recipe
from prune.quantize.step import Quantize
from ui import inputs

from conftest import tiny_gemma, tiny_model, tiny_qwen2


IDS = torch.arange(3, 35).view(2, 16)
MODELS = {"llama": lambda: tiny_model("llama", 4), "qwen2": tiny_qwen2,
          "gemma3": lambda: tiny_gemma(transformers.Gemma3TextConfig, 13)}
CUTS = {"llama": (1, 3), "qwen2": (1, 3), "gemma3": (6, 12)}  # Gemma 3's cut keeps its one-in-six full layers


def logits(model):
    with torch.no_grad():
        return model(input_ids=IDS).logits


@pytest.fixture(scope="module")
def ggufs(tmp_path_factory, tiny_tokenizer):
    """Each tiny model written as an F16 GGUF with the tiny tokenizer: what a user downloads."""
    folder = tmp_path_factory.mktemp("gguf-in")
    return {arch: write_gguf(make(), tiny_tokenizer, folder / f"{arch}.F16.gguf", "F16")
            for arch, make in MODELS.items()}


@pytest.mark.parametrize("arch", MODELS)
def test_a_gguf_path_loads_once_converted_and_cut_exports_a_gguf_transformers_reads_back(arch, ggufs, tmp_path,
                                                                                        monkeypatch):
    path = ggufs[arch]
    model, tokenizer = prune.load_model(str(path), device="cpu")
    reference = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    assert torch.equal(logits(model), logits(reference)) and model.layercut_gguf == path
    monkeypatch.setattr(gguf_in, "convert", lambda *a, **k: pytest.fail("converted twice"))
    again, _ = prune.load_model(str(path), device="cpu")  # from the cached folder
    assert torch.equal(logits(again), logits(model))

    start, end = CUTS[arch]
    recipe = Recipe.block(model.config.num_hidden_layers, start, end)
    cut = recipe.apply(model)
    target = exports.export(cut, tokenizer, recipe, base_name=str(path), num_layers=model.config.num_hidden_layers,
                            target=tmp_path / "cut", gguf="Q8_0", tokenizer_gguf=model.layercut_gguf)
    name = "cut.Q8_0.gguf"
    fields = gguf.GGUFReader(target / name).fields
    arch_name = bytes(fields["general.architecture"].parts[-1]).decode()
    assert int(fields[f"{arch_name}.block_count"].parts[-1][0]) == cut.config.num_hidden_layers
    back = AutoModelForCausalLM.from_pretrained(target, gguf_file=name, dtype=torch.float32)
    folder = AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32)
    assert torch.equal(logits(folder), logits(cut))
    difference = (logits(back) - logits(folder)).abs().max()
    assert 0 < difference < 0.05 * logits(folder).abs().max()  # Q8_0: rounded, close
    assert f"`{name}` holds this model as one GGUF file" in (target / exports.CARD).read_text()


def test_a_gemma3_cut_that_breaks_its_pattern_gets_no_gguf_and_no_prune_layers_command(ggufs, tiny_tokenizer,
                                                                                     tmp_path):
    model = tiny_gemma(transformers.Gemma3TextConfig, 13)
    recipe = Recipe.block(13, 2, 5)  # layer 5 (full) becomes layer 2, which llama.cpp would run sliding
    cut = recipe.apply(model)
    with pytest.raises(InvalidInput, match="No GGUF for this model: .*would run as sliding-window") as err:
        exports.export(cut, tiny_tokenizer, recipe, base_name="tiny-gemma3", num_layers=13, target=tmp_path / "a",
                       gguf="F16")
    assert "\n" not in str(err.value) and not (tmp_path / "a").exists()
    target = exports.export(cut, tiny_tokenizer, recipe, base_name="tiny-gemma3", num_layers=13, target=tmp_path / "b")
    assert not (target / LLAMA_FILE).exists()
    assert "llama.cpp: no `--prune-layers` command is written: " in (target / exports.CARD).read_text()


def test_a_gguf_transformers_cannot_read_a_missing_one_and_a_hub_name_are_each_one_line(tmp_path, monkeypatch):
    strange = tmp_path / "strange.gguf"
    writer = gguf.GGUFWriter(str(strange), "strangearch")
    writer.add_block_count(2)
    writer.add_tensor("token_embd.weight", torch.zeros(4, 4).numpy())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(UnsupportedArchitecture, match="cannot read GGUF files of the strangearch architecture") as err:
        prune.load_model(str(strange), device="cpu")
    assert "\n" not in str(err.value) and "llama" in str(err.value)
    with pytest.raises(ModelNotFound, match="neither an existing .gguf file nor a Hub GGUF"):
        prune.load_model(str(tmp_path / "absent.gguf"))
    found = gguf_in.gguf_file("someone/some-model-GGUF/model.Q4_K_M.gguf")
    assert found == gguf_in.GgufFile("someone/some-model-GGUF", "model.Q4_K_M.gguf", hub=True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelNotFound, match="'model.Q4_K_M.gguf' was not found on the Hugging Face Hub"):
        prune.load_model("someone/some-model-GGUF/model.Q4_K_M.gguf")


def test_a_shared_server_takes_a_hub_gguf_by_name_but_no_gguf_path_of_its_disk(tmp_path):
    policy = inputs.Policy(shared=True)
    assert inputs.model_spec("someone/repo-GGUF/model.Q8_0.gguf", None, False, None, policy).name == \
        "someone/repo-GGUF/model.Q8_0.gguf"
    for name in (str(tmp_path / "x.gguf"), "../x.gguf", "a/b/../c.gguf"):
        with pytest.raises(ModelNotFound, match="is not a model this server can load"):
            inputs.model_spec(name, None, False, None, policy)


def test_a_model_read_from_disk_layer_by_layer_gets_no_gguf_and_no_quantization_in_one_line(tiny_folder,
                                                                                             tiny_tokenizer):
    streamed, _ = prune.load_model(str(tiny_folder), device="cpu", budget="1KiB")
    with pytest.raises(InvalidInput, match="read from disk layer by layer") as err:
        exports.check_gguf(streamed, tiny_tokenizer, "F16", "x")
    with pytest.raises(LayerCutError) as refused:
        Recipe((Quantize.of(8),)).apply(streamed)
    assert "\n" not in str(err.value) and "\n" not in str(refused.value)
