"""What this machine's llama.cpp runs, found once per build and machine on a tiny Llama in the child, and what the
page's *Also in llama.cpp* boxes say: the real worker, made to die by a signal on chosen GGUF types."""

from __future__ import annotations

import pytest

from llama_helpers import DYING_WORKER, needs_llama_type
from evaluation.engines import llama_cpp, llama_probe


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """A probe that remembers nothing from other tests (its own key) and dies on the types ``dying`` names."""
    pytest.importorskip("llama_cpp")
    monkeypatch.setattr(llama_probe, "_machine_key", lambda: str(tmp_path))
    monkeypatch.setattr(llama_cpp, "WORKER", DYING_WORKER)
    return lambda deaths: monkeypatch.setenv("LAYERCUT_TEST_DIE", deaths)


def test_a_type_llama_cpp_dies_on_is_said_once_and_the_box_stays_usable(fresh, monkeypatch):
    from ui.page.speed import llama_box

    needs_llama_type("F16")
    fresh("Q8_0:SIGILL,Q4_0:SIGILL")
    found = llama_probe.probe()
    assert found["F16"] is None and "illegal instruction on Q8_0" in found["Q8_0"]
    assert "illegal instruction on Q4_0" in found["Q4_0"]
    monkeypatch.setattr(llama_probe, "_run", lambda: pytest.fail("the probe ran again on the same build and machine"))
    assert llama_probe.probe() == found  # read, not run again
    update = llama_box(True)
    assert update.get("interactive") is None and update["info"].startswith("llama.cpp here cannot run Q8_0 or Q4_0")


def test_where_llama_cpp_runs_nothing_the_box_turns_off_and_says_why(fresh):
    from ui.page.speed import llama_box

    fresh("F16:SIGILL,Q8_0:SIGSEGV,Q4_0:SIGABRT")
    update = llama_box(True)
    assert update["value"] is False and update["interactive"] is False
    assert update["info"] == ("llama.cpp stopped with an illegal instruction on F16: its build uses CPU instructions "
                              "this machine does not run — see docs/install.md.")
    assert llama_box(False) == {"__type__": "update"}  # unticking asks nothing


def test_where_llama_cpp_runs_every_type_the_box_says_nothing(fresh):
    needs_llama_type("F16", "Q8_0", "Q4_0")
    fresh("")
    assert llama_probe.probe() == {"F16": None, "Q8_0": None, "Q4_0": None}
    assert llama_probe.check() == (True, None)
