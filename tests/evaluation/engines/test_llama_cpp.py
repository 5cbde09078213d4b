"""llama.cpp as a second engine: tiny models written as GGUF, timed and scored by the real llama.cpp
(llama-cpp-python, installed by setup.sh) in its own process, against hand counts and the same weights in PyTorch;
and the real worker made to die by a signal on one column (as a native build dies on a CPU it does not suit): that
column is one line, every other row and column is measured, and a Stop ends the child."""

from __future__ import annotations

import math
import os
import threading
import time

import numpy as np
import pytest
import torch

import prune
from conftest import build_tiny_tokenizer, tiny_model
from llama_helpers import DYING_WORKER, llama_logits, needs_llama_type
from evaluation.core.jobs import Cancelled
from evaluation.engines import llama_cpp
from evaluation.core.pool import ModelSpec
from evaluation.quality import perplexity
from evaluation.serving.backend import Backend
from evaluation.serving.engine import NOTE
from evaluation.serving.measure import check_engine
from prune.core.errors import InvalidInput
from prune.core.recipe import Recipe

COLUMNS = {"A": Recipe.block(4, 1, 2), "B": Recipe((prune.Quantize.of(8),))}
SETTINGS = dict(batch_sizes=(1,), prompt_len=16, new_tokens=(8,), repeats=2)


@pytest.fixture(scope="module")
def backend(tmp_path_factory):
    return Backend(device="cpu", data_dir="")


def by_hand_bytes(model, context: float) -> int:
    """What a decoded token reads from an F16 GGUF of ``model``, counted from the PyTorch weights: every matrix in two
    bytes, every vector (norms) in four, the embedding one row (the output layer is its own matrix) and the F16 KV
    cache of every layer at ``context`` positions."""
    config = model.config
    matrices = sum(2 * p.numel() for n, p in model.named_parameters() if p.dim() == 2 and "embed_tokens" not in n)
    vectors = sum(4 * p.numel() for p in model.parameters() if p.dim() == 1)
    head_dim = config.hidden_size // config.num_attention_heads
    kv = 2 * config.num_hidden_layers * config.num_key_value_heads * head_dim * context * 2
    return int(matrices + vectors + 2 * config.hidden_size + kv)


def test_each_column_is_timed_in_the_gguf_type_of_its_storage_with_the_bytes_it_reads(backend, tiny_folder):
    needs_llama_type("F16", "Q8_0")
    spec = ModelSpec(tiny_folder)
    found = [m for m in backend.measure.speed(spec, COLUMNS, engine=llama_cpp.LLAMA_CPP, **SETTINGS)
             if m.name.endswith(llama_cpp.SUFFIX)]
    decode = {m.model: m for m in found if m.name.startswith("decode latency")}
    assert {label: m.details["gguf_type"] for label, m in decode.items()} == {"original": "F16", "A": "F16",
                                                                               "B": "Q8_0"}
    assert all(m.value > 0 and m.spread_kind == "IQR" and len(m.details["samples"]) == 2 for m in decode.values())
    context = 16 + 8 / 2
    for label, recipe in {"original": Recipe(), "A": COLUMNS["A"]}.items():
        model = backend.models.model(spec, recipe)
        assert decode[label].details["bytes_per_token"] == by_hand_bytes(model, context)
        assert decode[label].details["limit_share"] == pytest.approx(decode[label].details["floor_ms"] /
                                                                     decode[label].value)
    assert decode["B"].details["bytes_per_token"] < decode["original"].details["bytes_per_token"] / 1.5
    names = {m.name for m in found if m.model == "B"}
    assert {"prefill latency (batch 1, 16 tokens) (llama.cpp)", "bytes read per decoded token (batch 1, 8 new) "
            "(llama.cpp)", "share of the bandwidth limit reached (batch 1, 8 new) (llama.cpp)"} <= names


def test_a_column_llama_cpp_cannot_run_says_why_in_one_line_and_the_others_run(backend, tiny_folder):
    needs_llama_type("F16")
    found = backend.measure.speed(ModelSpec(tiny_folder), {"A": Recipe.drop(4, attention=[1])},
                                  engine=llama_cpp.LLAMA_CPP, **SETTINGS)
    decode = {m.model: m for m in found if m.name == "decode latency per token (batch 1, 8 new) (llama.cpp)"}
    assert math.isnan(decode["A"].value) and "\n" not in decode["A"].details[NOTE]
    assert "attention" in decode["A"].details[NOTE] and decode["original"].value > 0


def test_perplexity_from_llama_cpp_logits_is_the_same_weights_perplexity_in_pytorch(tmp_path):
    needs_llama_type("F16")
    model, tokenizer = tiny_model("llama", 4), build_tiny_tokenizer()
    path = llama_cpp.gguf_file(model, tokenizer, "F16", tmp_path / "tiny.F16.gguf")
    ids = torch.randint(0, model.config.vocab_size, (600,), generator=torch.Generator().manual_seed(3))
    windows = perplexity.windows(ids, 64, None)[:4]
    rounded = tiny_model("llama", 4).half().float()  # the weights the F16 file holds, computed in float32
    with torch.no_grad():
        top1 = [row[:-1].argmax(dim=-1) for row in rounded(windows).logits]
    found = llama_cpp.window_scores(path, windows, top1)
    nll, count = perplexity.mean_nll(rounded, windows)
    assert found["tokens"] == count == 4 * 63
    assert math.exp(found["nll"] / found["tokens"]) == pytest.approx(math.exp(nll), rel=2e-3)
    assert found["agree"] >= 0.97 * count
    logits = llama_logits(path, windows[0].tolist())[:-1]  # the NLL by hand from a bare llama-cpp-python script's
    shifted = logits - logits.max(axis=1, keepdims=True)
    by_hand = float(np.sum(np.log(np.exp(shifted).sum(axis=1)) - shifted[np.arange(63), windows[0, 1:].numpy()]))
    assert llama_cpp.window_scores(path, windows[:1])["nll"] == pytest.approx(by_hand, rel=1e-9)


def test_the_backend_scores_each_column_in_llama_cpp_beside_its_own_perplexity(backend, tiny_folder, data_dir):
    needs_llama_type("F16", "Q8_0")
    scored = Backend(device="cpu", data_dir=data_dir)
    found = scored.measure.perplexity(ModelSpec(tiny_folder), COLUMNS, seq_lens=(64,), bos=(False,), max_windows=2,
                                      engine=llama_cpp.LLAMA_CPP)
    ours = {m.model: m.value for m in found if m.name == "WikiText-2 perplexity (seq 64)"}
    theirs = {m.model: m for m in found if m.name == "WikiText-2 perplexity (seq 64) (llama.cpp)"}
    for label in ("original", "A"):  # F16 files of float32 columns: the same perplexity to a tenth of a percent
        assert theirs[label].value == pytest.approx(ours[label], rel=1e-3)
    assert theirs["B"].details["gguf_type"] == "Q8_0" and theirs["B"].value == pytest.approx(ours["B"], rel=2e-2)
    agree = {m.model: m.value for m in found if m.name.startswith("top-1 agreement")}
    assert agree["original"] > 97 and set(agree) == {"original", "A", "B"}


@pytest.mark.parametrize("engine, int4_type, words", [
    ("vllm", "Q4_0", "The engines are LayerCut's own and llama.cpp, not 'vllm'"),
    ("llama.cpp", "Q3_K", "An int4 column runs in llama.cpp as"),
])
def test_an_unknown_engine_or_type_is_one_line(engine, int4_type, words):
    with pytest.raises(InvalidInput, match=words):
        check_engine(engine, int4_type)


def test_without_llama_cpp_the_engine_is_refused_in_one_line(monkeypatch, backend, tiny_folder):
    monkeypatch.setattr(llama_cpp, "why_not_installed", lambda: "llama.cpp is not installed here: `bash setup.sh` "
                                                                "installs llama-cpp-python.")
    with pytest.raises(InvalidInput, match="bash setup.sh"):
        backend.measure.speed(ModelSpec(tiny_folder), {}, engine=llama_cpp.LLAMA_CPP, **SETTINGS)


def test_the_command_line_takes_the_engine_with_speed_only(capsys):
    from evaluation import cli

    assert cli.main(["--full", "--engine", "llama.cpp"]) == 2
    err = capsys.readouterr().err.strip()
    assert "goes with --speed" in err and len(err.splitlines()) == 1


def test_the_frontier_times_each_point_in_llama_cpp_on_request_and_says_what_it_cannot_run(tiny_folder, data_dir,
                                                                                           tmp_path, monkeypatch):
    import tempfile

    from evaluation.core.jobs import final
    from evaluation.quality import lm_eval_adapter

    needs_llama_type("F16", "Q8_0")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the run writes its points' GGUFs
    backend, spec = Backend(device="cpu", data_dir=data_dir), ModelSpec(tiny_folder)
    request = lm_eval_adapter.check_request(["arc_easy"], limit=2, data_dir=backend.models.data_dir)
    settings = dict(axis="ms", sizes=(0.8,), families=("int8", "attention drop"), ppl_seq_len=32, ppl_windows=1,
                    batch_size=4)
    ours = final(backend.frontier.run(spec, request, **settings))
    theirs = final(backend.frontier.run(spec, request, engine=llama_cpp.LLAMA_CPP, **settings))
    assert theirs.dense.perplexity == ours.dense.perplexity  # only the timing changed engine
    assert theirs.dense.ms < ours.dense.ms / 2  # llama.cpp's decode of the 4-layer model, not LayerCut's loop
    assert "attention" in theirs.why[("attention drop", 0.8)] and any(p.families == ("int8",) for p in theirs.points)
    assert not list(tmp_path.glob("layercut-frontier-gguf-*"))  # one folder for the run's GGUFs, gone at its end


@pytest.fixture
def dying(monkeypatch):
    """The real worker, dying by ``signal`` on GGUFs of ``file_type``: ``dying("Q8_0", "SIGILL")``."""
    monkeypatch.setattr(llama_cpp, "WORKER", DYING_WORKER)
    return lambda file_type, name: monkeypatch.setenv("LAYERCUT_TEST_DIE", f"{file_type}:{name}")


@pytest.mark.parametrize("name, words", [
    ("SIGILL", "llama.cpp stopped with an illegal instruction on Q8_0: its build uses CPU instructions this machine "
               "does not run — see docs/install.md."),
    ("SIGSEGV", "llama.cpp crashed (SIGSEGV) on Q8_0; the other columns still ran."),
    ("SIGABRT", "llama.cpp aborted on Q8_0 (GGML_ASSERT(ne % 32 == 0) failed)."),
])
def test_a_column_whose_llama_cpp_dies_is_one_line_and_every_other_row_is_measured(backend, tiny_folder, dying,
                                                                                     name, words):
    needs_llama_type("F16")
    dying("Q8_0", name)
    found = backend.measure.speed(ModelSpec(tiny_folder), COLUMNS, engine=llama_cpp.LLAMA_CPP, **SETTINGS)
    theirs = {m.model: m for m in found if m.name == "decode latency per token (batch 1, 8 new) (llama.cpp)"}
    assert theirs["B"].details[NOTE] == words and math.isnan(theirs["B"].value)
    assert theirs["original"].value > 0 and theirs["A"].value > 0 and theirs["A"].details["gguf_type"] == "F16"
    ours = {m.model for m in found if m.name == "decode latency per token (batch 1, 8 new)"}
    assert ours == {"original", "A", "B"}  # LayerCut's own rows, B's int8 included
    assert "/build/" not in words  # the assert's source path (the build machine's) is not shown


def test_a_column_whose_llama_cpp_dies_has_no_perplexity_there_and_the_others_do(tiny_folder, data_dir, dying):
    needs_llama_type("F16")
    dying("Q8_0", "SIGILL")
    found = Backend(device="cpu", data_dir=data_dir).measure.perplexity(
        ModelSpec(tiny_folder), COLUMNS, seq_lens=(64,), bos=(False,), max_windows=1, engine=llama_cpp.LLAMA_CPP)
    theirs = {m.model: m for m in found if m.name == "WikiText-2 perplexity (seq 64) (llama.cpp)"}
    assert "illegal instruction" in theirs["B"].details[NOTE] and math.isnan(theirs["B"].value)
    assert theirs["original"].value > 1 and theirs["A"].value > 1


def test_a_stop_ends_llama_cpps_process(tmp_path, monkeypatch):
    pytest.importorskip("llama_cpp")
    path = llama_cpp.gguf_file(tiny_model("llama", 2), build_tiny_tokenizer(), "F16", tmp_path / "tiny.F16.gguf")
    mark = tmp_path / "child.pid"
    monkeypatch.setattr(llama_cpp, "WORKER", DYING_WORKER)
    monkeypatch.setenv("LAYERCUT_TEST_HANG", "F16")
    monkeypatch.setenv("LAYERCUT_TEST_HANG_MARK", str(mark))
    stop, outcome = threading.Event(), []

    def check():
        if stop.is_set():
            raise Cancelled("Cancelled: stopped.")

    def measure():
        try:
            llama_cpp.measure_speed({"A": path}, prompt_len=8, new_tokens=4, repeats=1, vocab=320,
                                    bandwidth_limit=None, check=check)
        except Cancelled as err:
            outcome.append(err)

    thread = threading.Thread(target=measure)
    thread.start()
    deadline = time.monotonic() + 60
    while not mark.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    pid = int(mark.read_text())
    os.kill(pid, 0)  # the child is alive, waiting inside its "load"
    stop.set()
    thread.join(timeout=30)
    assert not thread.is_alive() and isinstance(outcome[0], Cancelled)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # killed and reaped


def test_the_command_line_times_every_column_and_says_which_llama_cpp_could_not(tiny_folder, data_dir, dying,
                                                                                tmp_path, capsys, monkeypatch):
    from evaluation import cli

    needs_llama_type("F16")
    dying("Q8_0", "SIGILL")
    monkeypatch.setenv("LAYERCUT_CACHE", str(tmp_path / "cache"))
    code = cli.main(["--model", tiny_folder, "--personalized", "--start_block", "1", "--end_block", "2",
                     "--quantize", "int8", "--speed", "--engine", "llama.cpp", "--task", "arc_easy", "--limit", "2",
                     "--data_dir", str(data_dir), "--output_folder", str(tmp_path / "out")])
    out, err = capsys.readouterr()
    assert code == 0, err
    said = [line for line in out.splitlines() if "illegal instruction" in line]
    assert said == ["pruned: llama.cpp stopped with an illegal instruction on Q8_0: its build uses CPU "
                    "instructions this machine does not run — see docs/install.md."]
    rows = [line for line in out.splitlines() if line.startswith("| ")]
    assert any("decode latency per token (batch 1, 32 new) (llama.cpp)" in row for row in rows)  # the F16 original
    assert any(row.startswith("| speed | decode latency per token (batch 1, 32 new) |") for row in rows)


def test_the_installed_llama_cpp_is_the_portable_build_unless_asked_native():
    """setup.sh builds llama.cpp without -march=native: no AVX-512 (zmm registers) and no AMX tile instruction in its
    CPU kernels, so it runs on any x86-64 CPU with AVX2 (LAYERCUT_LLAMA_NATIVE=1 asks for a native build)."""
    import platform
    import shutil
    import subprocess
    from pathlib import Path

    llama = pytest.importorskip("llama_cpp")
    if os.environ.get("LAYERCUT_LLAMA_NATIVE") == "1" or platform.machine() != "x86_64":
        pytest.skip("a native build was asked for, or this is not x86-64")
    if shutil.which("objdump") is None:
        pytest.skip("objdump (binutils) is not installed here")
    (kernels,) = Path(llama.__file__).parent.glob("lib/libggml-cpu.so")
    code = subprocess.run(["objdump", "-d", str(kernels)], capture_output=True, text=True, check=True).stdout
    assert "ymm" in code  # AVX2 is there (the check reads the right file)
    assert "zmm" not in code and "tdpb" not in code and "ldtilecfg" not in code
