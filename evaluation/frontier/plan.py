"""What a frontier measures: the axis, the sizes, the candidates of every family at each size, and a target.

A frontier compares families at the same size. For each size (a fraction of the original: 90 / 80 / 70 %
by default) it plans the mildest candidate of each family that reaches it by arithmetic on the
parameter count, without building anything:

- a depth cut of the analysis's method, as its paper selects the layers and as the best contiguous block,
  each also with the cheapest repair, the linear patch (ReplaceMe, least squares: no training);
- He et al.'s attention drop and MLP drop (the fewest lowest-scored blocks of one kind);
- width pruning (Wanda-sp), a low-rank decomposition (feature space);
- on a mixture of experts, expert pruning by REAP (the fewest experts removed from every layer);
- Wanda sparsity, unstructured at the level that reaches the size, and 2:4 (one fixed size);
- int8 (rounded to nearest) and int4 (by GPTQ) weights, each with the input embedding in int8 (one fixed size
  each: they keep every parameter and shrink the bytes);
- each structural family with int8 and with int4 (:mod:`evaluation.frontier.compound`).

The default size is what a deployment sees: the weights' bytes as stored (what a device must hold and read;
quantized weights count their real bytes, zeros stored densely count in full). Parameters that are not zero
stay an option: sparsity reaches a parameter size, but its zeros are stored, so it reaches no size in bytes.
What a family cannot reach is said, not hidden. Measured values then decide
(:mod:`evaluation.frontier.result`): a family's point at a size is its best measured point at or under it,
so a point is never over the size it stands for, on any axis, latency included.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace

from torch import nn

from prune.core.architectures import architecture_of, block_in, decoder_layers
from prune.core.budget import amount
from prune.core.calibration import Calibration
from prune.core.errors import InvalidCut, InvalidInput, LayerCutError, quoted
from prune.core.recipe import Recipe
from prune.core.sizes import parameter_count, size_of
from prune.core.surgery import largest_cut
from prune.depth.methods import METHODS, get_method
from prune.depth.result import ImportanceResult
from prune.depth.selection import chosen_recipe
from prune.drop.sublayers import ATTENTION, MLP
from prune.experts.removal import removed_count
from prune.experts.step import MAX_FRACTION as EXPERT_MAX, ExpertPrune
from prune.lowrank.step import Decompose
from prune.patch.step import CALIBRATION as PATCH_CALIBRATION, Patch
from prune.sparsity.masks import MAX_SPARSITY
from prune.sparsity.step import Sparsify
from prune.width.step import WidthPrune

from evaluation.core.settings import PERPLEXITY
from evaluation.engines.llama_cpp import LLAMA_CPP, why_not_installed
from evaluation.frontier import compound
from evaluation.frontier.screen import screen_windows

AXES = {"bytes": "weight bytes as stored (MiB)",
        "params": "parameters not zero (zeros stored densely save no bytes and no time)",
        "ms": "measured decode latency (ms/token, batch 1)"}
DEFAULT_AXIS = "bytes"
DEFAULT_SIZES = (0.9, 0.8, 0.7)
DEFAULT_METHOD = "block_influence"  # its paper (ShortGPT) picks layers anywhere, so "paper" and "block" differ
STORED_ZEROS = "sparsity stores its zeros densely: the weights take as many bytes"
DROP_METHOD = "sublayer"  # He et al.'s attention and MLP scores
# the candidates' families, in the table's order: each family alone, then the compounds (evaluation.frontier.compound)
SINGLES = ("depth, paper", "depth, paper + patch", "depth, block", "depth, block + patch", "attention drop",
           "MLP drop", "width", "low-rank", compound.EXPERTS, "sparsity", "2:4", "int8", "int4")
FAMILIES = (*SINGLES, *compound.FAMILIES)
FIXED_FAMILIES = ("2:4", "int8", "int4")  # one size each, whatever the sizes asked
PATCH_AT_0 = "the linear patch folds into the layer before the cut, and this cut starts at layer 0"


@dataclass(frozen=True)
class Candidate:
    """One model to measure: the families it stands for (one recipe may be two: an angular-distance paper cut is
    its best block), the size it was planned for (None: a fixed size) and its recipe."""

    families: tuple[str, ...]
    size: float | None
    recipe: Recipe


@dataclass(frozen=True)
class FrontierPlan:
    """What one frontier measures, checked once where the request enters (:func:`check_plan`)."""

    axis: str  # a key of AXES
    sizes: tuple[float, ...]  # fractions of the original on that axis, largest first
    method: str  # the depth analysis's method
    calibration: Calibration | None  # for Wanda, width, low-rank (None: the built-in text)
    ppl_seq_len: int = PERPLEXITY.seq_len
    ppl_windows: int = PERPLEXITY.windows
    families: tuple[str, ...] = FAMILIES  # the families tried (FAMILIES' order); every one by default
    repair: compound.Repair | None = None  # each structural point also trained this long before it is quantized
    engine: str | None = None  # the decode timed in llama.cpp (each point's GGUF) instead of LayerCut's own loop
    screen: int = 0  # perplexity windows of each candidate's screen (0: every candidate measured in full)


def check_plan(axis: str = DEFAULT_AXIS, sizes: Iterable[float] = DEFAULT_SIZES, method: str = DEFAULT_METHOD,
               calibration: Calibration | None = None, *, ppl_seq_len: int = PERPLEXITY.seq_len,
               ppl_windows: int = PERPLEXITY.windows, families: Iterable[str] = FAMILIES,
               repair: compound.Repair | None = None, engine: str | None = None, screen: bool = True) -> FrontierPlan:
    """A checked plan: a known axis and method, sizes above 0 and below 1 (largest first, each once), known
    families (at least one; with a repair, its repaired families too: all of them when ``families`` is all).

    ``screen``: candidates screened first (:mod:`evaluation.frontier.screen`) on the windows
    :func:`~evaluation.frontier.screen.screen_windows` gives."""
    if axis not in AXES:
        raise InvalidInput(f"Measure the frontier by {', '.join(AXES)}, not {quoted(axis)}.")
    if method not in METHODS:
        raise InvalidInput(f"Unknown depth method {quoted(method)}. Known methods: {', '.join(METHODS)}.")
    values = check_sizes(sizes)
    for value, what in ((ppl_seq_len, "The perplexity window length"), (ppl_windows, "The perplexity windows")):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidInput(f"{what} must be a whole number ≥ 1, not {quoted(value)}.")
    known = (*FAMILIES, *(repair.families() if repair else ()))
    named = tuple(families) + (repair.families() if repair and tuple(families) == FAMILIES else ())
    unknown = [f for f in named if f not in known]
    if unknown or not named:
        what = f"not {quoted(unknown[0])}" if unknown else "none were given"
        raise InvalidInput(f"The frontier's families are {'; '.join(known)}; {what}.")
    if engine not in (None, LLAMA_CPP):
        raise InvalidInput(f"A frontier's decode is timed in LayerCut or {LLAMA_CPP}, not {quoted(engine)}.")
    if engine is not None and (why := why_not_installed()):
        raise InvalidInput(why)
    return FrontierPlan(axis, values, method, calibration, ppl_seq_len, ppl_windows,
                        tuple(f for f in known if f in named), repair, engine,
                        screen_windows(axis, ppl_windows, screen))


def check_sizes(sizes: Iterable[float] | str) -> tuple[float, ...]:
    """Fractions of the original above 0 and below 1, given as 0.8 or 80 (%); largest first, each once."""
    if isinstance(sizes, str):
        parts = [p for p in sizes.replace("%", " ").replace(",", " ").split() if p]
        try:
            sizes = [float(p) for p in parts]
        except ValueError:
            raise InvalidInput(f"Sizes are numbers such as 90, 80, 70 (%), not {quoted(' '.join(parts))}.") from None
    values = [float(v) / 100 if isinstance(v, (int, float)) and 1 < v < 100 else v for v in sizes]
    bad = [v for v in values if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < 1]
    if bad or not values:
        what = f"not {quoted(bad[0])}" if bad else "none were given"
        raise InvalidInput(f"Sizes are fractions of the original above 0 and below 1 (0.8 or 80: 80 %); {what}.")
    return tuple(sorted({round(float(v), 6) for v in values}, reverse=True))


@dataclass(frozen=True)
class Target:
    """The best model under ``value`` on ``axis``: a fraction of the original's (``of_original``), else bytes or ms
    per token."""

    axis: str
    value: float
    of_original: bool

    def bound(self, original: float) -> float:
        """The largest value on the axis that meets the target, given the original's."""
        return self.value * original if self.of_original else self.value

    def words(self) -> str:
        if self.of_original:
            what = "the parameters" if self.axis == "params" else "the original's bytes as stored"
            return f"{100 * self.value:g} % of {what}"
        return f"{self.value:g} ms per token" if self.axis == "ms" else f"{byte_words(self.value)} as stored"


def byte_words(value: float) -> str:
    """400 MiB, 1.5 GiB, 488.3 MiB, 1 KiB."""
    power = min(max(int(math.log2(max(value, 1)) // 10), 0), 3)
    return f"{value / 2 ** (10 * power):.4g} {('B', 'KiB', 'MiB', 'GiB')[power]}"


def check_target(text: str) -> Target:
    """``bytes=0.8`` (or 80 %) of the original's bytes as stored, ``bytes=400MiB`` (any amount the memory budget
    takes), ``params=0.8`` (or 80 %) of the parameters, ``ms=20`` per token: checked once where it enters
    (``mib=400`` is ``bytes=400MiB``)."""
    axis, _, value = (text or "").strip().lower().partition("=")
    axis, value = axis.strip(), value.replace(" ", "")
    if axis in ("kib", "mib", "gib"):
        axis, value = "bytes", value + axis
    unit, percent = value[-1:].isalpha(), value.endswith("%")
    number = amount(value) if unit else _positive(value.removesuffix("%"))
    if axis not in AXES or number is None or (unit and axis != "bytes") or (percent and axis == "ms"):
        raise InvalidInput(f"A target is bytes=0.8 (of the original's bytes as stored), bytes=400MiB or 1.5GiB, "
                           f"params=0.8 or ms=20 (a positive number), not {quoted(text)}.")
    if unit:
        return Target(axis, float(number), False)
    if axis == "ms":
        return Target(axis, number, False)
    number = number / 100 if percent else number
    return Target(axis, check_sizes([number])[0] if number != 1 else 1.0, True)


def _positive(text: str) -> float | None:
    """The positive finite number ``text`` spells, else None."""
    try:
        number = float(text)
    except ValueError:
        return None
    return number if math.isfinite(number) and number > 0 else None


def candidates(model: nn.Module, plan: FrontierPlan, depth: ImportanceResult,
               blocks: ImportanceResult | None) -> tuple[list[Candidate], dict[tuple[str, float], str]]:
    """Every candidate ``plan`` measures on ``model`` (each recipe once), and why a family reaches no size.

    ``depth`` is the analysis of ``plan.method``; ``blocks`` the sub-layer analysis (attention and MLP
    scores; None where :func:`drops_reach` says no drop reaches a size). A size in bytes or latency is planned at
    the same fraction of the parameters.
    """
    found: dict[str, Candidate] = {}
    why: dict[tuple[str, float], str] = {}
    total = parameter_count(model)

    def add(family: str, size: float | None, recipe: Recipe) -> None:
        known = found.get(recipe.key)
        families = (known.families if known else ()) + ((family,) if known is None or family not in known.families
                                                         else ())
        found[recipe.key] = Candidate(families, known.size if known else size, recipe)

    def take(family: str, size: float | None, made: Recipe | str) -> None:
        """A chosen family's candidate at ``size`` (None: a fixed one, said for every size where it is refused)."""
        if family not in plan.families:
            return
        if isinstance(made, str):
            why.update({(family, s): made for s in (plan.sizes if size is None else (size,))})
        else:
            add(family, size, made)

    for size in plan.sizes:
        for family, made in _planned(model, plan, depth, blocks, size * total, total):
            take(family, size, made)
    for family, made in _fixed(plan):
        take(family, None, made)
    for size in plan.sizes:
        for family, made in _compounds(model, plan, depth, size):
            take(family, size, made)
    if plan.repair is not None:
        for candidate in list(found.values()):
            for family in candidate.families:
                if (repaired := _repaired(family, candidate.recipe, plan)) is not None:
                    add(repaired[0], candidate.size, repaired[1])
    return list(found.values()), why


def _planned(model: nn.Module, plan: FrontierPlan, depth: ImportanceResult, blocks: ImportanceResult | None,
             limit: float, total: int):
    """(family, recipe or why not) of every family planned for ``limit`` parameters."""
    base = size_of(model)
    patch = Patch.of("lstsq", _patch_calibration(plan.calibration))
    for family, make in _depth_makers(plan, depth).items():
        cut = _fewest(make, lambda r: r.size(base).total, limit, largest_cut(len(base.layers)))
        yield family, cut
        yield f"{family} + patch", cut if isinstance(cut, str) else _patched(cut, patch)
    held = _block_params(model)
    for kind, family in ((ATTENTION, "attention drop"), (MLP, "MLP drop")):
        if kind not in held:
            yield family, f"this architecture has no single {kind} module to drop"
            continue
        if blocks is None:  # not analysed: no size is in reach (:func:`drops_reach`)
            yield family, f"dropping every {family.removesuffix(' drop')} block does not reach this size"
            continue
        yield family, _fewest(lambda n: Recipe.drop(depth.num_layers, **{kind: blocks.best_sublayers(kind, n)},
                                                    origin=f"frontier: {n} lowest-scored {kind} blocks"),
                              lambda r: total - sum(held[kind][i] for i in getattr(r.steps[0], kind)),
                              limit, len(base.layers))
    fraction = limit / total
    for family, make in (("width", lambda f: WidthPrune.of(f, plan.calibration)),
                         ("low-rank", lambda f: Decompose.of("feature", f, calibration=plan.calibration))):
        yield family, _ratio_reaching(family, make, base, fraction)
    yield compound.EXPERTS, _experts(base, plan, lambda r: r.size(base).total <= limit)
    level = _sparsity_reaching(base, total - limit)
    if plan.axis == "bytes":
        yield "sparsity", STORED_ZEROS
    elif level is not None:
        yield "sparsity", Recipe((Sparsify.of("wanda", level, calibration=plan.calibration),),
                                 origin=f"frontier: Wanda {100 * level:g} %")
    else:
        yield "sparsity", f"zeroing every decoder matrix cannot reach {100 * fraction:g} % of the parameters"


def _depth_makers(plan: FrontierPlan, depth: ImportanceResult) -> dict:
    """The depth families' recipe of n layers: as the paper selects them, and the best block."""
    label = get_method(plan.method).label
    return {f"depth, {selection}": (lambda n, selection=selection: chosen_recipe(depth, n, selection,
                                                                               origin=f"frontier: {label}"))
            for selection in ("paper", "block")}


def _compounds(model: nn.Module, plan: FrontierPlan, depth: ImportanceResult, fraction: float):
    """(family, recipe or why not) of every compound planned for ``fraction`` of the original's bytes as stored
    (see :mod:`evaluation.frontier.compound`)."""
    base, element = size_of(model), next(model.parameters()).element_size()
    limit = int(fraction * Recipe().stored_bytes(base, element))
    ratios = {"width": lambda f: Recipe((WidthPrune.of(f, plan.calibration),), origin="frontier: width"),
              "low-rank": lambda f: Recipe((Decompose.of("feature", f, calibration=plan.calibration),),
                                           origin="frontier: low-rank")}
    patch = Patch.of("lstsq", _patch_calibration(plan.calibration))
    for bits in compound.QUANTIZED:
        step = compound.quantization(bits, plan.calibration)
        alone = Recipe((step,)).stored_bytes(base, element) <= limit
        for structure, make in (*_depth_makers(plan, depth).items(), *ratios.items()):
            if plan.axis == "params":
                made = "quantization keeps every parameter (it shrinks the bytes: size by bytes)"
            elif alone:
                made = f"{bits} alone reaches this size: no structure is needed"
            elif structure in ratios:
                made = compound.largest_fitting(make, lambda r: r.then(step), limit, base, element)
            else:
                made = compound.fewest_fitting(make, lambda r: r.then(step), limit, base, element,
                                               largest_cut(len(base.layers)))
            yield f"{structure} + {bits}", made
            if structure.startswith("depth"):
                yield f"{structure} + patch + {bits}", made if isinstance(made, str) else _patched(made, patch)
        yield f"{compound.EXPERTS} + {bits}", (
            "quantization keeps every parameter (it shrinks the bytes: size by bytes)" if plan.axis == "params" else
            f"{bits} alone reaches this size: no structure is needed" if alone else
            _experts(base, plan, lambda r: r.stored_bytes(base, element) <= limit, step))


def _experts(base, plan: FrontierPlan, fits, then=None) -> Recipe | str:
    """Expert pruning by REAP of the fewest experts a layer (then ``then``, a quantization) that ``fits``, or why
    none does (a dense model has no experts)."""
    count = next((m.experts for layer in base.matrices for m in layer if m.experts > 1), None)
    if count is None:
        return "this model has no experts to remove (a mixture of experts' family)"
    for removed in range(1, removed_count(count, EXPERT_MAX) + 1):
        recipe = Recipe((ExpertPrune.of("reap", removed / count, plan.calibration),),
                        origin=f"frontier: REAP, {removed} of {count} experts a layer")
        recipe = recipe if then is None else recipe.then(then)
        if fits(recipe):
            return recipe
    return f"removing {100 * EXPERT_MAX:g} % of every layer's experts does not reach this size"


def _patched(recipe: Recipe, patch: Patch) -> Recipe | str:
    """``recipe`` (a cut, then more steps) with the linear patch right after its cut, or why it cannot take one."""
    if 0 in recipe.depth_cut.layers:
        return PATCH_AT_0
    return Recipe((recipe.steps[0], patch, *recipe.steps[1:]), recipe.origin)


def _repaired(family: str, recipe: Recipe, plan: FrontierPlan) -> tuple[str, Recipe] | None:
    """A structural candidate's repaired twin (the repair before its quantization), if the plan asks for it."""
    structure, _, bits = family.rpartition(" + ") if family.endswith(compound.QUANTIZED) else (family, "", "")
    if structure not in compound.STRUCTURES or plan.repair is None:
        return None
    name = f"{structure} + {plan.repair.name}{' + ' + bits if bits else ''}"
    if name not in plan.families:
        return None
    heal = plan.repair.step(None)  # WikiText-2 validation of the data folder, as healing trains by default
    steps = recipe.steps[:-1] if bits else recipe.steps
    return name, Recipe((*steps, heal, *recipe.steps[len(steps):]), recipe.origin)


def _sparsity_reaching(base, zeros: float) -> float | None:
    """The lowest level, in tenths of a percent, at which Wanda zeroes at least ``zeros`` weights: each row of each
    matrix loses ⌊inputs · level⌋ (None: not even at the highest level)."""
    shapes = [(m.rows, m.inputs) for layer in base.matrices for m in layer]  # every expert's rows of a stack
    zeroable = sum(rows * columns for rows, columns in shapes)
    for tenths in range(max(1, math.floor(1000 * zeros / zeroable)), round(1000 * MAX_SPARSITY) + 1):
        if sum(rows * int(columns * tenths / 1000 + 1e-9) for rows, columns in shapes) >= zeros:
            return tenths / 1000
    return None


def _fixed(plan: FrontierPlan):
    """The candidates of one size each, or why they reach no size on this axis: 2:4 (its zeros are stored) and
    int8, int4 (they keep every parameter)."""
    yield "2:4", STORED_ZEROS if plan.axis == "bytes" else \
        Recipe((Sparsify.of("wanda", pattern="2:4", calibration=plan.calibration),), origin="frontier: Wanda 2:4")
    for bits in compound.QUANTIZED:
        yield bits, ("quantization keeps every parameter (it shrinks the bytes: size by bytes)" if plan.axis == "params"
                     else Recipe((compound.quantization(bits, plan.calibration),), origin=f"frontier: {bits}"))


def _ratio_reaching(family: str, make, base, fraction: float) -> Recipe | str:
    """The recipe of ``make(ratio)`` for the largest ratio, from ``fraction`` down in steps of 0.1 %, whose count
    is at most ``fraction`` of ``base`` (channels and ranks are whole, so a plan may overshoot by a few)."""
    for tries in range(20):
        try:
            recipe = Recipe((make(round(fraction - tries / 1000, 6)),), origin=f"frontier: {family}")
            if recipe.size(base).total <= fraction * base.total:
                return recipe
        except LayerCutError as err:
            return f"{family}: {err}"
    return f"{family} cannot reach {100 * fraction:g} % of this model's parameters"


def _patch_calibration(calibration: Calibration | None) -> Calibration | None:
    """The patch's own windows (64 × 256 tokens) of the frontier's calibration text."""
    return None if calibration is None else replace(calibration, **PATCH_CALIBRATION)


def _fewest(make, count, limit: float, most: int) -> Recipe | str:
    """The recipe ``make(n)`` of the smallest n (1 … ``most``) whose ``count`` is at most ``limit``, or why none."""
    for n in range(1, most + 1):
        try:
            recipe = make(n)
        except InvalidCut as err:
            return " ".join(str(err).split())
        if count(recipe) <= limit:
            return recipe
    return f"removing {most} of them does not reach this size"


def drops_reach(model: nn.Module, plan: FrontierPlan) -> bool:
    """Whether an attention or MLP drop the plan tries could reach one of its sizes: dropping every block of a kind
    reaches it by arithmetic (if none can, the frontier needs no sub-layer analysis)."""
    total, held = parameter_count(model), _block_params(model)
    kinds = [kind for kind, family in ((ATTENTION, "attention drop"), (MLP, "MLP drop"))
             if family in plan.families and kind in held]
    return any(total - sum(held[kind]) <= max(plan.sizes) * total for kind in kinds)


def _block_params(model: nn.Module) -> dict[str, list[int]]:
    """Parameters of each layer's attention and MLP module (a kind left out where it is no single module)."""
    names = architecture_of(model).sublayers
    found = {}
    for kind, path in ((ATTENTION, names.attention), (MLP, names.mlp)):
        if path is not None:
            found[kind] = [sum(p.numel() for p in block.parameters()) if (block := block_in(layer, path)) else 0
                           for layer in decoder_layers(model)]
    return found
