"""The family registry: each compression family declares once what it is (mergekit's merge methods, peft's tuners).

A family (depth cut, attention/MLP drop, sparsity, width, low-rank, healing, …) lives in its own folder
under ``prune/`` and registers one :class:`Family` when ``prune`` is imported: its name, label, paper and
link, its recipe step, the methods the app's picker offers with their level (label, range, default),
how a picked method and level become a step, and its command-line options with their help and how they
become a step. The UI's picker and controls, the CLI's parser and the model card read it from here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from prune.core.errors import quoted

FAMILIES: dict[str, Family] = {}


@dataclass(frozen=True)
class Level:
    """A picked method's one number, in percent: its label, range and default."""

    label: str
    minimum: float
    maximum: float
    default: float


@dataclass(frozen=True)
class Choice:
    """One entry of the app's method picker that builds a step (depth methods come from the importance registry)."""

    name: str  # what the picker and the API send
    label: str
    description: str
    level: Level | None  # None: the method has no level (the slider hides)
    patterns: bool = False  # it takes an N:M pattern beside its level


@dataclass(frozen=True)
class Option:
    """One command-line option: ``--flag`` with argparse's keywords (``help``, ``type``, ``choices``, …)."""

    flag: str
    keywords: dict = field(default_factory=dict, compare=False, hash=False)

    @property
    def dest(self) -> str:
        return self.flag.removeprefix("--")


@dataclass(frozen=True)
class Family:
    name: str
    label: str  # the picker's group for its choices
    step: type | None  # its recipe step class
    paper: str
    link: str
    about: str  # one line for the README and the CLI's help
    choices: tuple[Choice, ...] = ()
    build: Callable | None = None  # (choice name, level %, pattern, calibration) → step
    options: tuple[Option, ...] = ()
    from_args: Callable | None = None  # (parsed arguments, calibration, data folder) → step or None
    # (parsed arguments) → None, or a one-line message for options that do not go together
    check_args: Callable | None = None
    stage: int = 0  # where flags' steps go in a recipe built from the CLI (the order steps may follow each other)
    # Loading a saved variant: for a config that needs modules of another shape, what reshapes a model built from
    # it before its weights are read (None: a standard model); and what restores the family's form after loading.
    reshape: Callable | None = None  # (config) → (model → model) or None
    restore: Callable | None = None  # (model) → model
    # What it can do for a loaded model: None, or one line why it cannot build on it (a mixture of experts' stacked
    # experts, layers unlike Llama's); the model line says it before a build is tried
    refuses: Callable | None = None  # (model) → str | None

    @property
    def flag(self) -> str | None:
        """The option that adds this family's step on the command line (the first one), if any."""
        return self.options[0].flag if self.options and self.from_args is not None else None


def register_family(family: Family) -> Family:
    if family.name in FAMILIES:
        raise ValueError(f"Family {quoted(family.name)} is registered twice.")
    FAMILIES[family.name] = family
    return family


def choices() -> dict[str, tuple[Family, Choice]]:
    """Every picker choice that builds a step, by name, with its family, in registration order."""
    return {c.name: (f, c) for f in FAMILIES.values() for c in f.choices}


def reshape_for(config) -> Callable | None:
    """What reshapes a model built from ``config`` (a saved variant's), if a family says it must."""
    return next((found for f in FAMILIES.values() if f.reshape and (found := f.reshape(config))), None)


def restored(model):
    """``model`` after each family restored its own form (e.g. dropped blocks dropped again)."""
    for family in FAMILIES.values():
        if family.restore is not None:
            model = family.restore(model)
    return model


def refusals(model) -> dict[str, str]:
    """{family label: the one line it refuses ``model`` with} for every family that cannot build on it."""
    return {f.label: why for f in FAMILIES.values() if f.refuses is not None and (why := f.refuses(model))}


def step_families() -> list[Family]:
    """The families whose step a command-line flag adds, in the order their steps apply."""
    return sorted((f for f in FAMILIES.values() if f.from_args is not None), key=lambda f: f.stage)
