"""How the page's events run: the device's jobs one at a time (a ZeroGPU Space lends a GPU for each), light ones
beside them."""

from __future__ import annotations

try:  # On a ZeroGPU Space, heavy callbacks borrow a GPU for their duration.
    import spaces

    gpu = spaces.GPU(duration=180)
except ImportError:
    def gpu(fn):
        return fn

DEVICE = dict(concurrency_id="device", concurrency_limit=1)  # one heavy job at a time; others queue
LIGHT = dict(concurrency_limit=None, show_progress="hidden")
FEEDBACK = dict(concurrency_limit=None, show_progress="minimal")  # beside the device's jobs (one at a time inside)


def by_name(*events) -> dict:
    """Events by their api names, for the page to chain and cancel."""
    return {event["api_name"]: event for event in events}
