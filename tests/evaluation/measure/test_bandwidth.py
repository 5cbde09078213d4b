"""The bytes a decoded token reads, counted by hand from the shapes of tiny Llamas in every storage, and the floor."""

import pytest
import torch

import prune
from evaluation.measure import bandwidth, speed
from evaluation.measure.memory import kv_cache_bytes
from prune.core.kv import cache_returned
from prune.core.recipe import Recipe
from tests.conftest import tied_llama, tiny_model

# The tiny Llama: hidden 32, MLP 64, 4 heads of 8, 2 KV heads, vocabulary 320, 4 layers, untied head, float32.
# A layer's matrices (rows × inputs): q 32×32, k 16×32, v 16×32, o 32×32; gate, up 64×32; down 32×64.
ATTENTION = [(32, 32), (16, 32), (16, 32), (32, 32)]
MLP = [(64, 32), (64, 32), (32, 64)]
NORMS = 2 * 32 * 4  # two RMSNorm weights per layer, float32
ROTARY = 2 * 4 * 4  # the rotary embedding's inv_freq and original_inv_freq buffers: head_dim / 2 floats each
HEAD = 320 * 32 * 4  # untied: read whole for the logits; of the input embedding one row per sequence
ROW, FINAL_NORM = 32 * 4, 32 * 4


def dense(matrices):
    return sum(rows * inputs * 4 for rows, inputs in matrices)


def int8(matrices):  # an int8 per weight, a float32 scale per row
    return sum(rows * inputs + rows * 4 for rows, inputs in matrices)


def int4(matrices, group=32):  # two values a byte, a bfloat16 scale and zero per group of inputs
    return sum(rows * inputs // 2 + inputs // group * rows * 2 * 2 for rows, inputs in matrices)


def kv(layers_with_attention, context, batch=1):  # keys and values: 2 KV heads × 8 dims, float32
    return 2 * layers_with_attention * 2 * 8 * context * 4 * batch


def whole(layers: list[int], context: int, batch: int = 1) -> int:
    return sum(layers) + FINAL_NORM + HEAD + ROTARY + batch * ROW + kv(len(layers), context, batch)


def test_bytes_per_decoded_token_of_each_storage_equal_a_hand_count():
    model = tiny_model("llama")
    layer = dense(ATTENTION + MLP) + NORMS
    assert bandwidth.decode_bytes(model, 10) == whole([layer] * 4, 10)
    assert bandwidth.decode_bytes(model, 10, batch=3) == whole([layer] * 4, 10, batch=3)  # weights once, 3 caches
    cut = Recipe.block(4, 1, 3).apply(model)
    assert bandwidth.decode_bytes(cut, 10) == whole([layer] * 2, 10)
    quantized = [prune.Quantize.of(8).apply(model), prune.Quantize.of(4).apply(model)]
    assert bandwidth.decode_bytes(quantized[0], 10) == whole([int8(ATTENTION + MLP) + NORMS] * 4, 10)
    assert bandwidth.decode_bytes(quantized[1], 10) == whole([int4(ATTENTION + MLP) + NORMS] * 4, 10)
    with_head = prune.Quantize.of(4, head=True).apply(model)  # the head in int8: 320 rows of 32 bytes and a scale
    assert bandwidth.decode_bytes(with_head, 10) == whole([int4(ATTENTION + MLP) + NORMS] * 4, 10) - HEAD + int8(
        [(320, 32)])


def test_a_tied_head_quantized_is_untied_the_token_reads_it_whole_and_one_row_of_the_original_embedding():
    model = tied_llama()
    tied = bandwidth.decode_bytes(model, 10)  # the tied matrix read whole once, no row beside it
    variant = prune.Quantize.of(8, head=True).apply(model)
    layers = (dense(ATTENTION + MLP) - int8(ATTENTION + MLP)) * 4
    assert bandwidth.decode_bytes(variant, 10) == tied - layers - HEAD + int8([(320, 32)]) + ROW


def test_an_int8_embedding_reads_one_int8_row_and_its_scale_and_tied_to_the_head_the_int8_matrix_whole_once():
    model = tiny_model("llama")  # untied: the float head read whole, the int8 embedding one row of 32 bytes + a scale
    layers = [int4(ATTENTION + MLP) + NORMS] * 4
    assert bandwidth.decode_bytes(prune.Quantize.of(4, embedding=True).apply(model), 10) == whole(
        layers, 10) - ROW + (32 + 4)
    both = prune.Quantize.of(4, head=True, embedding=True).apply(model)
    assert bandwidth.decode_bytes(both, 10, batch=2) == whole(layers, 10, batch=2) - HEAD + int8(
        [(320, 32)]) - 2 * ROW + 2 * (32 + 4)
    tied = tied_llama()
    variant = prune.Quantize.of(8, embedding=True).apply(tied)  # the one int8 matrix, read whole, no row beside it
    layers = (dense(ATTENTION + MLP) - int8(ATTENTION + MLP)) * 4
    assert bandwidth.decode_bytes(variant, 10) == bandwidth.decode_bytes(tied, 10) - layers - HEAD + int8([(320, 32)])


def test_a_dropped_attention_reads_neither_its_matrices_nor_a_cache_and_a_factored_matrix_reads_its_factors():
    model = tiny_model("llama")
    dropped = prune.SubLayerDrop.of(4, attention=[2]).apply(model)
    layer = dense(ATTENTION + MLP) + NORMS
    without = dense(MLP) + NORMS  # both norms stay held (the unused input norm is 128 bytes, counted)
    found = bandwidth.decode_bytes(dropped, 10)
    assert found == sum([layer] * 3) + without + FINAL_NORM + HEAD + ROTARY + ROW + kv(3, 10)
    factored = prune.decompose(model, space="weight", ranks=4, projections=["gate_proj"], layers=[0])
    # gate 64×32 becomes 4×32 then 64×4
    assert bandwidth.decode_bytes(factored, 10) == whole([layer] * 4, 10) - 64 * 32 * 4 + (4 * 32 + 64 * 4) * 4


def test_the_kv_term_equals_the_cache_a_real_generation_holds():
    model = tiny_model("llama")
    with torch.inference_mode():
        out = model(input_ids=torch.arange(1, 12)[None], use_cache=True)
    assert bandwidth.kv_bytes(model, 11) == kv_cache_bytes(cache_returned(out)) == kv(4, 11)


def test_the_floor_is_bytes_over_bandwidth_and_decode_rows_carry_it_with_their_ideal_by_bytes(monkeypatch):
    calls = []

    def probe(device):
        calls.append(device)
        return bandwidth.Bandwidth(1e9, "a made-up 1 GB/s")

    monkeypatch.setattr(bandwidth, "_FOUND", {})
    monkeypatch.setattr(bandwidth, "_probe", probe)
    model = tiny_model("llama")
    small = prune.Quantize.of(8).apply(model)
    rows = speed.measure_speed({"original": model, "A": small}, batch_sizes=(1,), prompt_len=8, new_tokens=(4,),
                               repeats=1)
    assert len(calls) == 1  # measured once per process and device
    decode = {m.model: m for m in rows if m.name.startswith(speed.DECODE)}
    for label, found in decode.items():
        read = bandwidth.decode_bytes({"original": model, "A": small}[label], 10)  # context: 8 + 4 / 2
        assert found.details["bytes_per_token"] == read
        assert found.details["floor_ms"] == pytest.approx(1000 * read / 1e9)
        assert found.details["limit_share"] == pytest.approx(found.details["floor_ms"] / found.value)
    share = [m for m in rows if m.group == speed.LIMIT and m.name.startswith("share")]
    assert [m.value for m in share] == pytest.approx([100 * decode[m.model].details["limit_share"] for m in share])
    paired = speed.with_ideal(model, small, [m for m in rows if m.model == "original"],
                              [m for m in rows if m.model == "A"])
    by = {m.name.split(" (")[0]: (m.details.get("ideal_by"), m.details.get("ideal_speedup")) for m in paired}
    assert by["decode latency per token"] == ("bytes", pytest.approx(decode["original"].details["bytes_per_token"] /
                                                                     decode["A"].details["bytes_per_token"]))
    assert by["prefill latency"] == ("FLOPs", pytest.approx(1.0))  # the same matrices' FLOPs, stored smaller


def test_an_interrupted_decode_step_keeps_the_rows_measured_before_it_and_says_where_it_stopped(monkeypatch):
    """gpu_check.py's decode step on an H200: a 7B compile ran for minutes and the run's time limit (SIGINT) lost
    the eager rows measured before it. Now they are kept, and the interrupted row says so."""
    from benchmarks import decode_floor

    monkeypatch.setattr(bandwidth, "_FOUND", {})
    monkeypatch.setattr(bandwidth, "_probe", lambda device: bandwidth.Bandwidth(1e9, "a made-up 1 GB/s"))

    def row(label, model, mode, **settings):
        if (label, mode) == ("cut", "compiled"):
            raise KeyboardInterrupt
        return {"model": label, "mode": mode, "decode_ms": 1.0}

    monkeypatch.setattr(decode_floor, "decode_row", row)
    model = tiny_model("llama")
    found = decode_floor.decode_rows({"original": model, "cut": model, "int8": model})
    assert [(r["model"], r["mode"]) for r in found["rows"]] == [
        ("original", "eager"), ("cut", "eager"), ("int8", "eager"), ("original", "compiled"), ("cut", "compiled")]
    assert found["rows"][-1]["error"].startswith("interrupted after ")
    assert all("error" not in r for r in found["rows"][:-1])
