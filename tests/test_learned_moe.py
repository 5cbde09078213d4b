"""The mixture of experts whose experts were learned (benchmarks/learned_moe.py: the default model MoEfied, built once
into the models cache): its experts partition each MLP's channels exactly, and its learned structure is what expert
pruning ranks — REAP removes half the experts at a lower perplexity than a random half."""

from __future__ import annotations

import math

import pytest
import torch

import prune
from benchmarks import learned_moe
from evaluation.quality.perplexity import mean_nll, token_ids, wikitext2_rows, windows
from prune.core.architectures import decoder_layers



@pytest.fixture(scope="module")
def learned(data_dir):
    return prune.load_model(str(learned_moe.folder(data_dir)))


@pytest.mark.slow
def test_the_experts_add_up_to_the_dense_mlp_and_reap_beats_a_random_half(learned, default_model, data_dir):
    model, tokenizer = learned
    dense = decoder_layers(default_model[0])[2].mlp
    block = decoder_layers(model)[2].mlp
    assert type(model).__name__ == "MixtralForCausalLM" and block.experts.gate_up_proj.shape[0] == 16
    x = torch.randn(5, 576)
    with torch.no_grad():  # every expert alone through transformers' own forward, weighted 1/k: the dense MLP
        experts = sum(block.experts(x, torch.full((5, 1), e), torch.full((5, 1), 1 / learned_moe.TOP_K))
                      for e in range(16))
        torch.testing.assert_close(experts, dense(x), rtol=1e-4, atol=1e-4)
    chunks = windows(token_ids(tokenizer, wikitext2_rows(data_dir)), 128, None)[:8]
    calibration = prune.Calibration(source="wikitext2", path=str(data_dir), n_samples=16, seq_len=128)
    perplexity = {method: math.exp(mean_nll(prune.ExpertPrune.of(method, 0.5, calibration).apply(model, tokenizer),
                                            chunks)[0]) for method in ("reap", "random")}
    assert perplexity["reap"] < perplexity["random"]
