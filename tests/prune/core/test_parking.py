"""Parking a model off its device and bringing it back, in place: the same numbers, and the memory handed back."""

from __future__ import annotations

import pytest
import torch

from prune.core.calibration import Calibration
from prune.core.offload import is_offloaded, resident_bytes
from prune.core.parking import (bring, bring_from_files, in_files, park, park_in_files, placed_bytes, tensors,
                                waiting_bytes, parked_bytes)
from prune.core.recipe import Recipe
from prune.core.surgery import cut
from prune.sparsity.step import Sparsify

from conftest import tiny_model

CPU = torch.device("cpu")
IDS = torch.randint(0, 320, (2, 24), generator=torch.Generator().manual_seed(0))


def logits(model):
    with torch.no_grad():
        return model(input_ids=IDS).logits


@pytest.fixture(params=["llama", "gemma2", "gpt_neox"])
def model(request, tmp_path, monkeypatch):
    monkeypatch.setenv("LAYERCUT_CACHE", str(tmp_path))
    return tiny_model(request.param, 4).eval()


def test_a_parked_model_waits_in_a_mapped_file_and_it_and_its_cuts_compute_the_same(model, tmp_path):
    expected, view = logits(model), cut(model, 1, 3)
    expected_cut = logits(view)
    objects, size = [id(t) for t in tensors(model)], parked_bytes(model)
    anonymous = {t.data_ptr() for t in tensors(model)}
    stored = park(model, CPU)
    assert stored.mapped is not None and [id(t) for t in tensors(model)] == objects  # in place: same objects
    files = list((tmp_path / "parked").iterdir())
    assert len(files) == 1 and (files[0] / "weights.bin").stat().st_size >= size
    mapped = {t.data_ptr() for t in stored.data.values()}
    assert {t.data_ptr() for t in tensors(model) if t.numel()} == mapped and not mapped & anonymous
    assert placed_bytes([model], CPU, skip=mapped) == 0  # every byte it holds is the file's
    if model.config.tie_word_embeddings:
        assert model.lm_head.weight is model.get_input_embeddings().weight
    torch.testing.assert_close(logits(model), expected, rtol=0, atol=0)
    torch.testing.assert_close(logits(view), expected_cut, rtol=0, atol=0)  # the cut shares the moved tensors
    bring(model, CPU, stored)  # on a CPU the mapped pages come back as they are read: nothing moves
    torch.testing.assert_close(logits(model), expected, rtol=0, atol=0)
    again = park(model, CPU, stored)
    assert again is stored and len(list((tmp_path / "parked").iterdir())) == 1  # written once
    torch.testing.assert_close(logits(view), expected_cut, rtol=0, atol=0)


def test_parking_beside_a_gpu_copies_to_cpu_memory_once(model):
    """The copy a GPU's model waits in (run here on a CPU model: the copy, not the move to a GPU, is what is
    checked)."""
    expected = logits(model)
    before = {id(t): t.data_ptr() for t in tensors(model)}
    stored = park(model, torch.device("cuda", 0))
    assert stored.mapped is None  # CPU copies, not a mapped file
    assert all(t.data_ptr() != before[id(t)] for t in tensors(model) if t.numel())  # new storage: a copy
    torch.testing.assert_close(logits(model), expected, rtol=0, atol=0)
    copies = {id(t): t.data_ptr() for t in tensors(model)}
    assert park(model, torch.device("cuda", 0), stored) is stored
    assert {id(t): t.data_ptr() for t in tensors(model)} == copies  # parked again: no new copy


def test_a_variant_in_files_is_brought_whole_and_parked_again_with_the_same_logits(model, monkeypatch):
    cal = Calibration(n_samples=4, seq_len=32)
    from conftest import build_tiny_tokenizer

    tokenizer = build_tiny_tokenizer()
    monkeypatch.setenv("LAYERCUT_MEMORY_BUDGET", str(resident_bytes(model) + 1024))  # its copy cannot fit: files
    variant = Recipe((Sparsify.of("wanda", None, "2:4", cal),)).apply(model, tokenizer)
    assert is_offloaded(variant) and in_files(variant)
    expected, waiting = logits(variant), waiting_bytes(variant)
    assert waiting + resident_bytes(variant) == parked_bytes(model)  # its weights, a tied one once; buffers stay
    hooked = bring_from_files(variant, CPU)
    assert not in_files(variant) and not is_offloaded(variant) and resident_bytes(variant) == parked_bytes(model)
    if model.config.tie_word_embeddings:
        assert variant.lm_head.weight is variant.get_input_embeddings().weight
    torch.testing.assert_close(logits(variant), expected, rtol=0, atol=0)
    park_in_files(variant, hooked)
    assert in_files(variant) and resident_bytes(variant) < waiting / 4
    torch.testing.assert_close(logits(variant), expected, rtol=0, atol=0)
    bring_from_files(variant, CPU)
    torch.testing.assert_close(logits(variant), expected, rtol=0, atol=0)
