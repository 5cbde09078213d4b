"""LayerCut's real llama.cpp worker, made to die as a native build dies on a CPU it does not suit: on a GGUF whose
type is named in ``LAYERCUT_TEST_DIE`` (``Q8_0:SIGILL,Q4_0:SIGABRT``) it kills itself by that signal when it loads
the file; ``LAYERCUT_TEST_HANG`` (a type) makes it wait forever there instead (for Stop). Tests only."""

import importlib.util
import os
import signal
import sys
import time
from pathlib import Path

spec = importlib.util.spec_from_file_location(
    "llama_worker", Path(__file__).resolve().parent.parent / "evaluation" / "engines" / "llama_worker.py")
worker = importlib.util.module_from_spec(spec)
spec.loader.exec_module(worker)
deaths = dict(item.split(":") for item in os.environ.get("LAYERCUT_TEST_DIE", "").split(",") if item)
real_init = worker.Engine.__init__


def dying_init(self, path, **kw):
    for file_type, name in deaths.items():
        if path.endswith(f".{file_type}.gguf"):
            if name == "SIGABRT":
                sys.stderr.write("/build/llama.cpp/ggml/src/ggml.c:1234: GGML_ASSERT(ne % 32 == 0) failed\n")
                sys.stderr.flush()
            os.kill(os.getpid(), getattr(signal, name))
    if path.endswith(f".{os.environ.get('LAYERCUT_TEST_HANG')}.gguf"):
        with open(os.environ["LAYERCUT_TEST_HANG_MARK"], "w") as mark:
            mark.write(str(os.getpid()))
        time.sleep(3600)
    real_init(self, path, **kw)


worker.Engine.__init__ = dying_init
sys.exit(worker.main())
