"""The importance-method registry: a method is one plain function registered by name.

A method takes a :class:`~prune.depth.methods.context.Context` and keyword-only options with
defaults; the registry reads those from its signature, so the UI and the CLI list methods
and options from here and nowhere else. The values an option takes (a range of whole
numbers, or a few words) are declared once, in the method's registration, and checked here
before any work starts.
"""

from __future__ import annotations

import inspect
from importlib import import_module
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field

from prune.core.errors import InvalidInput, UnknownMethod, quoted

WINDOWS = range(1, 4097)  # calibration windows a method may read: the UI calibrates on at most 4096


@dataclass(frozen=True)
class Method:
    name: str
    label: str
    func: Callable
    description: str
    selection: str = "layers"  # what the method's paper removes: "layers" (the N lowest, anywhere) or "block"
    allowed: Mapping[str, Collection] = field(default_factory=dict, compare=False)  # option → the values it takes
    sublayers: bool = False  # it scores attention and MLP blocks too, not only whole layers
    any_kind: bool = False  # it reads the residual stream only, so it runs on encoders and encoder-decoders too

    @property
    def options(self) -> dict[str, object]:
        """Option name → default, read from the function's keyword-only parameters."""
        params = inspect.signature(self.func).parameters.values()
        return {p.name: p.default for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY}

    def check(self, name: str, value) -> None:
        """A one-line message when ``value`` is not one ``name`` takes."""
        allowed = self.allowed.get(name)
        if allowed is not None and value not in allowed:
            raise InvalidInput(f"{self.label}: {name} must be {_words(allowed)}, not {quoted(value)}.")


def _words(allowed: Collection) -> str:
    if isinstance(allowed, range):
        return f"a whole number {allowed.start:,}…{allowed[-1]:,}"
    return "one of " + ", ".join(map(str, allowed))


METHODS: dict[str, Method] = {}


def register(name: str, label: str, selection: str = "layers", *, allowed: Mapping[str, Collection] | None = None,
             sublayers: bool = False, any_kind: bool = False):
    """Decorator: add a method under ``name``; its docstring's first line is its description.

    ``selection`` says how the method's paper picks N layers from the scores: ``"layers"``, the
    N individually least important (anywhere), or ``"block"``, the best contiguous block.
    ``allowed`` gives the values of each option (every whole-number option needs a range);
    ``sublayers`` says the method scores attention and MLP blocks, so a cut may remove those; ``any_kind`` that it
    reads only the residual stream, so encoders and encoder-decoders (each stack on its own) run it too.
    """
    if selection not in ("layers", "block"):
        raise ValueError(f"Unknown selection rule '{selection}' for method '{name}'.")

    def add(func: Callable) -> Callable:
        if name in METHODS:
            raise ValueError(f"Importance method '{name}' is registered twice.")
        description = (inspect.getdoc(func) or "").splitlines()[0]
        method = Method(name=name, label=label, func=func, description=description, selection=selection,
                        allowed=dict(allowed or {}), sublayers=sublayers, any_kind=any_kind)
        _check_declaration(method)
        METHODS[name] = method
        return func

    return add


def _check_declaration(method: Method) -> None:
    """Every whole-number option has its values declared, and every default is one of them."""
    options = method.options
    for option, default in options.items():
        if isinstance(default, int) and not isinstance(default, bool) and option not in method.allowed:
            raise ValueError(f"Method '{method.name}': declare the values of its option '{option}' (allowed=...).")
    for option in method.allowed:
        if option not in options:
            raise ValueError(f"Method '{method.name}' has no option '{option}' to declare values for.")
        if options[option] not in method.allowed[option]:
            raise ValueError(f"Method '{method.name}': the default of '{option}' is not among its declared values.")


def get_method(name: str) -> Method:
    """The method registered as ``name``, or a clear error listing the known ones."""
    if name not in METHODS:
        raise UnknownMethod(f"Unknown importance method {quoted(name)}. Known methods: {', '.join(METHODS)}.")
    return METHODS[name]


def check_options(method: Method, options: dict) -> dict:
    """The method's defaults updated with ``options``; unknown option names and values it does not take are errors."""
    unknown = sorted(set(options) - set(method.options))
    if unknown:
        raise InvalidInput(f"Method '{method.name}' has no option {quoted(unknown[0])}; "
                           f"it takes {', '.join(method.options) or 'none'}.")
    for name, value in options.items():
        method.check(name, value)
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
for _module in ("prune.depth.methods.angular", "prune.depth.methods.block_influence",
                "prune.depth.methods.relative_magnitude", "prune.depth.methods.ppl", "prune.depth.methods.sleb",
                "prune.depth.methods.taylor", "prune.depth.methods.zigzag", "prune.drop.importance"):
    import_module(_module)
