"""The computed checkpoint size equals what save_pretrained really writes, file by file."""

from __future__ import annotations

from pathlib import Path

import pytest
import safetensors.torch
import torch
import transformers

import prune
from evaluation.measure.memory import checkpoint_bytes, checkpoint_files, folder_bytes, safetensors_bytes

from conftest import tied_llama, tiny_model


MODELS = {
    "llama": lambda: tiny_model("llama"),
    "llama-tied": tied_llama,
    "gpt2": lambda: tiny_model("gpt2"),
    "opt": lambda: tiny_model("opt"),
    "gpt_neox": lambda: tiny_model("gpt_neox"),
    "llama-tied-cut-1-3": lambda: prune.cut(tied_llama(5), 1, 3),
    "llama-bfloat16": lambda: tiny_model("llama").to(torch.bfloat16),
}


def saved_files(model, folder: Path, **options) -> dict[str, int]:
    model.save_pretrained(folder, **options)
    return {p.name: p.stat().st_size for p in folder.iterdir()}


@pytest.mark.parametrize("name", MODELS)
def test_computed_size_equals_the_saved_folder(name, tmp_path):
    model = MODELS[name]()
    computed = checkpoint_files(model)
    assert computed == saved_files(model, tmp_path)
    assert checkpoint_bytes(model) == folder_bytes(tmp_path)
    assert set(computed) >= {"model.safetensors", "config.json"}


def test_sharded_checkpoint_and_its_index(tmp_path):
    model = tiny_model("llama", layers=3)
    computed = checkpoint_files(model, max_shard_size="40KB")
    assert "model.safetensors.index.json" in computed and len(computed) > 4
    assert computed == saved_files(model, tmp_path, max_shard_size="40KB")


def test_safetensors_header_order_and_padding_match_the_library():
    """Several dtypes, a scalar and unsorted names: safetensors orders by its dtype enum, then name."""
    tensors = {
        "z.weight": torch.zeros(3, 5, dtype=torch.float32), "a.bias": torch.zeros(7, dtype=torch.bfloat16),
        "m.scale": torch.zeros((), dtype=torch.float64), "b.mask": torch.zeros(4, dtype=torch.bool),
        "c.index": torch.zeros(2, 2, dtype=torch.int64), "d.f8": torch.zeros(9, dtype=torch.float8_e4m3fn),
        "e.half": torch.zeros(1000, dtype=torch.float16), "y.u8": torch.zeros(11, dtype=torch.uint8),
    }
    for metadata in (None, {"format": "pt"}):
        assert safetensors_bytes(tensors, metadata) == len(safetensors.torch.save(tensors, metadata=metadata))
    for dtype in (torch.float32, torch.bfloat16):  # offsets with more digits change the header length
        big = {f"layer.{i}": torch.zeros(10 ** (i % 6), dtype=dtype) for i in range(13)}
        assert safetensors_bytes(big, {"format": "pt"}) == len(safetensors.torch.save(big, metadata={"format": "pt"}))


def test_nothing_is_written(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("checkpoint_bytes wrote a file")

    monkeypatch.setattr(safetensors.torch, "save_file", refuse)
    monkeypatch.setattr(transformers.PretrainedConfig, "to_json_file", refuse)
    model = tiny_model("gpt2")
    assert checkpoint_bytes(model) > 4 * sum(p.numel() for p in model.parameters())
