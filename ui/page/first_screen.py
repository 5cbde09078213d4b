"""The first screen every new page shows — the default model analyzed, its opening cut and that cut's numbers —
computed once when the server starts (:func:`warm`), then served to each new page as it opens with no device job at
all: no queue behind other visitors' jobs, no GPU asked of a ZeroGPU Space.

The server answers first and computes after (:func:`start`: :func:`warm` in a thread beside the launch), so a
browser never meets a refused connection; a page that opens meanwhile shows its layout at once and waits for that
computation, relaying its progress (:func:`awaited`), rather than computing it a second time. A page that opens on
anything else (another method picked before the page loaded, a server whose start-up warm-up failed) runs the
page-load job as before.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

from prune.core.loading import default_checkpoint, is_default

from ui.session import Session

log = logging.getLogger(__name__)
WAIT_STEP_S = 0.25  # how often a page waiting for the first screen relays its progress


@dataclass(frozen=True)
class FirstScreen:
    """The page-load job's updates for a new page on ``method``, the session they leave, and its cut's numbers."""

    method: str
    shown: dict  # component → update, as the page-load job returned them
    session: Session
    feedback: object  # the opening cut's line against the original (None until measured)
    steps: dict[str, float]  # each start-up step's seconds, in order
    settled: dict | None = None  # then the model line with its speed here and the opening block's stability

    def opening(self, session: Session, method: str) -> dict | None:
        """The updates for a page that opens with ``session`` on ``method``: a copy of these when it is a new page on
        this method (Gradio may change what it is handed), else None."""
        if session != Session() or method != self.method:
            return None
        return {component: copy.deepcopy(value) for component, value in self.shown.items()}

    def feedback_for(self, session: Session):
        """The cut's numbers when ``session`` edits this screen's cut of its model (once known), else None."""
        return self.feedback if self.feedback is not None and self._same(session) else None

    def settled_for(self, session: Session) -> dict | None:
        """The model line with its speed and the stability, when ``session`` is on this screen's model and
        analysis, else None."""
        mine, result = self.session, session.result
        same = self.settled is not None and result is not None and session.spec == mine.spec and \
            (result.method, session.calibration, session.options) == (mine.result.method, mine.calibration,
                                                                      mine.options)
        return dict(self.settled) if same else None

    def _same(self, session: Session) -> bool:
        mine = self.session
        return (session.spec, session.editing, session.cut()) == (mine.spec, mine.editing, mine.cut()) and \
            not session.loading

    def line(self) -> str:
        """'dequantize 8.0 s · load 0.7 s · …': what the start-up spent its seconds on."""
        return " · ".join(f"{name} {seconds:.1f} s" for name, seconds in self.steps.items())


@dataclass
class Told:
    """The start-up's latest progress, called like a gr.Progress by its jobs (it pickles: on ZeroGPU a job's
    arguments cross to the GPU worker, whose progress then stays there)."""

    latest: tuple[float, str] = (0.0, "Starting LayerCut…")

    def __call__(self, fraction, desc: str | None = None, **_) -> None:
        self.latest = (float(fraction or 0.0), desc or self.latest[1])


@dataclass
class Warming:
    """The first screen being computed beside the answering server: ``shown`` once a page can show it (or it
    failed), ``measured`` once its cut's numbers are known, ``done`` once the rest of the start-up ended too, and
    its progress for the pages that wait."""

    shown: threading.Event = field(default_factory=threading.Event)
    measured: threading.Event = field(default_factory=threading.Event)  # the opening cut's numbers
    done: threading.Event = field(default_factory=threading.Event)
    told: Told = field(default_factory=Told)


class Steps(dict):
    """Each step's seconds by name, in the order they ran: ``with steps("load"): …``."""

    @contextmanager
    def __call__(self, name: str):
        started = time.perf_counter()
        try:
            yield
        finally:
            self[name] = round(time.perf_counter() - started, 2)


def start(page) -> threading.Thread:
    """:func:`warm` in a thread, so the server can answer meanwhile; ``page``'s context says it runs
    (``context.warming``) until it ended."""
    warming = page.handlers.context.warming = Warming()
    thread = threading.Thread(target=warm, args=(page, warming), name="layercut-first-screen", daemon=True)
    thread.start()
    return thread


def awaited(context, event: str = "shown", progress=None) -> None:
    """Wait while the start-up computes the first screen (``event`` "shown"), its cut's numbers ("measured") or
    the rest ("done"): nothing when it does not, relaying its progress to ``progress`` (a gr.Progress) if given."""
    warming = context.warming
    while warming is not None and not getattr(warming, event).wait(WAIT_STEP_S):
        fraction, words = warming.told.latest
        if progress is not None:
            progress(fraction, desc=f"Preparing the first screen — {words}")


def warm(page, warming: Warming | None = None) -> FirstScreen | None:
    """Compute the first screen with the page-load job and the cut's feedback job themselves (their caches then hold
    it too) and serve it to every new page; then what it does not wait for (the model's speed here, the opening
    block's stability). None (and a logged reason) if it failed: pages then compute it as they open. ``warming``:
    told the progress, and when each part is ready."""
    warming = warming or Warming()
    handlers, steps = page.handlers, Steps()
    context = handlers.context
    spec, method = context.default_model, page.header.method.value
    screen = None
    try:
        if is_default(spec.name):
            with steps("dequantize"):  # the embedded default's GGUF to a float folder: once per cache
                warming.told(0.0, "Unpacking the embedded model (once on this machine)…")
                default_checkpoint()
        with steps("load"):
            warming.told(0.0, f"Loading {spec.label}…")
            context.backend.models.place(spec)  # outside any GPU call (ZeroGPU's rule)
        with steps("analysis"):
            shown = handlers.pick.startup_job(Session(), method, None, warming.told)
        screen = context.first_screen = FirstScreen(method, shown, shown[page.session], None, steps)
        warming.shown.set()
        with steps("opening cut"):
            screen = context.first_screen = replace(screen, feedback=handlers.cut.feedback_job(screen.session))
        warming.measured.set()
        with steps("rate probe"):
            context.backend.models.load(spec)
        with steps("stability"):
            settled = handlers.pick.settle_job(screen.session)
        screen = context.first_screen = replace(screen, settled=settled)
        print(f"LayerCut: the first screen took {screen.line()}; new pages show it at once.", flush=True)
    except Exception:
        log.exception("Computing the first screen at start-up failed; each new page computes %s as it opens",
                      "the rest" if screen is not None else "it")
    finally:
        for ended in (warming.shown, warming.measured, warming.done):
            ended.set()
    return screen
