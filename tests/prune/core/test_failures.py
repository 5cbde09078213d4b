"""Failures inside a job become one-line user messages: out of memory, broken model folders."""

from __future__ import annotations

import shutil
import traceback
from pathlib import Path

import pytest
import torch

import prune
import prune.core.loading
from prune.core.errors import BrokenModel, InvalidCut, LayerCutError, OutOfMemory
from prune.core.failures import as_user_errors, user_error

from conftest import tiny_model

# The messages torch really raises (alloc_cpu.cpp; CUDACachingAllocator.cpp; MapAllocator.cpp).
CPU_OOM = ("[enforce fail at alloc_cpu.cpp:121] data. DefaultCPUAllocator: can't allocate memory: "
           "you tried to allocate 17179869184 bytes. Error code 12 (Cannot allocate memory)")
CUDA_OOM = ("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which 1.06 GiB "
            "is free. Of the allocated memory 75.3 GiB is allocated by PyTorch.")
MMAP = "unable to mmap 268435456 bytes from file </models/x/model.safetensors>: No such device (19)"


def assert_one_line_without_chain(err: BaseException) -> None:
    """What the user sees is the message alone: one line, and no chained traceback of the original failure."""
    assert isinstance(err, LayerCutError)
    assert str(err) and "\n" not in str(err)
    assert err.__cause__ is None and err.__suppress_context__
    assert "During handling of the above exception" not in "".join(traceback.format_exception(err))


def test_cpu_out_of_memory_in_a_job_is_one_line(tiny_tokenizer, monkeypatch):
    model = tiny_model("llama", layers=2)
    layer_class = type(prune.core.architectures.decoder_layers(model)[0])

    def allocation_fails(self, *args, **kwargs):
        raise RuntimeError(CPU_OOM)

    monkeypatch.setattr(layer_class, "forward", allocation_fails)
    with pytest.raises(OutOfMemory) as caught, as_user_errors("the Taylor+ analysis"):
        prune.score(model, tiny_tokenizer, "taylor", use_cache=False)
    assert_one_line_without_chain(caught.value)
    assert str(caught.value).startswith("Out of memory during the Taylor+ analysis (it tried to allocate 16.0 GiB).")
    assert "smaller model" in str(caught.value)


def test_out_of_memory_while_loading_is_one_line(tiny_folder, monkeypatch):
    def allocation_fails(*args, **kwargs):
        raise RuntimeError(CPU_OOM)

    monkeypatch.setattr(prune.core.loading.AutoModelForCausalLM, "from_pretrained", allocation_fails)
    with pytest.raises(OutOfMemory) as caught:
        prune.load_model(tiny_folder)
    assert_one_line_without_chain(caught.value)
    assert f"during the load of '{tiny_folder}'" in str(caught.value)


def test_a_folder_with_only_config_json_is_a_broken_model(tiny_folder, tmp_path):
    folder = tmp_path / "only-config"
    folder.mkdir()
    shutil.copy(Path(tiny_folder) / "config.json", folder)
    with pytest.raises(BrokenModel) as caught:
        prune.load_model(str(folder))
    assert_one_line_without_chain(caught.value)
    assert "no usable tokenizer" in str(caught.value) and str(folder) in str(caught.value)


@pytest.mark.parametrize("keep", [4, 0.5], ids=["header-cut", "data-cut"])
def test_a_truncated_safetensors_file_is_a_broken_model(tiny_folder, tmp_path, keep):
    folder = tmp_path / "truncated"
    shutil.copytree(tiny_folder, folder)
    weights = folder / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: keep if isinstance(keep, int) else int(len(data) * keep)])
    with pytest.raises(BrokenModel) as caught:
        prune.load_model(str(folder))
    assert_one_line_without_chain(caught.value)
    assert "weight file turned out damaged or incomplete" in str(caught.value)


def test_a_folder_without_weights_is_a_broken_model(tiny_folder, tmp_path):
    folder = tmp_path / "no-weights"
    shutil.copytree(tiny_folder, folder)
    (folder / "model.safetensors").unlink()
    with pytest.raises(BrokenModel, match="no weight file was found") as caught:
        prune.load_model(str(folder))
    assert_one_line_without_chain(caught.value)


@pytest.mark.parametrize("err, kind, words", [
    (torch.OutOfMemoryError(CUDA_OOM), OutOfMemory, "(it tried to allocate 2.00 GiB)"),
    (MemoryError(), OutOfMemory, "Out of memory during the export."),
    (RuntimeError(MMAP), BrokenModel, "could not be mapped into memory (unable to mmap 268435456 bytes"),
    (RuntimeError(MMAP.replace("No such device (19)", "Cannot allocate memory (12)")), OutOfMemory, "Out of memory"),
])
def test_known_failures_map_to_their_message(err, kind, words):
    converted = user_error(err, "the export")
    assert isinstance(converted, kind) and words in str(converted) and "\n" not in str(converted)


def test_unknown_failures_and_user_errors_pass_through_unchanged():
    bug = ValueError("a real bug\nwith details")
    assert user_error(bug, "x") is None
    with pytest.raises(ValueError) as caught, as_user_errors("x"):
        raise bug
    assert caught.value is bug
    mine = InvalidCut("A block must have 1…3 layers, not 5.")
    with pytest.raises(InvalidCut) as caught, as_user_errors("x"):
        raise mine
    assert caught.value is mine


def test_a_job_turns_out_of_memory_into_one_line():
    from evaluation.core.jobs import JobRunner

    with pytest.raises(OutOfMemory) as caught, JobRunner("cpu").run("the memory measurement"):
        raise RuntimeError(CPU_OOM)
    assert_one_line_without_chain(caught.value)
    assert str(caught.value).startswith("Out of memory during the memory measurement (it tried to allocate 16.0 GiB).")
