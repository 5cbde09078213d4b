"""Which models sit whole on the device and which wait off it, so that models compared side by side take turns.

A job names the models it computes with (:meth:`Residency.ready`). A base model, or a variant built into files of its
own, that waits off the device is brought back whole for it (:mod:`prune.core.parking`); if it does not fit,
the models used least recently by no other running job leave first (:func:`prune.core.parking.park`: beside a GPU to
CPU memory, on a CPU to a memory-mapped file of its own), until it does, within the memory budget and the device's
free memory.
Depth cuts and drops are views of their base and come with it; a variant built in memory stays where it was built.
When it cannot fit even then, nothing moves, and the model computes as it is, reading each layer's weights for its
pass. Jobs run one at a time per device (:mod:`evaluation.core.jobs`), which is when this runs.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn

from prune.core.budget import configured_budget
from prune.core.devices import free_on
from prune.core.loading import MEMORY_HEADROOM
from prune.core import parking
from prune.core.layer_files import own_files

from evaluation.core import allocator
from evaluation.core.jobs import Job, device_key


@dataclass(frozen=True)
class Swap:
    """The last time models took turns: what came in, what left for it, and how long both took."""

    brought: tuple[str, ...]
    brought_bytes: int
    parked: int  # how many models left the device for them
    parked_bytes: int
    seconds: float


@dataclass
class _Unit:
    model: weakref.ref
    name: str
    files: bool  # a variant built into files of its own (else a model in memory)
    stored: parking.Stored | None = None  # where a model in memory waits (kept: parking it again copies nothing)
    hooked: parking.Hooked | None = None  # a variant from files, brought in: its hooks, to park it again
    away: bool = False  # a model in memory parked off the device
    jobs: tuple[Job, ...] = ()  # the jobs that computed with it; a running one keeps it in

    def is_away(self, model: nn.Module) -> bool:
        return parking.in_files(model) if self.files else self.away

    def need(self, model: nn.Module) -> int:
        """Bytes bringing it puts on the device."""
        if not self.is_away(model):
            return 0
        return parking.waiting_bytes(model) if self.files else parking.parked_bytes(model)


class Residency:
    """The device's models and whose turn it is; ``live()`` lists every model the server holds (for the budget)."""

    def __init__(self, device: str, live: Callable[[], Iterable[nn.Module]]):
        self.device = torch.device(device_key(device))
        self._live = live
        self._units: OrderedDict[int, _Unit] = OrderedDict()  # least recently used first
        self._guard = threading.Lock()
        self.last: Swap | None = None

    def ready(self, models: dict[str, nn.Module], job: Job) -> bool:
        """Bring ``models`` ({name: model}) whole onto the device for ``job``, parking others as needed; whether they
        all are now (if not, nothing moved: they compute as they are)."""
        with self._guard:
            pairs = [(self._unit(model, name, job), model) for name, model in models.items()]
            waiting = [(unit, model) for unit, model in pairs if unit.is_away(model)]
            need = sum(unit.need(model) for unit, model in waiting)
            if not waiting:
                return True
            keep = {id(model) for model in models.values()}
            victims = [(u, m) for u, m in self._present() if id(m) not in keep and not _busy(u, job)]
            spare = sum(parking.placed_bytes([m], self.device) for _, m in victims)
            if need * MEMORY_HEADROOM > self._room() + spare:
                return False
            started, left = time.perf_counter(), []
            for unit, model in victims:
                if need * MEMORY_HEADROOM <= self._room():
                    break
                job.update(0.0, f"Making room on {self.device}: "
                                f"a model not computing now moves to {_where(self.device)}…")
                left.append(parking.placed_bytes([model], self.device))
                self._park(unit, model)
            for unit, model in waiting:
                job.update(0.0, f"Bringing {unit.name} to {self.device} ({unit.need(model) / 2**30:.2f} GiB)…")
                self._bring(unit, model)
            self.last = Swap(tuple(u.name for u, _ in waiting), need, len(left), sum(left),
                             time.perf_counter() - started)
            return True

    def waiting(self, model: nn.Module) -> bool:
        """Whether ``model`` waits off the device because it was parked here."""
        with self._guard:
            unit = self._units.get(id(model))
            return unit is not None and not unit.files and unit.away

    def room_beside(self, model: nn.Module) -> int:
        """What will be free on the device once ``model``, waiting off it, is back."""
        with self._guard:
            return self._room() - int(parking.parked_bytes(model) * MEMORY_HEADROOM)

    @contextmanager
    def steady(self) -> Iterator[None]:
        """No model moves while this is held (for work that copies a model's modules beside the device lock)."""
        with self._guard:
            yield

    def summary(self) -> str:
        """'models taking turns on cpu: 1 on it, 1 waiting off it · last swap: …', or '' while nothing has taken turns
        (no names: every visitor sees this line)."""
        with self._guard:
            if self.last is None:
                return ""
            alive = [(unit, model) for unit in list(self._units.values()) if (model := unit.model()) is not None]
            away = sum(unit.is_away(model) for unit, model in alive)
            last = self.last
        moved = f"{len(last.brought)} model{'s' * (len(last.brought) > 1)} in ({last.brought_bytes / 2**30:.2f} GiB)"
        if last.parked:
            moved += f", {last.parked} out ({last.parked_bytes / 2**30:.2f} GiB)"
        return (f"models taking turns on {self.device}: {len(alive) - away} on it, {away} waiting off it · last swap: "
                f"{moved} in {last.seconds:.2f} s")

    def _unit(self, model: nn.Module, name: str, job: Job) -> _Unit:
        key = id(model)
        unit = self._units.pop(key, None)
        if unit is None or unit.model() is not model:
            unit = _Unit(weakref.ref(model, lambda _, key=key: self._units.pop(key, None)), name, own_files(model))
        unit.jobs = tuple(j for j in unit.jobs if not j.ended) + (job,)
        self._units[key] = unit  # the most recently used last
        return unit

    def _present(self) -> list[tuple[_Unit, nn.Module]]:
        """The models whole on the device that could leave it, least recently used first."""
        found = []
        for unit in list(self._units.values()):
            model = unit.model()
            if model is not None and not unit.is_away(model) and parking.placed_bytes([model], self.device):
                found.append((unit, model))
        return found

    def _park(self, unit: _Unit, model: nn.Module) -> None:
        if unit.files:
            parking.park_in_files(model, unit.hooked)
        else:
            unit.stored, unit.away = parking.park(model, self.device, unit.stored), True
        _free(self.device)

    def _bring(self, unit: _Unit, model: nn.Module) -> None:
        if unit.files:
            unit.hooked = parking.bring_from_files(model, self.device)
        else:
            parking.bring(model, self.device, unit.stored)
            unit.away = False

    def _room(self) -> int:
        """Bytes free for weights on the device: its free memory, within the budget less what the models hold there."""
        room = free_on(self.device)
        budget = configured_budget()
        if budget is not None:
            room = min(room, budget - parking.placed_bytes(self._live(), self.device, self._mapped()))
        return room

    def _mapped(self) -> set[int]:
        """Data pointers of the models parked in mapped files on a CPU: they hold no memory of their own."""
        return {t.data_ptr() for unit in list(self._units.values()) if unit.away and unit.stored is not None
                for t in unit.stored.data.values()}


def _busy(unit: _Unit, job: Job) -> bool:
    """Whether a running job other than ``job`` computes with ``unit`` (a stream between its rounds, say)."""
    return any(not other.ended and not other.same(job) for other in unit.jobs)


def _free(device: torch.device) -> None:
    """Hand what parking freed back, so that the device's free memory shows it."""
    if device.type == "cuda":
        torch.cuda.empty_cache()
    else:
        allocator.release()


def _where(device: torch.device) -> str:
    return "CPU memory" if device.type == "cuda" else "its files"
