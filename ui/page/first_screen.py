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
from dataclasses import dataclass, field

from ui.session import Session

log = logging.getLogger(__name__)
WAIT_STEP_S = 0.25  # how often a page waiting for the first screen relays its progress


@dataclass(frozen=True)
class FirstScreen:
    """The page-load job's updates for a new page on ``method``, the session they leave, and its cut's numbers."""

    method: str
    shown: dict  # component → update, as the page-load job returned them
    session: Session
    feedback: object  # the opening cut's line against the original
    seconds: float  # what computing it took at start-up

    def opening(self, session: Session, method: str) -> dict | None:
        """The updates for a page that opens with ``session`` on ``method``: a copy of these when it is a new page on
        this method (Gradio may change what it is handed), else None."""
        if session != Session() or method != self.method:
            return None
        return {component: copy.deepcopy(value) for component, value in self.shown.items()}

    def feedback_for(self, session: Session):
        """The cut's numbers when ``session`` edits this screen's cut of its model, else None."""
        mine = self.session
        same = (session.spec, session.editing, session.cut()) == (mine.spec, mine.editing, mine.cut())
        return self.feedback if same and not session.loading else None


@dataclass
class Warming:
    """The first screen being computed beside the answering server: done once it ended (computed or failed), and its
    latest progress, for the pages that wait on it."""

    done: threading.Event = field(default_factory=threading.Event)
    latest: tuple[float, str] = (0.0, "Starting LayerCut…")

    def __call__(self, fraction, desc: str | None = None, **_) -> None:  # a gr.Progress's call, as the jobs make it
        self.latest = (float(fraction or 0.0), desc or self.latest[1])


def start(page) -> threading.Thread:
    """:func:`warm` in a thread, so the server can answer meanwhile; ``page``'s context says it runs
    (``context.warming``) until it ended."""
    context = page.handlers.context
    warming = context.warming = Warming()

    def run():
        try:
            screen = warm(page, warming)
            if screen is not None:
                print(f"LayerCut: the first screen took {screen.seconds:.1f} s to compute; new pages show it at once.")
        finally:
            warming.done.set()

    thread = threading.Thread(target=run, name="layercut-first-screen", daemon=True)
    thread.start()
    return thread


def awaited(context, progress) -> None:
    """Wait for the start-up's first screen while it is computed (nothing when it is not), relaying its progress
    to the waiting page through ``progress`` (a gr.Progress)."""
    warming = context.warming
    while warming is not None and not warming.done.wait(WAIT_STEP_S):
        fraction, words = warming.latest
        progress(fraction, desc=f"Preparing the first screen — {words}")


def warm(page, progress=None) -> FirstScreen | None:
    """Place the default model, compute the first screen with the page-load job and the cut's feedback job
    themselves (their caches then hold it too), and serve it to every new page; None (and a logged reason) if it
    failed: pages then compute it as they open. ``progress``: told as the page-load job goes."""
    handlers, started = page.handlers, time.perf_counter()
    method = page.header.method.value
    try:
        handlers.context.backend.models.place(handlers.context.default_model)  # outside any GPU call (ZeroGPU's rule)
        shown = handlers.pick.startup_job(Session(), method, None, progress or Warming())
        session = shown[page.session]
        feedback = handlers.cut.feedback_job(session)
    except Exception:
        log.exception("Computing the first screen at start-up failed; each new page computes it as it opens")
        return None
    screen = FirstScreen(method, shown, session, feedback, time.perf_counter() - started)
    handlers.context.first_screen = screen
    return screen
