"""One heavy job at a time per device, with progress reporting and cooperative cancellation.

A failure the user can act on (out of memory, a broken model file) leaves a job as a one-line
:class:`~prune.core.errors.LayerCutError` (see :mod:`prune.core.failures`).

A job gets a :class:`Job` handle: ``job.update(fraction, message)`` reports progress and is
also a safe point where a pending cancellation raises :class:`Cancelled`; ``job.check()``
is a safe point without a report. The per-device lock is a plain ``threading.Lock`` (not
re-entrant: it may be released from another thread, as a streaming generator resumed by a
different worker thread does), so code inside a job passes its ``Job`` down instead of
starting a nested one.

A Stop reaches a job in another process too (a ZeroGPU Space runs device jobs in a GPU worker forked from the
server): :class:`StopBoard` keeps each owner's last Stop in a file that the job's safe points read.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from prune.core.errors import LayerCutError
from prune.core.failures import as_user_errors
from prune.core.paths import digest, write_atomic

from evaluation.core import allocator

Progress = Callable[[float, str], object]
T = TypeVar("T")

_LOCKS: dict[str, threading.Lock] = {}
_LOCKS_GUARD = threading.Lock()


class Cancelled(LayerCutError):
    """The user cancelled the running job."""


def device_key(device: str) -> str:
    """'cuda' and 'cuda:0' are the same device; every CPU job shares 'cpu'."""
    device = str(device or "cpu")
    if device.startswith("cuda"):
        return device if ":" in device else "cuda:0"
    return device.split(":")[0]


def device_lock(device: str) -> threading.Lock:
    """The process-wide lock of one device."""
    with _LOCKS_GUARD:
        return _LOCKS.setdefault(device_key(device), threading.Lock())


class StopBoard:
    """Each owner's last Stop, as a file a process forked from this one reads too (a thread's event does not
    cross); a job asks at most every ``every_s`` seconds, since its safe points come often."""

    def __init__(self, every_s: float = 0.2):
        # named now, made at the first Stop: a fork made before that still reads the same place
        self.folder = Path(tempfile.gettempdir()) / f"layercut-stops-{os.getpid()}-{id(self):x}"
        self.every_s = every_s

    def post(self, owner: str) -> None:
        """``owner`` pressed Stop (or closed the page) now."""
        self.folder.mkdir(mode=0o700, exist_ok=True)
        write_atomic(self.folder / digest(owner), repr(time.time()))

    def watch(self, owner: str | None) -> Callable[[], bool]:
        """Whether ``owner`` has pressed Stop since now, asked cheaply (None: nobody can stop the job this way)."""
        if owner is None:
            return lambda: False
        since, file, asked = time.time(), self.folder / digest(owner), [0.0]

        def stopped() -> bool:
            now = time.monotonic()
            if now - asked[0] < self.every_s:
                return False
            asked[0] = now
            try:
                return float(file.read_text()) >= since
            except (OSError, ValueError):
                return False
        return stopped


class Job:
    """A running job's handle: progress reports and cancellation checks."""

    def __init__(self, label: str, progress: Progress | None, cancelled: threading.Event,
                 span: tuple[float, float] = (0.0, 1.0), ended: threading.Event | None = None,
                 stopped_elsewhere: Callable[[], bool] = lambda: False):
        self.label = label
        self._progress = progress
        self._cancelled = cancelled
        self._span = span
        self._ended = ended or threading.Event()  # set when the job (and every view of it) is over
        self._stopped_elsewhere = stopped_elsewhere  # a Stop posted by another process (StopBoard)

    @property
    def cancelled(self) -> bool:
        if self._stopped_elsewhere():
            self._cancelled.set()
        return self._cancelled.is_set()

    @property
    def ended(self) -> bool:
        return self._ended.is_set()

    def end(self) -> None:
        """The job is over (its runner says so when it leaves the job)."""
        self._ended.set()

    def same(self, other: "Job") -> bool:
        """Whether ``other`` is this job or a view of it (:meth:`sub`)."""
        return self._ended is other._ended

    def check(self) -> None:
        """A safe point: raise :class:`Cancelled` if cancellation was requested."""
        if self.cancelled:
            raise Cancelled(f"Cancelled: {self.label} was stopped before it finished.")

    def stop(self) -> None:
        """Cancel this job only (its next safe point raises :class:`Cancelled`)."""
        self._cancelled.set()

    def update(self, fraction: float, message: str = "") -> None:
        """Report progress (``fraction`` of this job or sub-job, 0…1); also a safe point."""
        self.check()
        if self._progress is not None:
            lo, hi = self._span
            self._progress(lo + (hi - lo) * min(max(float(fraction), 0.0), 1.0), message)

    def sub(self, start: float, end: float) -> "Job":
        """A view of this job whose 0…1 maps onto ``start…end`` of it (for steps of a job)."""
        lo, hi = self._span
        return Job(self.label, self._progress, self._cancelled, (lo + (hi - lo) * start, lo + (hi - lo) * end),
                   self._ended, self._stopped_elsewhere)


class JobRunner:
    """Runs jobs on one device for many owners (visitors); ``cancel(owner)`` stops only that owner's jobs."""

    def __init__(self, device: str):
        self.device = device
        self._events: dict[threading.Event, str | None] = {}
        self._guard = threading.Lock()
        self.stops = StopBoard()

    @contextmanager
    def run(self, label: str, progress: Progress | None = None, *, owner: str | None = None,
            hold: bool = True) -> Iterator[Job]:
        """A job of ``owner``; with ``hold`` the device lock is held throughout (else use :meth:`holding`)."""
        event = threading.Event()
        with self._guard:
            self._events[event] = owner
        job = Job(label, progress, event, stopped_elsewhere=self.stops.watch(owner))
        try:
            with as_user_errors(label):  # out of memory, a broken file: one line for the user, not a traceback
                if hold:
                    with self.holding(job):
                        yield job
                else:
                    yield job
        finally:
            job.end()
            with self._guard:
                self._events.pop(event, None)
            allocator.release()  # what the job freed goes back to the system, whichever thread ran it

    @contextmanager
    def holding(self, job: Job) -> Iterator[None]:
        """Hold the device lock, waiting (cancellably) while another job has it."""
        lock = device_lock(self.device)
        told = False
        while not lock.acquire(timeout=0.05):
            job.check()
            if not told and job._progress is not None:
                job._progress(0.0, f"Waiting for another job on {device_key(self.device)} to finish…")
                told = True
        try:
            job.check()
            yield
        finally:
            lock.release()

    def cancel(self, owner: str | None = None) -> None:
        """Ask ``owner``'s running or waiting jobs to stop at their next safe point (None: every owner's), in this
        process and in any forked from it."""
        if owner is not None:
            self.stops.post(owner)
        with self._guard:
            for event, who in self._events.items():
                if owner is None or who == owner:
                    event.set()

    def busy(self, owner: str | None = None) -> bool:
        """Whether ``owner`` (None: anyone) has a job running or waiting."""
        with self._guard:
            return any(owner is None or who == owner for who in self._events.values())


@contextmanager
def cancellable(model, job: Job):
    """Make every forward of ``model`` a safe point of ``job`` (for code that takes no job)."""
    hook = model.register_forward_pre_hook(lambda _m, _a: job.check())
    try:
        yield
    finally:
        hook.remove()


def building(job: Job | None, label: str) -> Progress | None:
    """Progress of building one compared model: messages only (the job's own fraction starts after it)."""
    if job is None:
        return None
    return lambda fraction, message: job.update(0.0, f"Building {label}: {message} ({fraction:.0%})")


def final(stream: Iterable[T]) -> T:
    """The last value a streaming job yields: its complete result (every value before it is a partial one)."""
    found = None
    for found in stream:
        pass
    return found
