"""Handlers: a message for a session whose model is still loading, and for every bad value before any work."""

from dataclasses import replace
from types import SimpleNamespace

import gradio as gr
import numpy as np
import pytest

from evaluation.core.pool import ModelSpec
from prune.core.errors import InvalidInput
from prune.depth.result import ImportanceResult, blocks_from_layers
from ui.session import Session

from conftest import handlers_on, stand_in_backend


@pytest.fixture
def handlers(page):
    return handlers_on(page, stand_in_backend(default_calibration=None))


@pytest.mark.parametrize("event, args", [("set_cut", ([1, 3],)), ("best_block", (3,)), ("named_cut", ("10%",))])
def test_a_cut_while_a_model_loads_is_a_message(handlers, event, args):
    with pytest.raises(gr.Error, match="still loading"):
        getattr(handlers.cut, event)(Session().while_loading("org/model"), *args)


def test_nothing_of_the_previous_model_shows_while_another_loads(page):
    view = page.view
    shown = view.show(Session().while_loading("org/model"))
    banner, session = shown[view.banner], shown[view.session]
    assert "Loading org/model" in banner and session.info is None and session.result is None
    assert not [t for t in shown[view.heatmap].data if t.type == "heatmap"] and not shown[view.bars].data
    assert shown[view.named]["visible"] is False and shown[view.greedy]["visible"] is False


PARTS = {"analyze": "analysis.score", "generate": "measure.generate", "speed": "measure.speed",
         "perplexity": "measure.perplexity", "benchmarks": "measure.benchmarks", "load": "models.load"}


def _refusing_backend(**answers):
    """A backend whose jobs answer with a message naming what they were given (one never asked for fails)."""
    def job(name):
        def run(*_args, **kwargs):
            shown = {key: kwargs[key] for key in answers[name] if key in kwargs}
            raise InvalidInput(f"{name} ran with {shown}")
        return run

    return stand_in_backend({PARTS[name]: job(name) for name in answers}, default_calibration=None)


LOADED = Session(spec=ModelSpec("org/model"), info=SimpleNamespace(num_layers=30))


def _analyzed(method: str) -> Session:
    scores = np.arange(30.0)
    result = ImportanceResult(method, blocks_from_layers(scores), "score", layer_scores=scores)
    return replace(LOADED, result=result, origin=method)


def _analyze(handlers, method, options, remove="layers"):
    return handlers.pick.analyze(LOADED, method, options, "builtin", "", None, 16, 128, 3, "paper", "auto", remove)


@pytest.mark.parametrize("method, options, message", [
    ("ppl", "max_samples=0", "PPL criterion (Shortened LLaMA): max_samples must be a whole number 1…4,096, not 0."),
    ("ppl", "max_samples=-1", "max_samples must be a whole number 1…4,096, not -1"),
    ("taylor", "max_samples=0", "Taylor+ (Shortened LLaMA): max_samples must be a whole number 1…4,096, not 0."),
    ("zigzag", "texts=0", "texts must be a whole number 2…20,000, not 0"),
    ("zigzag", "k=0", "k must be a whole number 1…100, not 0"),
    ("zigzag", "k=5000", "k must be a whole number 1…100, not 5000"),
    ("sleb", "num_removals=0", "Greedy removal (SLEB): num_removals must be a whole number 1…1,024, not 0."),
    ("sleb", "max_samples=-1", "max_samples must be a whole number 1…4,096, not -1"),
    ("angular", "token=first", "token must be one of last, mean, not 'first'"),
])
def test_an_option_out_of_its_range_is_refused_before_the_analysis_runs(page, method, options, message):
    handlers = handlers_on(page, _refusing_backend(analyze=["max_samples"]))
    with pytest.raises(gr.Error) as refused:
        _analyze(handlers, method, options)
    assert message in refused.value.message and "ran with" not in refused.value.message


def test_options_in_range_reach_the_analysis_as_typed(page):
    handlers = handlers_on(page, _refusing_backend(analyze=["max_samples", "num_removals"]))
    with pytest.raises(gr.Error, match=r"analyze ran with \{'max_samples': 4096\}"):
        _analyze(handlers, "ppl", "max_samples=4096")
    with pytest.raises(gr.Error, match=r"analyze ran with \{'max_samples': 1, 'num_removals': 3\}"):
        _analyze(handlers, "sleb", "num_removals=1, max_samples=1")  # a cut of 3 needs 3 greedy steps


@pytest.mark.parametrize("remove", ["attention", "mlp"])
def test_removing_attention_or_mlp_needs_a_method_that_scores_them_in_analyze_and_best_block(page, remove):
    handlers = handlers_on(page, _refusing_backend(analyze=[]))
    what = "attention" if remove == "attention" else "MLP"
    said = "Angular distance (Gromov et al. 2024) scores whole layers only: to remove " \
           f"{what} blocks, analyze with Attention / MLP drop (He et al. 2024)."
    with pytest.raises(gr.Error) as analyzing:
        _analyze(handlers, "angular", "", remove)
    with pytest.raises(gr.Error) as choosing:
        handlers.cut.best_block(_analyzed("angular"), 3, "paper", remove)
    assert analyzing.value.message == choosing.value.message == said
    with pytest.raises(gr.Error, match="analyze ran"):  # the sub-layer method scores them: on to the analysis
        _analyze(handlers, "sublayer", "", remove)


@pytest.mark.parametrize("settings, message", [
    (("", 0, 1, 0), "Max new tokens must be a whole number, not ''."),
    (("abc", 0, 1, 0), "Max new tokens must be a whole number, not 'abc'."),
    ((64, "", 1, 0), "Temperature must be a number, not ''."),
    ((64, 0, None, 0), "Top-p must be a number, not None."),
    ((64, 0, 1, 2**63), "The seed must be 0…4,294,967,295, not 9223372036854775808."),
    ((64, 0, 1, 10**400), "The seed must be a whole number, not 1000000000"),
])
def test_generation_settings_are_checked_before_generating(page, settings, message):
    handlers = handlers_on(page, _refusing_backend(generate=["seed"]))
    with pytest.raises(gr.Error) as refused:
        list(handlers.generate.generate(LOADED, "Hi", *settings))
    assert refused.value.message.startswith(message)


def test_absurd_limits_and_batch_sizes_are_refused_and_sane_ones_arrive_as_whole_numbers(page):
    handlers = handlers_on(page, _refusing_backend(speed=["batch_sizes"], perplexity=["seq_lens", "max_windows"],
                                                   benchmarks=[]))
    runs, speeds = handlers.benchmarks, handlers.speed
    with pytest.raises(gr.Error, match=r"Questions per task must be 0…100,000, not 9223372036854775808\."):
        runs.benchmarks(LOADED, ["arc_easy"], 2**63, 0)
    with pytest.raises(gr.Error, match=r"Windows must be 0…100,000, not 9223372036854775808\."):
        runs.perplexity(LOADED, "512", 2**63)
    with pytest.raises(gr.Error, match=r"The window must be 2…8,192, not 9223372036854775808\."):
        runs.perplexity(LOADED, 2**63, 10)
    with pytest.raises(gr.Error, match=r"perplexity ran with \{'seq_lens': \(512,\), 'max_windows': 10\}"):
        runs.perplexity(LOADED, "512", 10)  # the dropdown's choices are strings
    with pytest.raises(gr.Error, match=r"A batch size must be a whole number, not 'x'\."):
        speeds.speed(LOADED, ["1", "x"], 16, 2, 1)
    with pytest.raises(gr.Error, match=r"speed ran with \{'batch_sizes': \(1, 8\)\}"):
        speeds.speed(LOADED, ["8", "1", "8"], 16, 2, 1)


def test_an_over_long_model_name_is_refused_before_any_load(page):
    handlers = handlers_on(page, _refusing_backend(load=[]))
    with pytest.raises(gr.Error) as refused:
        list(handlers.pick.load_model(Session(), "a" * 300, "", False, "auto"))
    assert refused.value.message == ("The model name is too long (300 characters): a Hugging Face id or a folder "
                                     "name has at most 255 characters between slashes.")
