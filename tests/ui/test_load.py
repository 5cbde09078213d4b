"""Many visitors at once: 20 gradio_client sessions on one server, each with its own cut.

The server's model is a tiny random Llama of 30 layers (the default model's count, so the same 20 cuts): what is
tested is the sharing between sessions, not the model, and on the 135 M model this test took about three minutes.

Each session opens the page (startup), cuts its own block, generates and measures memory.
Loopback only; bounded in count (20 sessions, one pass each) and time (each call times
out). What is asserted: no errors, every result describes its own session's cut, and the
cuts cost no memory of their own (they share the base model's weights). Wall time and the
process's peak memory are printed, not asserted.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import free_port, tiny_model
from evaluation.measure import memory as memory_module

pytestmark = pytest.mark.slow

SESSIONS = 20
CALL_TIMEOUT_S = 600


def _peak_rss_bytes() -> int:
    return memory_module._proc_status("VmHWM") or 0


def test_twenty_visitors_each_measure_their_own_cut(capsys, tmp_path, tiny_tokenizer):
    import app
    from evaluation.serving.backend import Backend
    from evaluation.core.pool import ModelSpec
    from gradio_client import Client

    tiny_model("llama", 30).save_pretrained(tmp_path)
    tiny_tokenizer.save_pretrained(tmp_path)
    backend = Backend(device="cpu")
    demo = app.build_demo(backend, default_model=ModelSpec(str(tmp_path)))
    port = free_port()
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True,
                **app.launch_options())
    url = f"http://127.0.0.1:{port}/"
    errors, results, lock = [], {}, threading.Lock()

    def visit(i: int) -> None:
        start, size = i % 24, 1 + i % 5  # 20 different cuts of 1…5 layers
        try:
            # A browser waits for the server's answer; gradio_client's own httpx calls (the config,
            # joining the queue) time out after 5 s, which 20 sessions on 2 busy cores can exceed.
            client = Client(url, verbose=False, download_files=False,
                            httpx_kwargs={"timeout": CALL_TIMEOUT_S})
            client.submit("angular", api_name="/startup").result(timeout=CALL_TIMEOUT_S)
            _range, banner, *_ = client.predict([start, start + size], api_name="/set_cut")
            generated = client.submit("What is the capital of France?", 8, 0, 1, 0,
                                      api_name="/generate").result(timeout=CALL_TIMEOUT_S)
            table, _plot, _note, measured = client.submit(api_name="/memory").result(timeout=CALL_TIMEOUT_S)
            assert f"A: cut {start}" in measured, measured  # this visitor's own cut, named
            with lock:
                results[i] = (start, size, banner, generated, table)
        except Exception as err:  # counted, and shown below
            with lock:
                errors.append(f"session {i}: {type(err).__name__}: {err}")

    try:
        before = _peak_rss_bytes()
        began = time.perf_counter()
        with ThreadPoolExecutor(max_workers=SESSIONS) as pool:
            list(pool.map(visit, range(SESSIONS)))
        wall = time.perf_counter() - began
    finally:
        demo.close()

    assert not errors, errors
    assert len(results) == SESSIONS
    loaded = backend.models.pool.peek(backend.models.pool.loaded()[0])
    for i, (start, size, banner, generated, table) in results.items():
        span = f"[{start}, {start + size})"
        assert span in banner and f"({size} of 30)" in banner, (i, banner)
        _original, _stats, a, *_ = generated
        title = f"A: cut {start}" if size == 1 else f"A: cut {start}–{start + size - 1}"  # layers in words
        assert a["label"] == title, (i, a)
        headers, rows = table["value"]["headers"], table["value"]["data"]
        params = next(r for r in rows if r[headers.index("Metric")] == "parameters")
        removed = sum(loaded.info.layer_params[start:start + size])
        assert params[headers.index("Original")].replace(",", "") == f"{loaded.info.num_params:,}".replace(",", "")
        a_title = headers.index(title)  # the column titled with its recipe, as the generation's
        assert float(params[a_title].replace(",", "")) == loaded.info.num_params - removed, (i, params)
    assert len(backend.models.pool.loaded()) == 1  # one base model for everyone
    # cuts share its weights
    assert backend.models.variants.used_bytes == 0 and len(backend.models.variants) >= SESSIONS
    peak = _peak_rss_bytes()
    with capsys.disabled():
        print(f"\n{SESSIONS} sessions × 4 requests: 0 errors, {wall:.1f} s wall, peak RSS "
              f"{peak / 2**30:.2f} GiB (before: {before / 2**30:.2f} GiB; one base model's weights: "
              f"{loaded.info.weight_bytes / 2**30:.2f} GiB)")
