"""llama.cpp's portable build (what setup.sh installs) against a native one (-march=native), side by side: the
default model as F16, Q8_0 and Q4_0, each timed in LayerCut's llama.cpp child by one build and then the other, turn
by turn, on the same files and prompt.

    .venv/bin/python -m benchmarks.llama_builds --native WHEEL [--portable WHEEL] [--repeats 5]

Each wheel is unpacked into a folder of its own and put first on the child's path; a build that dies on a type (a
native build's AMX kernels on some CPUs) is recorded with its one line. Writes ``benchmarks/results/llama_builds.json``.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks import harness
from benchmarks.record import write_result

PROMPT, NEW = 128, 32
TYPES = ("F16", "Q8_0", "Q4_0")


def unpacked(wheel: Path, folder: Path) -> Path:
    """The wheel's files in ``folder`` (a wheel is a zip: no install needed to import it from there)."""
    subprocess.run([sys.executable, "-m", "zipfile", "-e", str(wheel), str(folder)], check=True)
    return folder


def timed(build: Path, path: Path, prompt: list[int], threads: int) -> dict:
    """One run of the child with ``build`` first on its path: prefill and decode ms of ``path``."""
    from evaluation.core import child
    from evaluation.engines import llama_cpp

    command = [sys.executable, "-c", f"import sys, runpy; sys.path.insert(0, {str(build)!r}); "
                                     f"runpy.run_path({str(llama_cpp.WORKER)!r}, run_name='__main__')"]
    job = {"op": "speed", "files": {"x": str(path)}, "prompt": prompt, "new_tokens": NEW, "repeats": 1,
           "threads": threads}
    found = child.run(command, job)["x"]
    return {"prefill_ms": found["prefill"][0], "decode_ms": found["decode"][0]}


def system_info(build: Path) -> str:
    script = f"import sys; sys.path.insert(0, {str(build)!r}); import llama_cpp; " \
             "print(llama_cpp.llama_print_system_info().decode())"
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True).stdout.strip()


def main() -> None:
    parser = harness.parser(__doc__)
    parser.add_argument("--native", type=Path, required=True, help="a llama-cpp-python wheel built GGML_NATIVE=ON")
    parser.add_argument("--portable", type=Path, default=None, help="default: the one setup.sh built")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    import torch

    from evaluation.core.child import ChildDied
    from evaluation.engines import llama_cpp

    portable = args.portable or next((Path.home() / ".cache/layercut/wheels/llama-cpp-portable").glob("*.whl"))
    backend, spec, info = harness.default_model()
    base = backend.models.base(spec)
    scratch = Path(tempfile.mkdtemp(prefix="layercut-llama-builds-"))
    builds = {"portable": unpacked(portable, scratch / "portable"), "native": unpacked(args.native, scratch / "native")}
    files = {t: llama_cpp.gguf_file(base.model, base.tokenizer, t, scratch / f"default.{t}.gguf") for t in TYPES}
    prompt = torch.randint(0, base.model.config.vocab_size, (PROMPT,), generator=torch.Generator().manual_seed(0))
    threads = torch.get_num_threads()
    runs = {b: {t: [] for t in TYPES} for b in builds}
    died = {}
    with harness.Clock() as clock:
        for _ in range(args.repeats):
            for file_type, path in files.items():
                for name, build in builds.items():
                    if (name, file_type) in died:
                        continue
                    try:
                        runs[name][file_type].append(timed(build, path, prompt.tolist(), threads))
                    except ChildDied as err:
                        died[name, file_type] = llama_cpp.words(err, file_type)
    result = {"builds": {name: {"system_info": system_info(build)} for name, build in builds.items()},
              "types": {}, "seconds": round(clock.wall)}
    for file_type in TYPES:
        row = {}
        for name in builds:
            samples = runs[name][file_type]
            row[name] = {"died": died[name, file_type]} if (name, file_type) in died else {
                "decode_ms": round(statistics.median(s["decode_ms"] for s in samples), 2),
                "prefill_ms": round(statistics.median(s["prefill_ms"] for s in samples), 1)}
        if all("decode_ms" in v for v in row.values()):
            row["portable_over_native"] = {k: round(row["portable"][k] / row["native"][k], 3)
                                           for k in ("decode_ms", "prefill_ms")}
        result["types"][file_type] = row
    write_result("llama_builds", result, model=info.name,
                 how=f"batch 1, {PROMPT}-token prompt, {NEW} new tokens, {threads} threads, median of {args.repeats} "
                     "runs, a fresh llama.cpp child per run (builds and types taking turns)")
    print(result)


if __name__ == "__main__":
    main()
