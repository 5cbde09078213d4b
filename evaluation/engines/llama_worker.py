"""llama.cpp running models in a process of its own, started by :mod:`evaluation.engines.llama_cpp` (which says why).

Reads one JSON job from stdin and writes JSON lines to stdout: ``{"at": label}`` before it touches a column (so a
death by a signal is pinned on that column), ``{"progress": [fraction, message]}``, then ``{"result": …}``. Jobs:

* ``{"op": "speed", "files": {label: path}, "prompt": [ids], "new_tokens": n, "repeats": r, "threads": t}``: each
  GGUF loaded once, one warm-up each, then the columns taking turns run by run; the result is ``{label: {"prefill":
  [ms…], "decode": [ms per token…]}}``.
* ``{"op": "scores", "path": p, "windows": [[ids]…], "reference": [[ids]…] | null, "threads": t}``: each window's
  summed NLL of every token after the first, from llama.cpp's logits in float64, and how many top-1 next tokens agree
  with ``reference``.

Only the standard library, numpy and llama_cpp (it starts in a fraction of a second): it runs as a script.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

# Run as a script, its own folder comes first on the path, and it holds LayerCut's llama_cpp.py: the binding's first.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
import llama_cpp  # noqa: E402
import numpy as np  # noqa: E402


def say(**line) -> None:
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()


class Engine:
    """One GGUF loaded in llama.cpp; ``logits=True`` keeps every position's logits (scoring), else only the last
    (timing: LayerCut's loop computes the last only)."""

    def __init__(self, path: str, *, context: int, threads: int, logits: bool = False):
        settings = dict(model_path=path, n_ctx=context, n_batch=context, n_ubatch=context, n_threads=threads,
                        n_threads_batch=threads, logits_all=logits)
        try:
            self.llm = llama_cpp.Llama(**settings, verbose=False)
        except ValueError:  # the file did not load: again, with llama.cpp's log on, so that its reason is in stderr
            self.llm = llama_cpp.Llama(**settings, verbose=True)
        self.vocab = self.llm.n_vocab()

    def last_logits(self) -> np.ndarray:
        """[V] the logits after the last token evaluated."""
        return np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(self.llm.ctx, -1), shape=(self.vocab,))

    def run_once(self, prompt: list[int], new_tokens: int) -> tuple[float, float]:
        """(prefill ms, ms of the ``new_tokens`` − 1 greedy decode steps after it), from an empty cache."""
        self.llm.reset()
        start = time.perf_counter()
        self.llm.eval(prompt)
        token = int(self.last_logits().argmax())
        middle = time.perf_counter()
        for _ in range(new_tokens - 1):
            self.llm.eval([token])
            token = int(self.last_logits().argmax())
        return (middle - start) * 1000, (time.perf_counter() - middle) * 1000

    def window_logits(self, window: list[int]) -> np.ndarray:
        """[T, V] every position's logits over one window, from an empty cache."""
        self.llm.reset()
        self.llm.eval(window)
        return np.array(self.llm.scores[: len(window)], dtype=np.float64)


def speed(job: dict) -> dict:
    prompt, new_tokens, repeats = job["prompt"], job["new_tokens"], job["repeats"]
    engines, times = {}, {}
    for label, path in job["files"].items():
        say(at=label)
        engines[label] = Engine(path, context=len(prompt) + new_tokens + 8, threads=job["threads"])
        engines[label].run_once(prompt, 2)  # the warm-up: the first eval is where a fault in a kernel shows
        times[label] = {"prefill": [], "decode": []}
    for r in range(repeats):
        for label, engine in engines.items():
            say(at=label, progress=[(r + 1) / repeats, f"{label}: run {r + 1}/{repeats}"])
            prefill, decode = engine.run_once(prompt, new_tokens)
            times[label]["prefill"].append(prefill)
            times[label]["decode"].append(decode / (new_tokens - 1))
    return times


def scores(job: dict) -> dict:
    windows, reference = job["windows"], job["reference"]
    engine = Engine(job["path"], context=len(windows[0]), threads=job["threads"], logits=True)
    nll, predicted, agree = 0.0, 0, 0
    for index, window in enumerate(windows):
        say(progress=[index / len(windows), f"window {index + 1}/{len(windows)}"])
        logits = engine.window_logits(window)[:-1]  # [T - 1, V]
        targets = np.asarray(window[1:])
        top = logits.max(axis=1, keepdims=True)
        log_norm = np.log(np.exp(logits - top).sum(axis=1)) + top[:, 0]
        nll += float(np.sum(log_norm - logits[np.arange(len(targets)), targets]))
        predicted += len(targets)
        if reference is not None:
            agree += int(np.sum(logits.argmax(axis=1) == np.asarray(reference[index])))
    return {"nll": nll, "tokens": predicted, "agree": agree if reference is not None else None}


def main() -> int:
    job = json.loads(sys.stdin.read())
    say(result={"speed": speed, "scores": scores}[job["op"]](job))
    return 0


if __name__ == "__main__":
    sys.exit(main())
