"""The first screen every new page shows — the default model analyzed, its opening cut and that cut's numbers —
computed once when the server starts (:func:`warm`, before the first visitor), then served to each new page as it
opens with no device job at all: no queue behind other visitors' jobs, no GPU asked of a ZeroGPU Space.

A page that opens on anything else (another method picked before the page loaded, a server whose start-up warm-up
failed) runs the page-load job as before.
"""

from __future__ import annotations

import copy
import logging
import time
from dataclasses import dataclass

from ui.session import Session

log = logging.getLogger(__name__)


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


def warm(page) -> FirstScreen | None:
    """Place the default model, compute the first screen with the page-load job and the cut's feedback job
    themselves (their caches then hold it too), and serve it to every new page; None (and a logged reason) if it
    failed: pages then compute it as they open."""
    handlers, started = page.handlers, time.perf_counter()
    method = page.header.method.value
    try:
        handlers.context.backend.models.place(handlers.context.default_model)  # outside any GPU call (ZeroGPU's rule)
        shown = handlers.pick.startup_job(Session(), method)
        session = shown[page.session]
        feedback = handlers.cut.feedback_job(session)
    except Exception:
        log.exception("Computing the first screen at start-up failed; each new page computes it as it opens")
        return None
    screen = FirstScreen(method, shown, session, feedback, time.perf_counter() - started)
    handlers.context.first_screen = screen
    return screen
