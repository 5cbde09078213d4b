"""The importance-method registry: a method is one plain function registered by name.

A method takes a :class:`~prune.methods.context.Context` and keyword-only options with
defaults; the registry reads those from its signature, so the UI and the CLI list methods
and options from here and nowhere else.
"""

from __future__ import annotations

import inspect
from importlib import import_module
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import UnknownMethod


@dataclass(frozen=True)
class Method:
    name: str
    label: str
    func: Callable
    description: str
    selection: str = "layers"  # what the method's paper removes: "layers" (the N lowest, anywhere) or "block"

    @property
    def options(self) -> dict[str, object]:
        """Option name → default, read from the function's keyword-only parameters."""
        params = inspect.signature(self.func).parameters.values()
        return {p.name: p.default for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY}


METHODS: dict[str, Method] = {}


def register(name: str, label: str, selection: str = "layers"):
    """Decorator: add a method under ``name``; its docstring's first line is its description.

    ``selection`` says how the method's paper picks N layers from the scores: ``"layers"``, the
    N individually least important (anywhere), or ``"block"``, the best contiguous block.
    """
    if selection not in ("layers", "block"):
        raise ValueError(f"Unknown selection rule '{selection}' for method '{name}'.")

    def add(func: Callable) -> Callable:
        if name in METHODS:
            raise ValueError(f"Importance method '{name}' is registered twice.")
        description = (inspect.getdoc(func) or "").splitlines()[0]
        METHODS[name] = Method(name=name, label=label, func=func, description=description, selection=selection)
        return func

    return add


def get_method(name: str) -> Method:
    """The method registered as ``name``, or a clear error listing the known ones."""
    if name not in METHODS:
        raise UnknownMethod(f"Unknown importance method '{name}'. Known methods: {', '.join(METHODS)}.")
    return METHODS[name]


def check_options(method: Method, options: dict) -> dict:
    """The method's defaults updated with ``options``; unknown option names are an error."""
    unknown = set(options) - set(method.options)
    if unknown:
        from ..errors import InvalidInput

        raise InvalidInput(
            f"Method '{method.name}' has no option(s) {sorted(unknown)}; it takes {sorted(method.options) or 'none'}."
        )
    return {**method.options, **options}


def options_for_cut(method: Method, n: int, options: dict | None = None) -> dict:
    """``options`` with what ``method`` needs to choose a cut of ``n`` layers: a greedy one runs at least ``n`` steps.

    A greedy order's first steps do not depend on how many follow, so a run that goes further
    (the default one, sharing its cache) is kept rather than asked for exactly ``n``.
    """
    options = dict(options or {})
    if "num_removals" in method.options and n > options.get("num_removals", method.options["num_removals"]):
        options["num_removals"] = n
    return options


# Registration happens on import; this tuple is the one place that names the method modules.
for _module in ("angular", "block_influence", "relative_magnitude", "ppl", "sleb", "taylor", "zigzag", "sublayer"):
    import_module(f".{_module}", __name__)
