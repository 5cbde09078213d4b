"""llama.cpp's quantizer in a process of its own, started by :mod:`evaluation.exports.llama_quantize` (which says why).

Reads one JSON object from stdin: ``source``, ``target``, ``file_type`` (a ``LLAMA_FTYPE_MOSTLY_*`` suffix),
``threads``, ``output_type`` and ``embedding_type`` (``GGML_TYPE_*`` suffixes or null: llama.cpp's choice) and
``imatrix`` (an ``.npz`` of per-column importances by GGUF tensor name, or null). Writes llama.cpp's log to stderr and
exits with ``llama_model_quantize``'s status. Only the standard library, numpy and llama_cpp: it runs as a script.
"""

from __future__ import annotations

import ctypes
import json
import sys

import llama_cpp
import numpy as np


@llama_cpp.llama_log_callback
def _log(level: int, text: bytes, user_data) -> None:
    """Every line of llama.cpp's log to stderr, which the parent reads for progress, fallbacks and errors."""
    sys.stderr.write(text.decode("utf-8", "replace"))
    sys.stderr.flush()


def _imatrix(path: str) -> tuple[ctypes.Array, list]:
    """``llama_model_imatrix_data`` entries for the tensors in ``path``, ended by a null name; and what they point
    into (kept alive through the call)."""
    columns = np.load(path)
    entries = (llama_cpp.llama_model_imatrix_data * (len(columns.files) + 1))()
    kept = []
    for entry, name in zip(entries, columns.files):
        values = np.ascontiguousarray(columns[name], dtype=np.float32)
        kept += [name.encode(), values]
        entry.name, entry.size = kept[-2], values.size
        entry.data = values.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
    return entries, kept


def main() -> int:
    spec = json.loads(sys.stdin.read())
    llama_cpp.llama_log_set(_log, ctypes.c_void_p(0))
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{spec['file_type']}")
    params.nthread = spec["threads"]
    for field, name in (("output_tensor_type", spec["output_type"]), ("token_embedding_type", spec["embedding_type"])):
        if name:
            setattr(params, field, getattr(llama_cpp, f"GGML_TYPE_{name}"))
    if spec["imatrix"]:
        entries, _kept = _imatrix(spec["imatrix"])
        params.imatrix = ctypes.cast(entries, ctypes.POINTER(llama_cpp.llama_model_imatrix_data))
    return llama_cpp.llama_model_quantize(spec["source"].encode(), spec["target"].encode(), ctypes.byref(params))


if __name__ == "__main__":
    sys.exit(main())
