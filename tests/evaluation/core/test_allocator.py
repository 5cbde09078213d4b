"""Ten visitors build variants from Gradio-like worker threads; the server's memory comes back near what its
variant cache may hold (evaluation/core/allocator.py), not several times that (glibc's arenas keeping what
evicted variants freed)."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
VISITORS = 10
BUDGET = 256 * 2**20  # two of the variants below: each owns 8 layers × 3.4 M weights in float32, 109 MB
MARGIN = 128 * 2**20  # what the allocator may keep besides: a build's temporaries, Python's own objects


def visitors_build() -> dict:
    """In a fresh process: resident memory with a Llama of hidden 512 served, then after ``VISITORS`` worker
    threads that outlive their jobs (as Gradio's) built a magnitude-sparse variant each."""
    from concurrent.futures import ThreadPoolExecutor

    import psutil
    import torch
    import transformers

    from evaluation.serving.backend import Backend
    from prune.core.recipe import Recipe
    from prune.sparsity.step import Sparsify

    backend = Backend(device="cpu", data_dir="")
    backend.models.variants.budget_bytes = BUDGET
    config = transformers.LlamaConfig(vocab_size=320, hidden_size=512, intermediate_size=1536, num_hidden_layers=8,
                                      num_attention_heads=8, max_position_embeddings=256)
    torch.manual_seed(0)
    spec = backend.models.adopt(transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval(), None,
                                name="llama-512")
    baseline = psutil.Process().memory_info().rss
    with ThreadPoolExecutor(VISITORS) as pool:
        recipes = [Recipe((Sparsify.of("magnitude", 0.1 + 0.04 * i),)) for i in range(VISITORS)]
        list(pool.map(lambda recipe: backend.models.build(spec, recipe, owner=recipe.short()), recipes))
        after = psutil.Process().memory_info().rss  # the threads still live, as a server's do
    return {"baseline": baseline, "after": after, "held": backend.models.variants.used_bytes}


@pytest.mark.slow
@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the allocator settings are glibc's")
def test_memory_returns_near_the_variant_budget_after_ten_visitors_build_variants():
    done = subprocess.run([sys.executable, __file__], cwd=REPO, capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    found = json.loads(done.stdout.splitlines()[-1])
    mib = {key: round(value / 2**20) for key, value in found.items()}
    assert 0 < found["held"] <= BUDGET, mib
    assert found["after"] <= found["baseline"] + BUDGET + MARGIN, \
        f"resident {mib['after']} MiB after the builds, over {mib['baseline']} MiB at rest + the budget and margin"


def test_server_memory_reads_the_process_beside_the_variant_cache():
    from evaluation.serving.variants import VariantCache

    memory = VariantCache(budget_bytes=123).server_memory()
    assert memory.rss_bytes > 0
    assert (memory.held_bytes, memory.budget_bytes) == (0, 123)


if __name__ == "__main__":
    print(json.dumps(visitors_build()))
