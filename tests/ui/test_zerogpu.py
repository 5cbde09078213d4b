"""ZeroGPU as its rules say, checked off ZeroGPU: what each device job asks for, every device job behind the
decorator with arguments and results that cross to a GPU worker (pickled, as ``spaces`` sends them), a Stop that
reaches a job in a forked process, and the first screen served with no device job."""

from __future__ import annotations

import inspect
import multiprocessing
import pickle
import time

import gradio as gr
import pytest

import spaces  # noqa: F401  (installed with the tests: off ZeroGPU its decorator returns the function itself)
from evaluation.measure import estimate
from evaluation.measure.compiled import COMPILE_ALLOWANCE_S
from evaluation.serving.backend import Backend
from evaluation.core.jobs import Cancelled, JobRunner
from ui.page import build_page, events, first_screen
from ui.page.durations import ANALYZE_S, EXPLAIN_S
from ui.page.speed import speed_settings
from ui.session import Session


def test_a_job_asks_for_its_estimate_with_a_margin_within_bounds():
    assert events.asked(10) == 20  # 1.5 × 10 s + 5 s for the worker's start
    assert events.asked(0.1) == events.MIN_S
    assert events.asked(10_000) == events.MAX_S
    assert events.asked(None) == events.DEFAULT_S
    assert events.asked(None, 120) == 120


class CrossingGPU:
    """``spaces.GPU`` as ZeroGPU runs a job, short of the fork: the duration asked with the job's own arguments, then
    the arguments and each result pickled across, as the worker's queues carry them."""

    def __init__(self):
        self.decorated, self.asked = [], []

    def GPU(self, duration):  # spaces' name
        def decorate(task):
            self.decorated.append(task)

            def run(*args, **kwargs):
                self.asked.append((task.__name__, duration(*args, **kwargs)))
                args, kwargs = pickle.loads(pickle.dumps((args, kwargs)))
                if inspect.isgeneratorfunction(task):
                    return (pickle.loads(pickle.dumps(item)) for item in task(*args, **kwargs))
                return pickle.loads(pickle.dumps(task(*args, **kwargs)))
            return run
        return decorate


@pytest.fixture(scope="module")
def crossing(tiny_folder):
    """A page on the tiny model built with every device job crossing as to a ZeroGPU worker."""
    from evaluation.core.pool import ModelSpec

    gpu = CrossingGPU()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(events, "spaces", gpu)
        page = build_page(Backend(data_dir="", device="cpu"), default_model=ModelSpec(tiny_folder))
    return page, gpu


def test_every_device_job_runs_behind_the_decorator(crossing):
    page, gpu = crossing
    decorated = {task.__wrapped__ for task in gpu.decorated}
    device = [fn for fn in page.demo.fns.values() if fn.concurrency_id == "device"]
    assert len(device) >= 20
    for fn in device:
        assert fn.fn.__wrapped__ in decorated, fn.api_name
    handlers = page.handlers  # the page load's job and the cut's numbers run behind it too
    assert {handlers.pick.startup, handlers.cut.feedback} <= decorated


def test_a_job_crosses_to_the_worker_and_back_keyed_by_the_pages_components(crossing):
    page, gpu = crossing
    shown = page.handlers.pick.startup_job(Session(), "angular")
    session = shown[page.session]  # the very component: the worker's ids found again on this page
    assert session.info.num_layers == 4 and session.cut() is not None
    assert page.header.model_md in shown and page.view.heatmap in shown
    assert gpu.asked[-1] == ("startup", events.asked(None, ANALYZE_S))
    line = page.handlers.cut.feedback_job(session)
    assert "against the original" in line and gpu.asked[-1] == ("feedback", events.asked(None, EXPLAIN_S))


def test_a_jobs_seconds_are_its_estimate_on_the_rates_its_model_was_loaded_with(tiny_folder, tmp_path,
                                                                                 monkeypatch):
    from evaluation.core.pool import ModelSpec

    monkeypatch.setenv("LAYERCUT_CACHE", str(tmp_path))  # no rates kept from another test
    monkeypatch.setattr(events, "spaces", CrossingGPU())
    page = build_page(Backend(data_dir="", device="cpu"), default_model=ModelSpec(tiny_folder))
    session = page.handlers.pick.startup_job(Session(), "angular")[page.session]
    assert session.info.rates is None  # the first screen does not wait for the timing probe: the settle job times
    page.handlers.pick.settle_job(session)
    server = Backend(device="cpu")  # the server's process, beside the GPU worker that timed the model
    server.models.place(session.spec)
    rates = server.models.rates(session.spec)  # read from the disk cache the worker wrote
    assert rates is not None and rates.forward_tokens_per_s > 0
    assert rates == page.handlers.context.backend.models.rates(session.spec)
    size = session.info.size
    by_hand = estimate.speed(rates, [1.0, session.cut().size(size).total / size.total],
                             **speed_settings(["1", "8"], 64, 16, 2), generates=True)
    assert page.handlers.durations.speed(session, ["1", "8"], 64, 16, 2) == events.asked(by_hand)
    assert page.handlers.durations.speed(session, ["not a number"], 64, 16, 2) == events.DEFAULT_S  # no estimate
    columns = 1 + len(session.variants())  # the original and each slot: each compiled once per batch size
    assert page.handlers.durations.speed(session, ["1", "8"], 64, 16, 2, True) == events.asked(
        2 * by_hand + COMPILE_ALLOWANCE_S * 2 * columns)  # the eager rows, the compiled rows, the compiles


def test_a_new_page_gets_the_first_screen_with_no_device_job(crossing, monkeypatch):
    page, gpu = crossing
    screen = first_screen.warm(page)
    assert screen is not None and screen.method == page.header.method.value
    computed = page.handlers.pick.startup_job(Session(), screen.method)
    asked = len(gpu.asked)

    def ran(*_args, **_kwargs):
        raise RuntimeError("a device job ran")

    backend = page.handlers.context.backend
    for part, job in ((backend.models, "load"), (backend.analysis, "score"), (backend.analysis, "stability"),
                      (backend.explain, "cut_feedback")):  # nothing may run now
        monkeypatch.setattr(part, job, ran)
    shown = page.handlers.pick.opening(Session(), screen.method)
    assert shown[page.header.model_md] == computed[page.header.model_md]
    assert shown[page.session].cut() == computed[page.session].cut()
    assert page.handlers.cut.shown_feedback(shown[page.session]) == screen.feedback
    assert page.handlers.pick.settle(shown[page.session]) == screen.settled  # the speed and stability too
    assert len(gpu.asked) == asked  # no GPU asked for

    with pytest.raises(gr.Error, match="device job ran"):  # a page on another method runs the page-load job
        page.handlers.pick.opening(Session(), "block_influence")


def _stopped_in_a_fork(runner: JobRunner, owner: str, stop_owner: str, stop_first: bool) -> int:
    """A job of ``owner`` run in a forked process until it stops (exit 3) or 3 s pass (exit 0); this process
    presses Stop for ``stop_owner`` before the job starts or once it runs."""
    ctx = multiprocessing.get_context("fork")
    started = ctx.Event()

    def job():
        with runner.run("a long job", owner=owner, hold=False) as handle:
            started.set()
            try:
                for _ in range(300):
                    handle.check()
                    time.sleep(0.01)
            except Cancelled:
                raise SystemExit(3)
        raise SystemExit(0)

    if stop_first:
        runner.cancel(stop_owner)
    child = ctx.Process(target=job)
    child.start()
    assert started.wait(10)
    if not stop_first:
        runner.cancel(stop_owner)
    child.join(20)
    return child.exitcode


def test_a_stop_reaches_a_job_in_a_forked_worker_and_only_its_owners_job():
    runner = JobRunner("cpu")
    assert _stopped_in_a_fork(runner, "visitor", "visitor", stop_first=False) == 3
    assert _stopped_in_a_fork(runner, "visitor", "someone else", stop_first=False) == 0
    assert _stopped_in_a_fork(runner, "visitor", "visitor", stop_first=True) == 0  # a Stop before the job started
