"""Healing as a visitor's job whose loss curve streams while it trains (see :mod:`prune.healing.train`).

``prune.healing.train`` reports each step through a callback; :func:`stream` runs it in a worker thread (with the
caller's context, so a page's progress bar still updates) and turns the callbacks into values the
caller iterates: one :class:`LossPoint` per step (step 0 is before training), then the healed model.
Stopping the iteration (a page closed) cancels the worker at its next step and waits for it.
"""

from __future__ import annotations

import contextvars
import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass

from torch import nn

from prune.core.step import Earlier

from evaluation.core.jobs import Job


@dataclass(frozen=True)
class LossPoint:
    step: int  # optimizer steps done (0: before training)
    steps: int  # asked for
    train: float  # mean loss of this step's batch (at step 0: of the first batch, before training)
    heldout: float | None  # loss on the held-out windows, when measured at this step


def stream(job: Job, heal_step, model: nn.Module, tokenizer, original: nn.Module) -> Iterator[LossPoint | nn.Module]:
    """Heal ``model`` with the recipe step ``heal_step`` inside ``job``: each step's loss, then the healed model.

    ``original``: the model the recipe started from (distillation's teacher)."""
    events: queue.Queue = queue.Queue()

    def train():
        try:
            healed = heal_step.apply(model, tokenizer, progress=job.update, earlier=Earlier(original),
                                     callback=lambda *point: events.put(LossPoint(*point)))
            events.put(("done", healed))
        except BaseException as err:  # re-raised in the caller's thread, Cancelled included
            events.put(("failed", err))

    worker = threading.Thread(target=contextvars.copy_context().run, args=(train,), daemon=True,
                              name="layercut-heal")
    worker.start()
    try:
        while True:
            item = events.get()
            if isinstance(item, LossPoint):
                yield item
                continue
            kind, value = item
            if kind == "failed":
                raise value
            yield value
            return
    finally:
        if worker.is_alive():  # the caller stopped listening: stop the training at its next step
            job.stop()
            worker.join()
