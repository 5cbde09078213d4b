"""The chunked next-token loss equals the model's own loss and gradients, on every tiny architecture."""

import pytest
import torch

from conftest import TINY_CONFIGS, tiny_model
from prune.core import chunked_loss
from prune.core.chunked_loss import mean_loss, summed_nll

IDS = torch.randint(0, 320, (3, 21), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("arch", sorted(TINY_CONFIGS))
def test_the_loss_and_its_gradients_equal_the_models_own(arch, monkeypatch):
    calls = []
    real = chunked_loss._chunk_nll
    monkeypatch.setattr(chunked_loss, "_chunk_nll", lambda *a: calls.append(1) or real(*a))
    model = tiny_model(arch, 2)
    if getattr(model.config, "final_logit_softcapping", None) is None and arch.startswith("gemma"):
        model.config.final_logit_softcapping = 5.0  # make the transform matter where the architecture has one
    weight = next(p for n, p in model.named_parameters() if "layers.0" in n or ".h.0." in n or "layers.0." in n)
    expected = model(input_ids=IDS, labels=IDS, use_cache=False).loss
    (expected_grad,) = torch.autograd.grad(expected, weight)
    found = mean_loss(model, IDS, chunk=7)  # 3 × 20 positions: 9 chunks, the last one short
    (found_grad,) = torch.autograd.grad(found, weight)
    torch.testing.assert_close(found, expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(found_grad, expected_grad, rtol=1e-4, atol=1e-6)
    assert len(calls) == 2 * 9  # the chunked route, not the fallback: 9 chunks, each recomputed in the backward
    with torch.no_grad():
        total, count = summed_nll(model, IDS, chunk=1000)
    assert count == 3 * 20
    torch.testing.assert_close(total / count, expected.detach(), rtol=1e-5, atol=1e-6)


def test_an_unknown_logit_transform_falls_back_to_the_whole_sequence(monkeypatch):
    model = tiny_model("llama", 2)
    expected = model(input_ids=IDS, labels=IDS, use_cache=False).loss
    head = model.lm_head
    monkeypatch.setattr(model, "lm_head", torch.nn.Sequential(head, torch.nn.Tanh()))  # a transform no config names
    model.get_output_embeddings = lambda: head  # what a mislabelled head would give
    found = mean_loss(model, IDS, chunk=7)
    torch.testing.assert_close(found, model(input_ids=IDS, labels=IDS, use_cache=False).loss)
    assert not torch.allclose(found, expected)


def test_small_logits_go_in_one_pass_and_large_ones_in_chunks_of_the_byte_budget(monkeypatch):
    model = tiny_model("llama", 2)
    calls = []
    real = chunked_loss._chunk_nll
    monkeypatch.setattr(chunked_loss, "_chunk_nll",
                        lambda m, h, t, head=None: calls.append(len(t)) or real(m, h, t, head))
    expected = model(input_ids=IDS, labels=IDS, use_cache=False).loss
    torch.testing.assert_close(mean_loss(model, IDS), expected)  # 60 × 320 floats: far under the whole-pass bound
    assert calls == [60]
    calls.clear()
    monkeypatch.setattr(chunked_loss, "WHOLE_BYTES", 0)
    monkeypatch.setattr(chunked_loss, "CHUNK_BYTES", 16 * 320 * 4)  # 16 positions of a 320-token vocabulary
    torch.testing.assert_close(mean_loss(model, IDS), expected)
    assert calls == [16, 16, 16, 12]
