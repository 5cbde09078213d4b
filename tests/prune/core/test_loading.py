"""Loading: the embedded default offline, local folders, and clear errors for bad input."""

from __future__ import annotations

import json

import pytest
import torch
import transformers

import prune
from prune.core.calibration import Calibration, load_text, token_windows
from prune.core.errors import InvalidInput, ModelNotFound, ModelTooLarge, UnsupportedArchitecture

from conftest import tiny_model


def test_default_model_is_the_embedded_smollm2_and_answers(default_model):
    model, tokenizer = default_model
    assert type(model).__name__ == "LlamaForCausalLM"
    assert model.config.num_hidden_layers == 30 and model.config.hidden_size == 576
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    assert model.dtype == torch.float32 and model.layercut_name == prune.DEFAULT_MODEL
    assert getattr(model, "hf_quantizer", None) is None  # a plain checkpoint, not a GGUF-quantized one
    assert tokenizer.chat_template, "the chat template must survive the GGUF conversion"
    ids = tokenizer.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                        add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.no_grad():
        out = model.generate(**ids, max_new_tokens=12, do_sample=False)
    answer = tokenizer.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)
    assert answer == "The capital of France is Paris."


def test_default_checkpoint_is_cached_safetensors(default_model):
    from prune.core.loading import default_checkpoint
    from prune.core.paths import cache_root

    folder = default_checkpoint()
    assert folder.startswith(str(cache_root()))
    files = {p.name for p in __import__("pathlib").Path(folder).iterdir()}
    assert "model.safetensors" in files and "config.json" in files and not any(f.endswith(".bin") for f in files)
    assert "quantization_config" not in json.loads((__import__("pathlib").Path(folder) / "config.json").read_text())


def test_local_folder_loads_like_the_hub(tmp_path, tiny_tokenizer):
    model = tiny_model("qwen2", layers=3)
    model.save_pretrained(tmp_path)
    tiny_tokenizer.save_pretrained(tmp_path)
    loaded, tokenizer = prune.load_model(str(tmp_path))
    assert loaded.config.model_type == "qwen2" and loaded.dtype == torch.float32 and not loaded.training
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        torch.testing.assert_close(loaded(input_ids=ids).logits, model(input_ids=ids).logits)
    assert tokenizer.pad_token is not None


def test_unknown_model_id_offline_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelNotFound, match="not found on this machine, and the Hugging Face Hub cannot be reached"):
        prune.load_model("no-such-org/no-such-model-xyz")


@pytest.mark.parametrize("bad", ["../../no-such-dir", "a/b/c", "rm -rf /", "xxx/../y", "~nobody-here/.ssh"])
def test_path_tricks_are_refused(bad):
    with pytest.raises(ModelNotFound, match="neither an existing folder nor a valid"):
        prune.load_model(bad)


def test_a_folder_without_a_model_is_refused():
    with pytest.raises(ModelNotFound, match="not a model folder"):
        prune.load_model("/etc")


def test_unsupported_architecture_fails_before_loading_weights(tmp_path):
    transformers.ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4).save_pretrained(tmp_path)
    with pytest.raises(UnsupportedArchitecture, match="transformers has none of model type 'vit'"):
        prune.load_model(str(tmp_path))


def test_too_big_for_memory_without_safetensors_is_refused_before_allocating(tmp_path, monkeypatch):
    model = tiny_model("llama", layers=2)
    model.config.save_pretrained(tmp_path)
    torch.save(model.state_dict(), tmp_path / "pytorch_model.bin")  # transformers 5 saves safetensors only
    monkeypatch.setattr("prune.core.loading.available_memory_bytes", lambda device: 1000)
    with pytest.raises(ModelTooLarge, match="GiB are free for them .* no .safetensors files"):
        prune.load_model(str(tmp_path))


def test_remote_code_is_off_by_default(tmp_path):
    config = json.loads(transformers.LlamaConfig(num_hidden_layers=1).to_json_string())
    config.update(model_type="custom-thing", auto_map={"AutoConfig": "custom.CustomConfig"})
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "custom.py").write_text("raise SystemExit('remote code must not run')\n")
    with pytest.raises(ModelNotFound, match="trust_remote_code|custom-thing|Cannot load"):
        prune.load_model(str(tmp_path))


def test_calibration_is_deterministic_and_offline(tiny_tokenizer, tmp_path):
    first = token_windows(tiny_tokenizer, Calibration(n_samples=4, seq_len=32))
    assert first.shape == (4, 32)
    assert torch.equal(first, token_windows(tiny_tokenizer, Calibration(n_samples=4, seq_len=32)))
    text_file = tmp_path / "cal.txt"
    text_file.write_text("hello world " * 50)
    from_file = token_windows(tiny_tokenizer, Calibration(source="file", path=str(text_file), n_samples=2, seq_len=8))
    from_text = token_windows(tiny_tokenizer,
                              Calibration(source="text", text="hello world " * 50, n_samples=2, seq_len=8))
    assert torch.equal(from_file, from_text)
    assert Calibration().key() != Calibration(n_samples=3).key()


def test_wikitext_validation_calibration_comes_from_the_data_folder():
    text = load_text(Calibration(source="wikitext2"))
    assert text.lstrip().startswith("= Homarus gammarus =")


@pytest.mark.parametrize("cal, message", [
    (Calibration(source="text", text="   "), "empty"),
    (Calibration(source="file", path="/no/such/file.txt"), "does not exist"),
    (Calibration(source="nope"), "Unknown calibration source"),
    (Calibration(source="hub", dataset="wikitext:wikitext-2-raw-v1:validation:text"), "needs the network"),
])
def test_bad_calibration_is_a_clear_error(cal, message, tiny_tokenizer):
    with pytest.raises(InvalidInput, match=message):
        token_windows(tiny_tokenizer, cal)


def test_an_unreachable_hub_is_noticed_at_once(monkeypatch):
    """No network (a talk's Wi-Fi): go to the local cache now instead of retrying for ~20 s."""
    from huggingface_hub import constants

    from prune.core.loading import hub_reachable

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", "https://hub.layercut.invalid")  # .invalid never resolves
    assert hub_reachable() is False
    with pytest.raises(ModelNotFound, match="Hub cannot be reached from this server"):
        prune.load_model("no-such-org/no-such-model-xyz")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert hub_reachable() is False
