"""The recipes a cut mode compares: layers chosen by hand, by zigzag persistence, by a method's scores or by the
rank search (none for --full)."""

from __future__ import annotations

from prune.core.calibration import Calibration
from prune.core.errors import InvalidCut, InvalidInput
from prune.core.recipe import Recipe
from prune.core.surgery import largest_cut
from prune.depth.methods import METHODS, options_for_cut, sleb
from prune.depth.selection import LAYERS, chosen_recipe

from evaluation.cli import output, zigzag
from evaluation.core.pool import ModelSpec
from evaluation.serving.backend import Backend
from evaluation.sweeps.search_splits import format_search


def chosen(args, backend: Backend, spec: ModelSpec, info, progress) -> dict[str, Recipe]:
    """Mode name → the recipe it compares (none for --full)."""
    if args.full:
        return {}
    if args.personalized:
        layers = _personalized_layers(args.start_block, args.end_block, info.num_layers)
        return {"personalized": Recipe.cut(info.num_layers, layers, origin="chosen by hand")}
    if args.persistence:
        return zigzag.persistence_cuts(args, backend, spec, info.num_layers, progress)
    calibration = output.calibration_of(args, backend)
    if args.rank_search:
        return {"rank_search": _searched(args, backend, spec, info, calibration, progress)}
    method = METHODS[args.method]
    result = backend.analysis.score(spec, args.method, calibration=calibration, progress=progress,
                                    **options_for_cut(method, args.num_layers))
    progress(1.0, f"{method.label}: {result.timing()}.")
    if "removal_order" in result.params:  # a greedy order: show how its cut was built
        print("\n".join(sleb.step_lines(result)), flush=True)
    name = f"{args.method}-{args.drop}" if args.drop else args.method
    return {name: chosen_recipe(result, args.num_layers, args.selection, origin=method.label,
                                remove=args.drop or LAYERS)}


def _personalized_layers(start: int, end_inclusive: int, num_layers: int) -> list[int]:
    """Layers S…E (E inclusive), checked in the seed's terms."""
    if not (0 <= start <= end_inclusive < num_layers) or end_inclusive - start + 1 > largest_cut(num_layers):
        raise InvalidCut(f"Cannot cut layers {start}…{end_inclusive} (--end_block is inclusive): the model has "
                         f"layers 0…{num_layers - 1} and at least one must remain.")
    return list(range(start, end_inclusive + 1))


def _searched(args, backend: Backend, spec: ModelSpec, info, calibration: Calibration, progress) -> Recipe:
    """--rank_search: the search's table printed; the recipe of the searched model."""
    layers = None if args.search_layers is None else range(max(0, info.num_layers - args.search_layers),
                                                            info.num_layers)
    done = None
    for done in backend.training.rank_search(spec, space=args.rank_search, criterion=args.search_on,
                                             tolerance=args.tolerance, limit=args.search_limit or None,
                                             layers=layers, calibration=calibration, progress=progress):
        pass
    print(format_search(done.result, args.search_on), flush=True)
    if done.recipe is None:
        raise InvalidInput("The rank search lowered no projection within the tolerance: nothing to compare. "
                           "Allow a larger --tolerance.")
    return done.recipe
