"""llama.cpp's own quantizer (``llama_model_quantize``, from llama-cpp-python) on a GGUF LayerCut wrote in F16 or BF16:
its K-quants and legacy types, each tensor's type chosen by llama.cpp's rules (``llama_tensor_get_type``).

Followed: llama.cpp as vendored in llama-cpp-python 0.3.36 (``src/llama-quant.cpp``, ``tools/quantize/quantize.cpp``).
It runs in a child process (:mod:`evaluation.exports.llama_child`) because

* a GGML_ASSERT inside llama.cpp aborts its process: an output or embedding type whose blocks do not split the rows
  does (``gguf.cpp``: "tensor row size not divisible by block size of new type"), and would take a server with it;
* a Stop must end a quantization that runs for minutes inside one C call: the child is killed;
* llama.cpp logs every tensor through a process-wide callback: the child's log is its own stderr, read here for
  progress (``[  12/ 201] blk.1.attn_q.weight``), the fallbacks and the error.

Where rows do not split into a type's blocks (K-quants: 256 values), llama.cpp falls back per tensor
(``tensor_type_fallback``: q4_K → q5_0, q5_K → q5_1, q6_K → q8_0, q2_K/q3_K → q4_0) and logs it; :class:`Quantized`
counts them. llama.cpp does not fall back for an output or embedding type given explicitly (``llama_tensor_get_type``
returns it as is): :func:`quantized` refuses such a type for such a shape before starting.

An importance matrix (``params.imatrix``: per GGUF tensor, the mean square of each input column over calibration
text, as ``llama-imatrix`` computes and ``llama-quantize`` divides) is passed as a null-terminated array of
``llama_model_imatrix_data``; llama.cpp weights each value's rounding error by it.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import json
import os
import queue
import re
import subprocess
import sys
import tempfile
import threading
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np

from prune.core.errors import InvalidInput, MissingDependency, quoted

from evaluation.core.jobs import Progress

CHILD = Path(__file__).with_name("llama_child.py")
# Left out of the file types llama.cpp names (gguf-py's LlamaFileType mirrors llama.h's llama_ftype):
# IQ*: most are refused without an importance matrix ("this quantization requires an imatrix"), the rest are made to
#   be used with one; Q2_K_S: its q2_K tensors require one (tensor_requires_imatrix);
# TQ1_0, TQ2_0: ternary, for models trained ternary; Q1_0, Q2_0: experimental, and gguf 0.19 (so transformers) cannot
#   read their tensors; MXFP4_MOE: MXFP4 for MoE experts only (a dense model's tensors become Q8_0); NVFP4: this
#   llama.cpp's quantizer refuses it ("invalid output file type 39");
# F16, BF16: no quantization; LayerCut writes them itself (they are the quantizer's input); ALL_F32, GUESSED: no type.
_LEFT_OUT = re.compile(r"IQ.*|Q2_K_S|TQ.*|Q1_0|Q2_0|MXFP4_MOE|NVFP4|F16|BF16|ALL_F32|GUESSED")
_PROGRESS = re.compile(r"\[\s*(\d+)/\s*(\d+)\]\s+(\S+)")
_FALLBACK = re.compile(r"ncols\s+(\d+) not divisible by\s+(\d+) \(required for type\s+(\S+)\).*falling back to\s+(\S+)")
_FAILED = re.compile(r"failed to quantize: (.*)")
MISSING = "llama.cpp's quantizer is not installed here: `bash setup.sh` installs llama-cpp-python."


def size_order(name: str) -> tuple:
    """Largest first: the bits a name says, K-quants before the legacy types of as many bits, then the L, M, S mixes,
    and _1 (with an offset) before _0."""
    last = name[-1]
    return (-int(re.search(r"\d+", name).group()), "_K" not in name, "LMS".find(last),
            -int(last) if last.isdigit() else 0)


LLAMA_TYPES: tuple[str, ...] = tuple(sorted(
    (n for n in (t.name.removeprefix("MOSTLY_") for t in gguf.LlamaFileType) if not _LEFT_OUT.fullmatch(n)),
    key=size_order))


def tensor_type(file_type: str) -> str:
    """The ggml type that most of a file type's tensors get: Q4_K_M → Q4_K."""
    return re.sub(r"_[LMS]$", "", file_type)


TENSOR_TYPES = ("F32", "F16", "BF16", *dict.fromkeys(tensor_type(t) for t in LLAMA_TYPES))  # output / embedding


@functools.cache
def _binding():
    """llama-cpp-python, or None where it is not importable."""
    try:
        module = importlib.import_module("llama_cpp")
    except Exception:  # not installed, or its shared library does not load here
        return None
    return module if hasattr(module, "llama_model_quantize") else None


def why_not() -> str | None:
    """None when llama.cpp's quantizer is importable here, else a one-line reason."""
    return None if _binding() is not None else MISSING


def version() -> str:
    """The installed llama-cpp-python's version, for the model card."""
    return getattr(_binding(), "__version__", "?")


def takes_imatrix() -> bool:
    """Whether this llama-cpp-python passes an importance matrix to llama.cpp (``llama_model_imatrix_data``)."""
    return hasattr(_binding(), "llama_model_imatrix_data")


@dataclass(frozen=True)
class Quantized:
    """A GGUF llama.cpp wrote, and what it chose."""

    path: Path
    file_type: str
    types: dict[str, int]  # ggml type name (Q4_K, F32) → tensors of that type in the file
    fallbacks: dict[tuple[str, str], int]  # (wanted, written) → tensors whose rows do not split into wanted's blocks

    def describe(self) -> str:
        """The tensor types in the file and the fallbacks, if any, in a sentence or two."""
        types = ", ".join(f"{name} × {count}" for name, count in sorted(self.types.items(), key=lambda kv: -kv[1]))
        moved = " and ".join(f"from {wanted} to {written} for {count} tensor{'s' * (count > 1)}"
                             for (wanted, written), count in self.fallbacks.items())
        blocks = " or ".join(sorted({str(gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[w]][0])
                                     for w, _ in self.fallbacks}))
        return f"Tensor types: {types}." + (f" llama.cpp fell back {moved}: their rows are not a multiple of the "
                                            f"type's {blocks}-value blocks." if moved else "")


def quantize(source: Path, target: Path, file_type: str, *, threads: int | None = None, output_type: str | None = None,
             embedding_type: str | None = None) -> Path:
    """Quantize the F16/BF16 GGUF ``source`` into ``target`` with llama.cpp's quantizer; llama.cpp's default output
    and embedding types unless given (ggml type names: Q6_K, Q8_0, F16…). A refusal is one line."""
    return quantized(source, target, file_type, threads=threads, output_type=output_type,
                     embedding_type=embedding_type).path


def quantized(source: Path, target: Path, file_type: str, *, threads: int | None = None,
              output_type: str | None = None, embedding_type: str | None = None,
              imatrix: Mapping[str, np.ndarray] | None = None, progress: Progress | None = None) -> Quantized:
    """:func:`quantize`, with what llama.cpp chose; ``imatrix``: per GGUF tensor name, the mean square of each input
    column; ``progress`` hears of each tensor done and may raise (a Stop) to end the quantizer at once."""
    source, target = Path(source), Path(target)
    spec = _checked(source, file_type, output_type, embedding_type, imatrix is not None)
    spec["threads"] = threads or _cores()
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".llama-quantize-", dir=target.parent) as scratch:
        spec.update(source=str(source), target=str(Path(scratch) / target.name), imatrix=None)
        if imatrix is not None:
            spec["imatrix"] = str(Path(scratch) / "imatrix.npz")
            np.savez(spec["imatrix"], **{name: np.asarray(v, dtype=np.float32) for name, v in imatrix.items()})
        code, log = _run(spec, progress)
        if code != 0:
            raise InvalidInput(_failure(file_type, code, log))
        os.replace(spec["target"], target)
    return Quantized(target, file_type, dict(Counter(t.tensor_type.name for t in _tensors(target))),
                     dict(Counter((m[3].upper(), m[4].upper()) for m in map(_FALLBACK.search, log) if m)))


def _cores() -> int:
    """The cores this process may run on (llama.cpp's own default counts the machine's)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _checked(source: Path, file_type: str, output_type: str | None, embedding_type: str | None,
             imatrix: bool) -> dict:
    """The child's arguments, each checked: a one-line refusal before llama.cpp starts."""
    if file_type not in LLAMA_TYPES:
        raise InvalidInput(f"GGUF type {quoted(file_type)} is not one llama.cpp's quantizer writes here: "
                           f"{', '.join(LLAMA_TYPES)}.")
    if why_not():
        raise MissingDependency(why_not())
    if imatrix and not takes_imatrix():
        raise MissingDependency(f"llama-cpp-python {version()} cannot pass an importance matrix to llama.cpp.")
    if not hasattr(_binding(), f"LLAMA_FTYPE_MOSTLY_{file_type}"):
        raise InvalidInput(f"The installed llama.cpp (llama-cpp-python {version()}) has no {file_type} file type.")
    spec = {"file_type": file_type, "output_type": None, "embedding_type": None}
    tensors = {t.name: t for t in _tensors(source)}
    for key, name, tensor in (("output_type", output_type, "output.weight"),
                              ("embedding_type", embedding_type, "token_embd.weight")):
        if name is not None:
            spec[key] = _tensor_type_checked(name, tensors.get(tensor))
    return spec


def _tensor_type_checked(name: str, tensor) -> str:
    """``name`` as llama.cpp's ggml type for an output or embedding tensor given explicitly; refused where its blocks
    do not split the tensor's rows (llama.cpp would abort: it does not fall back for these)."""
    if not isinstance(name, str) or name.upper() not in TENSOR_TYPES:
        raise InvalidInput(f"Tensor type {quoted(name)} is not one of {', '.join(TENSOR_TYPES)}.")
    name = name.upper()
    block = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[name]][0]
    if tensor is not None and int(tensor.shape[0]) % block:
        raise InvalidInput(f"llama.cpp cannot write {tensor.name} as {name}: its rows hold {int(tensor.shape[0])} "
                           f"values, not a multiple of {name}'s {block}-value blocks.")
    return name


def _tensors(path: Path) -> list:
    """The tensors of a GGUF file (read lazily), or a one-line refusal when it is not one."""
    try:
        return gguf.GGUFReader(path).tensors
    except (OSError, ValueError) as err:
        raise InvalidInput(f"{Path(path).name} is not a GGUF file llama.cpp's quantizer can read: {err}") from None


def _run(spec: dict, progress: Progress | None) -> tuple[int, list[str]]:
    """Run the child on ``spec``: its exit status and log lines. ``progress`` hears of each tensor done (and every
    quarter second, as a safe point); if it raises, the child is killed."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}  # the llama_cpp this process sees
    child = subprocess.Popen([sys.executable, str(CHILD)], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True, errors="replace", env=env)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=_pump, args=(child.stderr, lines), daemon=True).start()
    log: list[str] = []
    try:
        with contextlib.suppress(BrokenPipeError):  # a child that ended at once says why in its log and status
            child.stdin.write(json.dumps(spec))
            child.stdin.close()
        while (line := _next(lines)) is not None:
            log += [line] if line else []
            if progress is not None and (not line or _PROGRESS.search(line)):  # a tensor done, or a quiet while
                _report(progress, log, spec["file_type"])
    except BaseException:
        child.kill()
        raise
    finally:
        child.wait()
    return child.returncode, log


def _pump(stream, lines: queue.Queue) -> None:
    """Each line the child writes, then None when it closes its end."""
    for line in stream:
        lines.put(line.rstrip("\n"))
    lines.put(None)


def _next(lines: queue.Queue) -> str | None:
    """The next line, "" after a quarter second without one, None at the end."""
    try:
        return lines.get(timeout=0.25)
    except queue.Empty:
        return ""


def _report(progress: Progress, log: list[str], file_type: str) -> None:
    """The last tensor llama.cpp logged as done, as a fraction of all."""
    done = next((m for m in map(_PROGRESS.search, reversed(log)) if m), None)
    if done is None:
        progress(0.0, f"llama.cpp is reading the model to quantize it to {file_type}…")
    else:
        index, count = int(done[1]), int(done[2])
        progress(index / count, f"llama.cpp quantizing to {file_type}: {index} of {count} tensors done ({done[3]})")


def _failure(file_type: str, code: int, log: list[str]) -> str:
    """One line for a quantization that failed: llama.cpp's own reason, else how its process ended."""
    reason = next((m[1].strip() for m in map(_FAILED.search, reversed(log)) if m), None)
    if reason:
        return f"llama.cpp could not quantize to {file_type}: {reason}"
    last = next((line.strip() for line in reversed(log) if line.strip()), "no message")
    ended = f"signal {-code}" if code < 0 else f"status {code}"
    return f"llama.cpp stopped ({ended}) while quantizing to {file_type}: {last[:200]}"
