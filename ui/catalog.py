"""The method picker, read from the registries: depth methods (importance scores, then a cut), then each
family's step methods (sparsity, width, low-rank, …: *Build* puts one in the edited slot as a recipe step).

Depth methods are the importance methods of ``prune.METHODS``: *Analyze* scores every layer and a cut
is chosen from the scores. Step methods are the choices the families declare in ``prune.FAMILIES``,
each with its level (label, range, default) and how it becomes a step.
"""

from __future__ import annotations

import prune
from prune.core.calibration import Calibration
from prune.core.errors import InvalidInput, UnknownMethod, quoted
from prune.core.family import Choice, choices

STEP_METHODS = choices()  # name → (family, choice); complete once ``prune`` is imported


def method_choices() -> list[tuple[str, str]]:
    """(label, name) for the picker: depth methods first, then each family's, each group named in its labels."""
    return ([(f"Depth · {m.label}", m.name) for m in prune.METHODS.values()]
            + [(f"{family.label} · {choice.label}", name) for name, (family, choice) in STEP_METHODS.items()])


def check_method(name) -> str:
    """A method of the picker (depth or step), or a one-line message naming the known ones."""
    if not isinstance(name, str) or (name not in prune.METHODS and name not in STEP_METHODS):
        raise UnknownMethod(f"Unknown method {quoted(name)}. Known methods: "
                            f"{', '.join(_grouped([*prune.METHODS, *STEP_METHODS]))}.")
    return name


def _grouped(names: list[str]) -> list[str]:
    """``names`` with three or more that share a prefix written once: 'experts-{reap,frequency,…}' (one short line)."""
    prefixes = [n.partition("-")[0] for n in names if "-" in n]
    shared = {p for p in prefixes if prefixes.count(p) >= 3}
    found: list[str] = []
    for name in names:
        prefix = name.partition("-")[0]
        if prefix not in shared:
            found.append(name)
        elif not any(f.startswith(f"{prefix}-{{") for f in found):
            found.append(f"{prefix}-{{{','.join(n.partition('-')[2] for n in names if n.startswith(prefix + '-'))}}}")
    return found


def is_step_method(name: str) -> bool:
    return name in STEP_METHODS


def choice(name: str) -> Choice:
    return STEP_METHODS[name][1]


def has_level(name) -> bool:
    """Whether ``name`` is a step method with a level (quantization has none)."""
    return name in STEP_METHODS and choice(name).level is not None


def step_markdown(name: str) -> str:
    found = choice(name)
    return f"**{found.label}**: *{found.description}*"


def level_slider(name: str) -> dict:
    """The level slider's settings for a step method, from its family's declaration (hidden where it has none)."""
    level = choice(name).level
    if level is None:
        return dict(visible=False)
    return dict(label=level.label, minimum=level.minimum, maximum=level.maximum, value=level.default, visible=True)


def step_for(name: str, level: float | None, pattern: str, calibration: Calibration):
    """The recipe step a step method builds at ``level`` % (None for one without a level; the steps check their
    values)."""
    if name not in STEP_METHODS:
        raise InvalidInput(f"{quoted(name)} is not a width method; choose one of {', '.join(STEP_METHODS)}.")
    family, _ = STEP_METHODS[name]
    return family.build(name, level, pattern, calibration)

