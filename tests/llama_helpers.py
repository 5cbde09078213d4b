"""llama.cpp in the tests, always in a child process: its logits read by an independent script, and whether this
machine's llama.cpp runs a GGUF type at all (a native build can fault on a CPU it does not suit: NOTES' AMX machine).
A test that needs a type llama.cpp cannot run here skips, saying why; the crash tests run everywhere."""

from __future__ import annotations

import functools
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from evaluation.core.child import signal_name

DYING_WORKER = Path(__file__).with_name("dying_llama_worker.py")
LOGITS_SCRIPT = """import sys, numpy as np, llama_cpp
path, out, ids = sys.argv[1], sys.argv[2], [int(i) for i in sys.argv[3].split(",")]
llm = llama_cpp.Llama(model_path=path, n_ctx=len(ids) + 8, n_batch=len(ids) + 8, n_threads=2, logits_all=True,
                      verbose=False)
llm.eval(ids)
np.save(out, np.array(llm.scores[: len(ids)], dtype=np.float64))
"""


def llama_logits(path: Path, ids: list[int]) -> np.ndarray:
    """[len(ids), V] llama.cpp's own logits for ``ids`` from ``path``, by a bare llama-cpp-python script in a child;
    the test skips if llama.cpp dies on this file here."""
    pytest.importorskip("llama_cpp")
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "logits.npy"
        done = subprocess.run([sys.executable, "-c", LOGITS_SCRIPT, str(path), str(out), ",".join(map(str, ids))],
                              capture_output=True, text=True)
        if done.returncode < 0:
            pytest.skip(f"llama.cpp cannot run {Path(path).name} on this machine ({signal_name(done.returncode)})")
        assert done.returncode == 0, done.stderr[-2000:]
        return np.load(out)


@functools.cache
def _probe(file_type: str) -> str | None:
    """None if llama.cpp runs a tiny Llama written as ``file_type`` here, else how it died."""
    from conftest import build_tiny_tokenizer, tiny_model
    from evaluation.exports import gguf_file

    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / f"probe.{file_type}.gguf"
        gguf_file.write(tiny_model("llama", 2), build_tiny_tokenizer(), path, file_type)
        done = subprocess.run([sys.executable, "-c", LOGITS_SCRIPT, str(path), str(Path(scratch) / "l.npy"), "1,2,3"],
                              capture_output=True)
    return None if done.returncode == 0 else signal_name(done.returncode)


def needs_llama_type(*file_types: str) -> None:
    """Skip the calling test, saying why, where llama.cpp is missing or cannot run one of ``file_types`` here."""
    pytest.importorskip("llama_cpp")
    for file_type in file_types:
        if (died := _probe(file_type)) is not None:
            pytest.skip(f"llama.cpp here dies on {file_type} ({died}): its build does not suit this CPU")
