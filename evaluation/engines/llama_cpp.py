"""llama.cpp as a second engine on a CPU: a column written as GGUF in the type that matches how it is stored,
loaded by llama.cpp (llama-cpp-python), timed on the same prompt and new tokens as LayerCut's own loop, and scored
from llama.cpp's own logits.

* **Timing** (:func:`measure_speed`): batch 1, the prompt through one ``eval`` (the prefill), then greedy decode
  steps of one token each, the next token the argmax of llama.cpp's last logits, as :func:`evaluation.measure.speed.
  _run_once` does in PyTorch; llama.cpp's threads are the cores LayerCut's torch uses; the columns take turns, run
  by run. What a decoded token reads (:func:`decode_bytes`) is counted from the GGUF's own tensors: every matrix in
  its stored type, one row of the token embedding (the whole of it where it is the output layer too), and llama.cpp's
  default KV cache (F16) at the mean context.
* **Quality** (:func:`window_scores`): each perplexity window evaluated with every position's logits; its NLL is
  summed as :func:`evaluation.quality.perplexity.window_nll` sums it (every token after the first predicted), and its
  top-1 next tokens are compared with the PyTorch column's on the same window.

A column llama.cpp cannot run (an encoder, dropped attention or MLP blocks, factored low rank: what the GGUF writer
refuses, :func:`evaluation.exports.gguf_file.refusal`) is said in one line by :func:`why_not`. An architecture
LayerCut's writer does not write (a mixture of experts, a hybrid) is converted by llama.cpp's own converter.

**llama.cpp runs in a child process** (:mod:`evaluation.engines.llama_worker`, through :mod:`evaluation.core.child`),
never in the server's: a build whose kernels this CPU cannot execute (a native build's AMX repack of Q8_0/Q4_0 on some
virtual machines raises SIGILL), a GGML_ASSERT or an out-of-memory abort ends the child, and that column gets one line
while every other row and column is still measured. The child loads each file once and times inside itself, so its
start (0.25–0.4 s here: Python, numpy, the binding) is in no figure; a Stop kills it.
"""

from __future__ import annotations

import math
import os
import re
import threading
from pathlib import Path

import gguf
import torch

from prune.core.architectures import CAUSAL, kind_of
from prune.core.errors import InvalidInput
from prune.core.paths import cache_root, safe_name
from prune.quantize.weights import QUANTIZED_FIELD

from evaluation.core import child
from evaluation.core.child import ChildDied, signal_name
from evaluation.exports import gguf_file as gguf_files
from evaluation.exports.gguf_file import LLAMA_CPP
from evaluation.measure.measurement import Measurement
from evaluation.measure.speed import GROUP, LIMIT, decode_name, summary

SUFFIX = f" ({LLAMA_CPP})"
INT4_TYPES = ("Q4_0", "Q4_K_M", "Q4_K_S")  # the GGUF types an int4 column runs in (the first by default)
KV_BYTES = 2  # llama.cpp's default KV cache type: F16
GGUF_CACHE_BYTES = 8 * 2**30  # the columns' GGUFs kept for the next measurement
_LOCK = threading.Lock()  # llama.cpp's own threads take every core: one engine run at a time from this process
WORKER = Path(__file__).with_name("llama_worker.py")  # llama.cpp runs in a child: a fault there ends only the child
NOTE = "llama_cpp_note"  # the details field that says why a column did not run in llama.cpp
_ASSERT = re.compile(r"GGML_ASSERT\([^\n]*\) failed")
_LOAD = re.compile(r"error loading model: ([^\n]*)")


class EngineDied(InvalidInput):
    """llama.cpp's process ended without its result (a signal, an abort): the message is the one line to show."""


def why_not_installed() -> str | None:
    """None when llama.cpp's Python binding is importable here, else one line on how to get it."""
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        return f"{LLAMA_CPP} is not installed here: `bash setup.sh` installs llama-cpp-python."
    return None


def why_not(model) -> str | None:
    """Why llama.cpp cannot run ``model`` (one line), or None."""
    if kind_of(model) != CAUSAL:
        return f"{LLAMA_CPP} runs causal LMs here; this model fills blanks."
    return why_not_installed() or gguf_files.refusal(model)


def column_type(model, int4_type: str = INT4_TYPES[0]) -> str:
    """The GGUF type that stores ``model`` as it is stored in LayerCut: int8 weights → Q8_0, int4 → ``int4_type``,
    dense bfloat16 → BF16, any other dense model → F16."""
    bits = (getattr(model.config, QUANTIZED_FIELD, None) or {}).get("bits")
    if bits in (8, 4):
        return "Q8_0" if bits == 8 else int4_type
    return "BF16" if next(model.parameters()).dtype == torch.bfloat16 else "F16"


def gguf_file(model, tokenizer, file_type: str, path: Path, *, tokenizer_gguf: str | None = None,
              calibration=None, progress=None) -> Path:
    """``model`` as a GGUF of ``file_type`` at ``path``, written once (a file already there is the same column's), by
    the quantizer that writes the type (``evaluation.exports.gguf_file``: a K-quant by llama.cpp's, with an importance
    matrix from ``calibration``)."""
    if path.is_file():
        os.utime(path)  # recently used: the cache keeps it longest
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    return gguf_files.write(model, tokenizer, path, file_type, tokenizer_gguf=tokenizer_gguf, calibration=calibration,
                            progress=progress).path


def decode_bytes(path: Path, context: float) -> int:
    """Bytes llama.cpp reads to decode one token at ``context`` positions (see the module docstring): of a mixture of
    experts' ``*_exps`` tensors, the k of E experts a token is routed to; KV only in the layers with attention (a
    hybrid's per-layer KV head counts, 0 where a layer has none)."""
    reader = gguf.GGUFReader(path)
    arch = str(bytes(reader.fields["general.architecture"].parts[-1]), "utf-8")
    experts, used = _field(reader, f"{arch}.expert_count"), _field(reader, f"{arch}.expert_used_count")
    share = used / experts if experts and used else 1.0
    tensors = {t.name: int(t.n_bytes) * (share if "_exps." in t.name else 1.0) for t in reader.tensors}
    embedding = next(t for t in reader.tensors if t.name == "token_embd.weight")
    weights = sum(tensors.values())
    if "output.weight" in tensors:  # the embedding is read one row a token; the output layer whole
        weights -= tensors["token_embd.weight"] - tensors["token_embd.weight"] // int(embedding.shape[-1])
    layers = int(reader.fields[f"{arch}.block_count"].parts[-1][0])
    kv_heads = _per_layer(reader, f"{arch}.attention.head_count_kv", layers) or _per_layer(
        reader, f"{arch}.attention.head_count", layers)
    head_dim = _field(reader, f"{arch}.attention.key_length") or \
        _field(reader, f"{arch}.embedding_length") // max(_per_layer(reader, f"{arch}.attention.head_count", layers))
    return int(weights + 2 * sum(kv_heads) * head_dim * context * KV_BYTES)


def _per_layer(reader: gguf.GGUFReader, name: str, layers: int) -> list[int] | None:
    """A field that is one number for every layer, or an array of one per layer (a hybrid's), as a list."""
    field = reader.fields.get(name)
    if field is None:
        return None
    values = [int(field.parts[i][0]) for i in field.data]
    return values if len(values) == layers else values[:1] * layers


def _field(reader: gguf.GGUFReader, name: str) -> int | None:
    field = reader.fields.get(name)
    return None if field is None else int(field.parts[-1][0])


def words(died: ChildDied, file_type: str) -> str:
    """One line for a llama.cpp child that ended without its result."""
    name = signal_name(died.code)
    if name == "SIGILL":
        return (f"{LLAMA_CPP} stopped with an illegal instruction on {file_type}: its build uses CPU instructions "
                "this machine does not run — see docs/install.md.")
    if name == "SIGABRT":
        found = _ASSERT.search(died.log)
        return f"{LLAMA_CPP} aborted on {file_type}" + (f" ({found[0]})." if found else
                                                         " (an assertion or out of memory).")
    if name in ("SIGSEGV", "SIGBUS"):
        return f"{LLAMA_CPP} crashed ({name}) on {file_type}; the other columns still ran."
    if name == "SIGKILL":
        return f"{LLAMA_CPP} was killed ({name}, likely out of memory) on {file_type}."
    if found := _LOAD.search(died.log):  # its loader's reason: a tensor's name and shape, never a path
        return f"{LLAMA_CPP} cannot load this column's {file_type} GGUF: {found[1].strip()[:200]}"
    last = next((line.strip() for line in reversed(died.log.splitlines()) if line.strip()), "no message")
    return f"{LLAMA_CPP} ended ({name}) on {file_type}: {Path(last).name[:160]}"


def measure_speed(files: dict[str, Path], *, prompt_len: int, new_tokens: int, repeats: int, seed: int = 0,
                  vocab: int, bandwidth_limit, check=lambda: None, report=lambda fraction, message: None
                  ) -> list[Measurement]:
    """Batch-1 prefill and decode of each GGUF in ``{label: path}`` in llama.cpp's own process
    (:mod:`evaluation.engines.llama_worker`), the columns taking turns run by run after one warm-up each; each decode
    row with its bytes per token, floor and share of ``bandwidth_limit`` (``evaluation.measure.bandwidth``), and
    those three as rows of their own. A column whose llama.cpp dies (a signal, an abort) is one row with its reason
    (``details[NOTE]``); the others are measured again without it. ``check()`` between runs (a Stop kills the child)."""
    prompt = torch.randint(0, vocab, (prompt_len,), generator=torch.Generator().manual_seed(seed)).tolist()
    job = {"op": "speed", "prompt": prompt, "new_tokens": new_tokens, "repeats": repeats,
           "threads": torch.get_num_threads()}
    left, why = dict(files), {}
    times = {}
    with _LOCK:
        while left and not times:
            try:
                times = child.run(WORKER, {**job, "files": {k: str(v) for k, v in left.items()}}, check=check,
                                  on_line=lambda line: "progress" in line and report(*line["progress"]))
            except ChildDied as died:
                dead = [died.at] if died.at in left else list(left)
                for label in dead:
                    why[label] = words(died, file_type(left.pop(label)))
    context = prompt_len + new_tokens / 2
    rows = [row for label, path in files.items() if label in times
            for row in _rows(label, path, times[label]["prefill"], times[label]["decode"], prompt_len, new_tokens,
                             context, bandwidth_limit)]
    return rows + [Measurement(decode_name(1, new_tokens) + SUFFIX, math.nan, "ms", False, model=label, group=GROUP,
                               details={NOTE: reason}) for label, reason in why.items()]


def _rows(label: str, path: Path, prefill: list[float], decode: list[float], prompt_len: int, new_tokens: int,
          context: float, limit) -> list[Measurement]:
    """The engine's rows of one column: prefill, decode (with its bytes, floor and share) and the limit rows."""
    common = {"batch": 1, "prompt_len": prompt_len, "device": "cpu", "engine": LLAMA_CPP, "gguf_type": file_type(path)}
    read = decode_bytes(path, context)
    floor = limit.floor_ms(read)
    decoded = summary(decode_name(1, new_tokens) + SUFFIX, decode, "ms", False, label,
                      {**common, "new_tokens": new_tokens, "context": context})
    found = {"bytes_per_token": read, "floor_ms": floor, "limit_share": floor / decoded.value,
             "bandwidth_GBps": limit.bytes_per_s / 1e9, "bandwidth_how": limit.how}
    where = f" (batch 1, {new_tokens} new){SUFFIX}"
    details = {**common, "context": context, **found}
    return [summary(f"prefill latency (batch 1, {prompt_len} tokens){SUFFIX}", prefill, "ms", False, label, common),
            Measurement(decoded.name, decoded.value, decoded.unit, False, decoded.spread, decoded.spread_kind,
                        label, GROUP, details={**decoded.details, **found}),
            Measurement(f"bytes read per decoded token{where}", read / 2**20, "MiB", False, model=label, group=LIMIT,
                        details=details),
            Measurement(f"floor per decoded token at {limit.bytes_per_s / 1e9:.1f} GB/s{where}", floor, "ms", False,
                        model=label, group=LIMIT, details=details),
            Measurement(f"share of the bandwidth limit reached{where}", 100 * floor / decoded.value, "%", True,
                        model=label, group=LIMIT, details=details)]


def file_type(path: Path) -> str:
    """The GGUF's file type as llama.cpp names it (``general.file_type``), else its name's last part."""
    field = gguf.GGUFReader(path).fields.get("general.file_type")
    if field is not None:
        return gguf.LlamaFileType(int(field.parts[-1][0])).name.removeprefix("MOSTLY_")
    return path.suffixes[-2].lstrip(".") if len(path.suffixes) > 1 else "?"


def window_scores(path: Path, windows: torch.Tensor, reference: list[torch.Tensor] | None = None,
                  check=lambda: None) -> dict:
    """llama.cpp's summed NLL over ``windows`` [W, T] (every token after the first predicted), the tokens predicted,
    and, given the PyTorch column's top-1 next tokens per window (``reference``: [T − 1] each), how many agree; in
    llama.cpp's own process. A llama.cpp that dies is :class:`EngineDied`, its reason in one line."""
    if windows.numel() == 0:
        raise InvalidInput("The text is shorter than one window.")
    job = {"op": "scores", "path": str(path), "windows": windows.tolist(), "threads": torch.get_num_threads(),
           "reference": None if reference is None else [r.tolist() for r in reference]}
    with _LOCK:
        try:
            return child.run(WORKER, job, check=check)
        except ChildDied as died:
            raise EngineDied(words(died, file_type(path))) from None


def cache_path(model_key: str, recipe_key: str, file_type: str) -> Path:
    """Where a column's GGUF is kept (the server's cache: never offered to a visitor), the oldest files past
    ``GGUF_CACHE_BYTES`` removed first."""
    folder = cache_root() / "gguf"
    if folder.is_dir():
        files = sorted(folder.glob("*.gguf"), key=lambda p: p.stat().st_mtime, reverse=True)
        total = 0
        for path in files:
            total += path.stat().st_size
            if total > GGUF_CACHE_BYTES:
                path.unlink(missing_ok=True)
    return folder / f"{safe_name(model_key, 40)}-{recipe_key}.{file_type}.gguf"


def version() -> str:
    """The installed llama-cpp-python's version (in cache keys: another llama.cpp may compute other numbers)."""
    from importlib.metadata import version as installed

    return installed("llama_cpp_python")
