"""Models taking turns on the device: a base and a variant in files that do not fit together compare side by side."""

from __future__ import annotations

import threading

import pytest

from prune.core.calibration import Calibration
from prune.core.offload import resident_bytes
from prune.core.parking import in_files
from prune.core.recipe import Recipe
from prune.sparsity.step import Sparsify

from evaluation.serving.backend import Backend
from evaluation.core.jobs import Job
from evaluation.core.pool import ModelSpec
from ui.text import generation_stats, server_memory_markdown


CAL = Calibration(n_samples=4, seq_len=32)
COMPARED = {"A": Recipe.block(4, 1, 2), "B": Recipe((Sparsify.of("wanda", None, "2:4", CAL),))}


@pytest.fixture()
def setting(tiny_folder, data_dir, tmp_path, monkeypatch):
    """A backend without a budget, and one whose budget holds the base or B's copy, not both."""
    monkeypatch.setenv("LAYERCUT_CACHE", str(tmp_path))
    spec = ModelSpec(tiny_folder)
    whole = Backend(device="cpu", data_dir=data_dir)
    weights = whole.models.load(spec).resident_bytes
    monkeypatch.setenv("LAYERCUT_MEMORY_BUDGET", str(int(1.3 * weights)))
    tight = Backend(device="cpu", data_dir=data_dir)
    assert tight.models.load(spec).resident_bytes == weights and tight.models.built_into_files(spec, COMPARED["B"])
    return spec, whole, tight


def answers(states):
    return {label: state["token_ids"] for label, state in states[-1].items()}


def test_models_that_do_not_fit_together_take_turns_with_the_same_answers(setting):
    spec, whole, tight = setting
    expected = answers(list(whole.measure.generate(spec, COMPARED, "Hello", max_new_tokens=6)))
    states = list(tight.measure.generate(spec, COMPARED, "Hello", max_new_tokens=6))
    assert answers(states) == expected
    first = states[0]  # the original answers first; A (a view of it) and B wait their turn
    assert not first["original"]["waiting"] and first["A"]["waiting"] and first["B"]["waiting"]
    assert "waits its turn" in generation_stats(first["B"]) and "waits" not in generation_stats(states[-1]["B"])
    base, b = tight.models.pool.get(spec).model, tight.models.variants.get(tight.models.pool.get(spec), COMPARED["B"])
    # B computed last, whole; the base waits in its file
    assert tight.models.residency.waiting(base) and not in_files(b)
    assert resident_bytes(b) == whole.models.load(spec).resident_bytes
    line = tight.models.residency.summary()
    assert line.startswith("models taking turns on cpu: 1 on it, 1 waiting off it · last swap: 1 model in (")
    assert ", 1 out (" in line and str(spec.name) not in line and "wanda" not in line  # no names: others see it
    assert line in server_memory_markdown(tight.models.load(spec) and _memory(tight), line)
    # the other measurements bring each model back for its turn and agree with the run that holds them all
    for measure in ("perplexity", "memory"):
        got, want = (_values(getattr(b.measure, measure)(spec, COMPARED, **_SETTINGS[measure])) for b in (tight, whole))
        assert got == want, measure
    assert tight.models.residency.waiting(base) or in_files(b)  # never both whole at once
    speed = tight.measure.speed(spec, COMPARED, batch_sizes=(1,), prompt_len=8, new_tokens=(4,), repeats=1)
    assert {m.model for m in speed} == {"original", "A", "B"}


_SETTINGS = {"perplexity": {"seq_lens": (32,), "bos": (False,), "max_windows": 2, "use_cache": False},
             "memory": {"new_tokens": 4}}


def _values(found):
    return sorted((m.name, m.model, m.value) for m in found if "peak" not in m.name)


def _memory(backend):
    return backend.models.variants.server_memory()


def test_a_model_another_running_job_computes_with_keeps_its_place(setting):
    spec, _, tight = setting
    base = tight.models.pool.get(spec)
    b = tight.models.variants.get(base, COMPARED["B"])
    other = Job("another visitor's generation", None, threading.Event())
    assert tight.models.residency.ready({"base": base.model}, other)
    mine = Job("this visitor's benchmark", None, threading.Event())
    assert not tight.models.residency.ready({"B": b}, mine) and in_files(b)  # B computes from its files instead
    other.end()
    assert tight.models.residency.ready({"B": b},
                                        mine) and not in_files(b) and tight.models.residency.waiting(base.model)


def test_nothing_moves_when_everything_fits(tiny_folder, tmp_path, monkeypatch):
    monkeypatch.setenv("LAYERCUT_CACHE", str(tmp_path))
    backend = Backend(device="cpu", data_dir="")
    states = list(backend.measure.generate(ModelSpec(tiny_folder), COMPARED, "Hello", max_new_tokens=4))
    assert not any(state["waiting"] for state in states[0].values())  # side by side, token by token
    assert backend.models.residency.summary() == "" and backend.models.residency.last is None
