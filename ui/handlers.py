"""What every event handler of the page shares: errors shown as one line, progress, the visitor's id, and the
:class:`Context` (backend, policy, downloads, default model) with the page-wide events.

No model code: everything heavy happens in ``evaluation.serving.backend.Backend``. Each handler takes the
visitor's :class:`~ui.session.Session` (what this browser tab compares) and returns a new one; jobs run as the
visitor's own (``request.session_hash``), so Stop cancels only them. The handlers of each part of the page live
beside its layout in ``ui.page`` and return updates keyed by component (Gradio's dict return).
"""

from __future__ import annotations

import functools
import inspect
import logging
from pathlib import Path

import gradio as gr
from gradio.utils import get_upload_folder

from evaluation.serving import Downloads, HubCheck, Measurement, ModelSpec
from prune.core.errors import InvalidInput, LayerCutError
from prune.core.loading import in_local_cache, is_default
from prune.core.surgery import largest_cut

from ui import help_text, inputs, text
from ui.session import Session

log = logging.getLogger(__name__)
MAX_MESSAGE_CHARS = 500  # the longest message a visitor sees


def user_errors(fn):
    """Show LayerCutError messages as Gradio errors; anything else as a short message, never a traceback."""

    def convert(err: Exception) -> gr.Error:
        if isinstance(err, gr.Error):
            return err
        if isinstance(err, LayerCutError):
            return gr.Error(bounded(str(err)), print_exception=False)
        log.exception("Unexpected error in %s", fn.__name__)
        first = str(err).splitlines()[0] if str(err) else ""
        return gr.Error(f"Something went wrong ({type(err).__name__}: {bounded(first, 200)}). "
                        "The details are in the server log.", print_exception=False)

    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def stream(*args, **kwargs):
            try:
                yield from fn(*args, **kwargs)
            except Exception as err:
                raise convert(err) from None
        return stream

    @functools.wraps(fn)
    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception as err:
            raise convert(err) from None
    return call


def bounded(message: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """A message cut to ``limit`` characters: a safety net for any that quotes too much of what was typed."""
    return message if len(message) <= limit else message[:limit - 1] + "…"


def reporter(progress):
    """Backend progress callback → gr.Progress."""
    return lambda fraction, message="": progress(float(fraction), desc=message or None)


def default_block_size(num_layers: int) -> int:
    """A tenth of the layers: on the default model angular's best such block, [13, 16), still answers
    the first example prompt; the best block of a sixth does not (see the README)."""
    return max(1, min(largest_cut(num_layers), round(num_layers / 10)))


def owner(request: gr.Request | None) -> str | None:
    """Whose job this is: the browser session's id (None outside Gradio)."""
    return getattr(request, "session_hash", None) if request is not None else None


def need_model(session: Session):
    """The session's model, or a message when there is none yet (or it is still loading)."""
    if session.loading:
        raise InvalidInput(f"{session.loading} is still loading: wait until its heatmap shows.")
    if session.info is None:
        raise InvalidInput("Load a model first.")
    return session.info


def main_unit(measurements: list[Measurement]) -> str | None:
    """The unit most of ``measurements`` share: the comparison plot's axis."""
    units = [m.unit for m in measurements]
    return max(set(units), key=units.count) if units else None


class Context:
    """What the page's handlers share (the backend, this server's policy, where exports go, the model every new
    page opens with), and the page-wide events: Stop, the server-memory line, a closed page."""

    def __init__(self, backend, policy: inputs.Policy | None = None, default_model: ModelSpec | None = None,
                 downloads: Downloads | None = None, hub: HubCheck | None = None):
        self.backend = backend
        self.policy = policy or inputs.Policy()
        self.downloads = downloads or Downloads.for_server(self.policy.shared, Path(get_upload_folder()))
        self.default_model = default_model or ModelSpec()
        self.default_calibration = backend.models.default_calibration
        self.hub = hub or HubCheck()  # asked now, in the background: no page waits on it
        self.first_screen = None  # what a new page shows first, once computed at start-up (ui.page.first_screen)
        self.warming = None  # that computation while it runs beside the answering server (ui.page.first_screen)

    def model_choices(self) -> list[tuple[str, str]]:
        """The known models this server can load now: the embedded one, those in the local Hugging Face cache, and
        the others only once the Hub has answered (gated ones still need a token)."""
        online = self.hub.reachable is True
        return [(label, name) for label, name in help_text.KNOWN_MODELS
                if online or is_default(name) or in_local_cache(name)]

    @user_errors
    def cancel(self, request: gr.Request = None):
        """Stop this visitor's jobs only."""
        self.backend.cancel(owner(request) or "")
        gr.Info("Stopping your running job…")

    def server_memory(self):
        """The server's memory, for the line under the pickers (refreshed by a timer: other visitors change it)."""
        return text.server_memory_markdown(self.backend.models.variants.server_memory(),
                                           self.backend.models.residency.summary())

    def page_closed(self, request: gr.Request = None):
        """The visitor's page closed (Gradio's heartbeat ended): stop their jobs, streamed or not, so the device
        is free for others at once. Their exports stay for their hour (``evaluation.serving.downloads``)."""
        visitor = owner(request)
        if visitor:
            self.backend.cancel(visitor)
