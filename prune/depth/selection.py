"""Which N layers a result removes: as the method's paper picks them, or as the best contiguous block.

ShortGPT (Block Influence), Shortened LLaMA (PPL, Taylor+) and the relative-magnitude and
greedy papers remove the N individually least important layers, wherever they are; Gromov et
al. (angular distance) remove the best contiguous block. Zigzag persistence's own rule is a
threshold (its "10%"/"20%" named cuts); for a given N its "paper" choice is the N layers of
lowest score. The rule of each method is written once, in its registration.
"""

from __future__ import annotations

from prune.core.architectures import ATTENTION, MLP
from prune.core.errors import InvalidCut, InvalidInput, quoted
from prune.depth.methods import METHODS, get_method
from prune.core.recipe import Recipe
from prune.depth.result import ImportanceResult

SELECTIONS = {  # name → how it is offered in the UI and the CLI
    "paper": "as in the method's paper",
    "block": "best contiguous block",
}
LAYERS = "layers"  # what a cut removes: whole layers, or (sub-layer scores) attention or MLP blocks
REMOVE = (LAYERS, ATTENTION, MLP)


def check_selection(selection: str) -> str:
    if selection not in SELECTIONS:
        raise InvalidInput(f"Unknown selection {quoted(selection)}. Choose one of: {', '.join(SELECTIONS)}.")
    return selection


def rule(method: str, selection: str) -> str:
    """``"layers"`` or ``"block"``: what ``selection`` means for ``method``."""
    return get_method(method).selection if check_selection(selection) == "paper" else "block"


def paper_rule_words(method: str) -> str:
    """'its paper removes the N individually least important layers' (or the best contiguous block)."""
    if get_method(method).selection == "block":
        return "its paper removes the best contiguous block of N layers"
    return "its paper removes the N individually least important layers, wherever they are"


def chosen_layers(result: ImportanceResult, n: int, selection: str = "paper") -> list[int]:
    """The ``n`` layers ``result`` removes under ``selection``, sorted; never a protected one.

    A greedy order (SLEB's ``params["removal_order"]``) ranks its removals first, so its ``n``
    least important layers are its first ``n`` removals, the cut it built step by step; past
    its last step that would no longer be true, and asking for it is an error.
    """
    if rule(result.method, selection) == "block":
        start, end = result.best_block(n)
        return list(range(start, end))
    order = result.params.get("removal_order")
    if order is not None and n > len(order):
        raise InvalidCut(f"The greedy analysis removed {len(order)} layers, not {n}: run it with num_removals={n}.")
    return result.best_layers(n)


def check_remove(remove: str, method: str) -> str:
    """``remove``, if ``method``'s scores can choose it: attention or MLP blocks need a method that scores them."""
    if remove not in REMOVE:
        raise InvalidInput(f"Remove whole layers, attention only or MLP only, not {quoted(remove)}.")
    spec = get_method(method)
    if remove != LAYERS and not spec.sublayers:
        what = "attention" if remove == ATTENTION else "MLP"
        scorers = " or ".join(m.label for m in METHODS.values() if m.sublayers)
        raise InvalidInput(f"{spec.label} scores whole layers only: to remove {what} blocks, analyze with {scorers}.")
    return remove


def chosen_recipe(result: ImportanceResult, n: int, selection: str, origin: str, remove: str = LAYERS) -> Recipe:
    """The cut of :func:`chosen_layers`, with how it was chosen appended to ``origin``.

    ``remove`` = "attention" / "mlp" drops the ``n`` lowest-scored such blocks instead (He et al.
    drop them wherever they are, so ``selection`` does not apply).
    """
    if check_remove(remove, result.method) != LAYERS:
        what = "attention" if remove == ATTENTION else "MLP"
        return Recipe.drop(result.num_layers, **{remove: result.best_sublayers(remove, n)},
                           origin=f"{origin}: {n} lowest-scored {what} blocks")
    layers = chosen_layers(result, n, selection)
    if rule(result.method, selection) == "block":
        how = f"best block of {n} layers"
    elif "removal_order" in result.params:
        how = f"first {n} greedy removal{'s' if n > 1 else ''}"
    else:
        how = f"{n} least important layers"
    return Recipe.cut(result.num_layers, layers, origin=f"{origin}: {how}")
