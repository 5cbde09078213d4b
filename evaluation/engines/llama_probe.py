"""Whether this machine's llama.cpp runs each GGUF type a column takes, found once per build and machine.

A tiny random Llama (:mod:`prune.core.tiny`) is written as F16, Q8_0 and Q4_0 and decoded a few tokens in llama.cpp's
child process (:mod:`evaluation.engines.llama_worker`); a type whose child dies gets the same one line a column would
get. The answer is kept in the cache (``llama_probe.json``), keyed by the binding's version, its CPU library (size and
time) and this CPU's flags, so another build or another machine asks again. The Speed tab reads it when *Also in
llama.cpp* is ticked: where llama.cpp runs no type here the box says why and stays off; where it runs some, it says
which not.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
import threading
from pathlib import Path

from prune.core.paths import cache_root

from evaluation.core import child
from evaluation.core.child import ChildDied
from evaluation.engines import llama_cpp

TYPES = ("F16", "Q8_0", "Q4_0")  # a float column, an int8 one, an int4 one (its default type)
_LOCK = threading.Lock()


def _machine_key() -> str:
    """The binding's version, its CPU library's size and time, and this CPU's flags, hashed."""
    import llama_cpp as binding

    libraries = sorted(Path(binding.__file__).parent.glob("lib/libggml-cpu*.so*"))
    stats = [(p.name, p.stat().st_size, int(p.stat().st_mtime)) for p in libraries if p.is_file()]
    try:
        flags = next(line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags"))
    except (OSError, StopIteration):
        flags = ""
    return hashlib.sha256(json.dumps([llama_cpp.version(), stats, flags]).encode()).hexdigest()[:16]


def probe() -> dict[str, str | None]:
    """{GGUF type: None where llama.cpp runs it here, else the one line of how it died}; computed once per build and
    machine (a few seconds), then read."""
    if (missing := llama_cpp.why_not_installed()) is not None:
        return dict.fromkeys(TYPES, missing)
    with _LOCK:
        path = cache_root() / "llama_probe.json"
        key = _machine_key()
        try:
            kept = json.loads(path.read_text())
            if kept.get("key") == key:
                return kept["types"]
        except (OSError, ValueError):
            pass
        found = _run()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"key": key, "types": found}))
        return found


def _run() -> dict[str, str | None]:
    from prune.core.tiny import tiny_llama, tiny_tokenizer

    model, tokenizer = tiny_llama(), tiny_tokenizer()
    found = {}
    with tempfile.TemporaryDirectory(prefix="layercut-llama-probe-") as scratch:
        for file_type in TYPES:
            path = llama_cpp.gguf_file(model, tokenizer, file_type, Path(scratch) / f"probe.{file_type}.gguf")
            job = {"op": "speed", "files": {file_type: str(path)}, "prompt": [1, 2, 3, 4], "new_tokens": 3,
                   "repeats": 1, "threads": 1}
            try:
                child.run(llama_cpp.WORKER, job)
                found[file_type] = None
            except ChildDied as died:
                found[file_type] = llama_cpp.words(died, file_type)
    return found


def checkbox_note(found: dict[str, str | None]) -> tuple[bool, str | None]:
    """(whether llama.cpp runs anything here, one line on what it cannot run or None)."""
    failing = {t: why for t, why in found.items() if why is not None}
    if not failing:
        return True, None
    if len(failing) == len(found):
        return False, next(iter(failing.values()))
    return True, (f"{llama_cpp.LLAMA_CPP} here cannot run {' or '.join(failing)} (its columns get one line each): "
                  + next(iter(failing.values())))


def check() -> tuple[bool, str | None]:
    """:func:`checkbox_note` of :func:`probe`: what the page's *Also in llama.cpp* boxes say when ticked."""
    return checkbox_note(probe())
