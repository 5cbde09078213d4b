"""2:4 kernels only where they win: the benchmark's table decides per batch size, and each speed row says which ran."""

import json

import torch

from evaluation.measure import sparse_kernels, speed
from prune.core.recipe import Recipe
from prune.sparsity.step import Sparsify


def _table(path, device, rows):
    """A results file in two_four_kernels.py's shape: per device, per (shape, input rows), dense and sparse ms."""
    path.write_text(json.dumps({"runs": [
        {"device": device, "rows": [{"in": i, "out": o, "rows": r, "dense_ms": d, "sparse_ms": s}
                                    for i, o, r, d, s in rows]},
        {"device": "another GPU", "rows": [{"in": 64, "out": 64, "rows": 1, "dense_ms": 9.0, "sparse_ms": 0.1}]}]}))
    return path


def test_the_kernels_run_only_at_batch_sizes_whose_summed_products_they_were_measured_to_win(tmp_path):
    path = _table(tmp_path / "two_four_kernels.json", "NVIDIA H100", [
        (4096, 4096, 1, 0.030, 0.560), (4096, 11008, 1, 0.052, 0.577),  # batch 1: dense wins both
        (4096, 4096, 64, 0.100, 0.090), (4096, 11008, 64, 0.200, 0.260),  # 64: sparse wins one, loses the sum
        (4096, 4096, 512, 0.400, 0.300), (4096, 11008, 512, 0.900, 0.700)])  # 512: sparse wins (1.0 < 1.3)
    wins = sparse_kernels.measured_wins("NVIDIA H100", path)
    assert wins == {1: False, 64: False, 512: True}
    assert sparse_kernels.kernel_batches((1, 8, 64, 512), wins) == (512,)  # 8 was not measured: dense
    assert sparse_kernels.measured_wins("NVIDIA A100", path) == {}  # another card's figures decide nothing here
    assert sparse_kernels.measured_wins("NVIDIA H100", tmp_path / "absent.json") == {}
    assert sparse_kernels.kernel_batches((1, 512), {}) == ()


def test_the_recorded_h100_figures_keep_every_batch_size_dense():
    """The figures README's GPU section gives (transcribed into the results file): dense won at 1 and 4096 rows."""
    wins = sparse_kernels.measured_wins("NVIDIA H100 80GB HBM3")
    assert wins == {1: False, 4096: False}
    assert sparse_kernels.kernel_batches((1, 8, 32), wins) == ()


def test_the_recorded_h200_run_keeps_every_batch_size_dense():
    """two_four_kernels.py on an H200 (2026-11-27): cuSPARSELt lost to dense at every row count it measured."""
    wins = sparse_kernels.measured_wins("NVIDIA H200")
    assert wins == dict.fromkeys((1, 4, 8, 16, 32, 128, 1024, 4096), False)
    assert sparse_kernels.kernel_batches((1, 8, 32), wins) == ()


def test_each_speed_row_says_which_kernel_ran_and_the_kernel_form_runs_only_at_winning_batches(backend, spec,
                                                                                             monkeypatch):
    monkeypatch.setattr(sparse_kernels, "unavailable", lambda model: None)  # as on a GPU with the kernels
    monkeypatch.setattr(sparse_kernels, "device_wins", lambda model: {2: True, 1: False})
    timed_at = {}  # batch sizes → {label: whether the 2:4 variant itself (dense) was what ran}
    variant = backend.models.model(spec, Recipe((Sparsify.of("magnitude", None, "2:4"),)))
    measure = speed.measure_speed

    def recording(models, **settings):
        timed_at[tuple(settings["batch_sizes"])] = {label: model is variant for label, model in models.items()}
        return measure(models, **settings)

    monkeypatch.setattr(speed, "measure_speed", recording)
    found = backend.measure.speed(spec, {"B": Recipe((Sparsify.of("magnitude", None, "2:4"),))}, batch_sizes=(1, 2),
                                  prompt_len=4, new_tokens=(2,), repeats=1)
    assert timed_at == {(2,): {"original": False, "B": False}, (1,): {"original": False, "B": True}}
    kernels = {(m.model, m.details["batch"]): m.details["kernel"] for m in found if "batch" in m.details}
    assert kernels == {("original", 1): "dense", ("original", 2): "dense",
                       ("B", 1): "dense", ("B", 2): "2:4 semi-structured"}
    note = next(m.details["sparsity_note"] for m in found if m.model == "B")
    assert note.endswith("Timed dense at batch 1: benchmarks/two_four_kernels.py did not measure PyTorch's 2:4 "
                         "kernels faster than dense there on this GPU.")


def test_the_kernel_layer_keeps_only_the_compressed_weight(monkeypatch):
    """What the kernel form holds while it is timed: the compressed weight, not a dense copy beside it."""
    monkeypatch.setattr(torch.sparse, "to_sparse_semi_structured", lambda w: w[:, ::2].clone(), raising=False)
    dense = torch.nn.Linear(64, 64)
    layer = sparse_kernels.TwoFourLinear(dense)
    held = [t for t in list(layer.parameters()) + list(layer.buffers()) if t is not dense.bias]
    assert [tuple(t.shape) for t in held] == [(64, 32)]  # the kept half only (the stand-in's compression)
    assert all(t.untyped_storage().data_ptr() != dense.weight.untyped_storage().data_ptr() for t in held)
    assert not any(value is dense or value is dense.weight for value in vars(layer).values())
