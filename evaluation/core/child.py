"""A helper process whose death is a message, not ours: native code that may fault (llama.cpp's kernels on a CPU its
build does not suit, a GGML_ASSERT, an out-of-memory abort) runs in a child started with one JSON job on stdin. Its
JSON lines are read with a safe point between them (a Stop kills it); a child that ends without a result raises
:class:`ChildDied`, saying the last thing it had announced it was working ``at``.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

POLL_S = 0.25  # the longest wait between safe points


class ChildDied(Exception):
    """The child ended without a result: ``code`` its exit status (negative: the signal that ended it), ``at`` what it
    last said it was working on (None: nothing yet), ``log`` its stderr."""

    def __init__(self, code: int, at: str | None, log: str):
        super().__init__(f"child ended with {signal_name(code)} at {at!r}")
        self.code, self.at, self.log = code, at, log


def signal_name(code: int) -> str:
    """'SIGILL' for a child a signal ended, else 'status N'."""
    if code < 0:
        with contextlib.suppress(ValueError):
            return signal.Signals(-code).name
        return f"signal {-code}"
    return f"status {code}"


def run(script: Path | list[str], job: dict, *, check: Callable[[], None] = lambda: None,
        on_line: Callable[[dict], None] = lambda line: None) -> object:
    """Run ``script`` (a Python file, or a whole command) on ``job``; each line it writes goes to ``on_line``, ``check``
    runs between lines and at least every ``POLL_S`` (if it raises, the child is killed and the error goes on); the
    child's ``result`` is returned."""
    command = [sys.executable, str(script)] if isinstance(script, Path) else script
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}  # the packages this process sees
    with tempfile.TemporaryFile("w+", errors="replace") as log:
        child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True,
                                 errors="replace", env=env)
        lines: queue.Queue = queue.Queue()
        threading.Thread(target=_pump, args=(child.stdout, lines), daemon=True).start()
        at, result = None, None
        try:
            with contextlib.suppress(BrokenPipeError):  # a child that ended at once says why in its status
                child.stdin.write(json.dumps(job))
                child.stdin.close()
            while (line := _next(lines)) is not None:
                check()
                if line:
                    at = line.get("at", at)
                    result = line.get("result", result)
                    on_line(line)
        except BaseException:
            child.kill()
            raise
        finally:
            child.wait()
        if child.returncode != 0 or result is None:
            log.seek(0)
            raise ChildDied(child.returncode, at, log.read()[-4000:])
    return result


def _pump(stream, lines: queue.Queue) -> None:
    """Each JSON line the child writes (anything else is skipped), then None when it closes its end."""
    for text in stream:
        with contextlib.suppress(ValueError):
            if isinstance(line := json.loads(text), dict):
                lines.put(line)
    lines.put(None)


def _next(lines: queue.Queue) -> dict | None:
    """The next line, {} after ``POLL_S`` without one, None at the end."""
    try:
        return lines.get(timeout=POLL_S)
    except queue.Empty:
        return {}
