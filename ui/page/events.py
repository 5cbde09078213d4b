"""How the page's events run: the device's jobs one at a time (a ZeroGPU Space lends a GPU for each, for the seconds
the job's own estimate asks), light ones beside them.

On ZeroGPU (``spaces``), a decorated call runs in a forked GPU worker and its arguments and results cross to it
pickled. The page's handlers return updates keyed by component (Gradio's dict return), and a component does not
pickle; so :func:`gpu` hands the worker's updates back keyed by the components' ids and puts the components back
in the server's process. Off ZeroGPU ``spaces.GPU`` returns the function itself: the job runs in place.
"""

from __future__ import annotations

import functools
import inspect
import logging
import math
from collections.abc import Callable

from gradio.blocks import Block
from gradio.context import Context

try:  # On a ZeroGPU Space, device jobs borrow a GPU for the seconds they ask.
    import spaces
except ImportError:
    spaces = None

log = logging.getLogger(__name__)

DEVICE = dict(concurrency_id="device", concurrency_limit=1)  # one heavy job at a time; others queue
LIGHT = dict(concurrency_limit=None, show_progress="hidden")
FEEDBACK = dict(concurrency_limit=None, show_progress="minimal")  # beside the device's jobs (one at a time inside)

# What a job asks ZeroGPU for: its estimate with a margin and the worker's start, within these bounds. A request
# over what a visitor has left of their daily quota is refused (an anonymous visitor has 2 minutes a day), so a
# short job asks for little; a job whose estimate is not known asks for its kind's default.
MIN_S, MAX_S = 10, 300
MARGIN, START_S = 1.5, 5.0
DEFAULT_S = 60  # ZeroGPU's own default

Duration = Callable[..., int]


def asked(estimate_s: float | None, default_s: float = DEFAULT_S) -> int:
    """The seconds a job asks for: ``estimate_s`` × the margin + the worker's start, clamped; None → the default."""
    wanted = default_s if estimate_s is None else MARGIN * estimate_s + START_S
    return int(min(MAX_S, max(MIN_S, math.ceil(wanted))))


def fixed(seconds: float) -> Duration:
    """A duration for a job with no estimate: always ``seconds``."""
    return lambda *_args, **_kwargs: asked(None, seconds)


def gpu(fn: Callable, duration: Duration | None = None) -> Callable:
    """``fn`` as a device job: on ZeroGPU in the GPU worker for ``duration(*its arguments)`` seconds (never failing:
    a broken estimate asks for the default), elsewhere in place. Build it inside the page's ``gr.Blocks``."""
    if spaces is None:
        return fn
    decorate = spaces.GPU(duration=_safe(duration or fixed(DEFAULT_S)))
    blocks = Context.root_block  # the page being built: where a component's id is found again
    if blocks is None:  # built outside a page (a test's handlers): no component of a page to find again
        return decorate(fn)
    stream = inspect.isgeneratorfunction(fn)
    on_device = decorate(_each(fn, by_id, stream))
    return _each(on_device, lambda result: by_component(result, blocks), stream, looks_like=fn)


def by_id(result):
    """A handler's result as it may cross to another process: component keys replaced by their ids."""
    if isinstance(result, dict) and result and all(isinstance(key, Block) for key in result):
        return {_Id(key._id): value for key, value in result.items()}
    return result


def by_component(result, blocks):
    """The inverse of :func:`by_id` on the page ``blocks``."""
    if isinstance(result, dict) and result and all(isinstance(key, _Id) for key in result):
        return {blocks.blocks[int(key)]: value for key, value in result.items()}
    return result


class _Id(int):
    """A component's id standing for it in a result (an int of its own kind, so no other dict is mistaken for one)."""


def _each(fn: Callable, convert: Callable, stream: bool, looks_like: Callable | None = None) -> Callable:
    """``fn`` with ``convert`` applied to its result, or to each item it yields when it ``stream``s; it shows
    ``looks_like``'s name and signature (default ``fn``'s: Gradio reads the handler's parameters from them)."""
    looks_like = looks_like or fn
    if stream:
        @functools.wraps(looks_like)
        def streamed(*args, **kwargs):
            for item in fn(*args, **kwargs):
                yield convert(item)
        return streamed

    @functools.wraps(looks_like)
    def call(*args, **kwargs):
        return convert(fn(*args, **kwargs))
    return call


def _safe(duration: Duration) -> Duration:
    """``duration``, asking for the default where it fails: an estimate must never stand in a job's way."""

    def seconds(*args, **kwargs) -> int:
        try:
            return duration(*args, **kwargs)
        except Exception:
            log.exception("Estimating a job's GPU seconds failed")
            return DEFAULT_S
    return seconds


def by_name(*events) -> dict:
    """Events by their api names, for the page to chain and cancel."""
    return {event["api_name"]: event for event in events}
