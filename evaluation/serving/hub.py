"""Whether the Hugging Face Hub answers, asked once per server in the background: a page without network never
waits on it (until it answers, the Hub counts as unreachable)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from prune.core.loading import hub_reachable

log = logging.getLogger(__name__)
TIMEOUT_S = 3.0  # one connection attempt; HF_HUB_OFFLINE answers at once


class HubCheck:
    """One question to the Hub, asked in a daemon thread when made; ``reachable`` is None until it is answered."""

    def __init__(self, ask: Callable[[float], bool] = hub_reachable, timeout_s: float = TIMEOUT_S):
        self._answer: bool | None = None
        self._thread = threading.Thread(target=self._ask, args=(ask, timeout_s), name="layercut-hub-check",
                                        daemon=True)
        self._thread.start()

    def _ask(self, ask: Callable[[float], bool], timeout_s: float) -> None:
        try:
            self._answer = bool(ask(timeout_s))
        except Exception:  # any failure to ask is no answer from the Hub
            log.exception("Asking whether the Hugging Face Hub answers failed")
            self._answer = False

    @property
    def reachable(self) -> bool | None:
        return self._answer

    def wait(self, timeout_s: float | None = None) -> bool | None:
        """The answer once given (tests and scripts; the page never waits)."""
        self._thread.join(timeout_s)
        return self._answer
