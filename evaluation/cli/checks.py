"""The one check of the parsed flags, before anything loads: which flags go together, in the order the errors
are reported (the first broken rule is the one said)."""

from __future__ import annotations

from prune.core.errors import InvalidInput, quoted
from prune.core.family import FAMILIES
from prune.depth.methods import METHODS
from prune.depth.selection import check_remove

from evaluation.cli import tasks, zigzag
from evaluation.cli.steps import adds_step
from evaluation.core.settings import RANK_SEARCH
from evaluation.frontier.compound import check_repair
from evaluation.frontier.plan import (DEFAULT_AXIS, DEFAULT_SIZES, FAMILIES as FRONTIER_FAMILIES, check_plan,
                                      check_sizes, check_target)
from evaluation.sweeps.search_splits import WIKITEXT


def check_mode(args) -> None:
    """What can be checked before loading a model."""
    _check_cut(args)
    adding = adds_step(args)
    _check_steps(args, adding)
    _check_sweep_options(args)
    _check_rank_search(args)
    _check_extras(args, adding)
    tasks.check(args)
    zigzag.check(args)


def _check_cut(args) -> None:
    """A cut mode's own flags: --personalized's layers, --method's name and count, --drop's blocks."""
    if args.personalized:
        if args.start_block is None or args.end_block is None:
            raise InvalidInput("--personalized needs --start_block and --end_block (the last layer cut, inclusive).")
    elif args.method is not None:
        if args.method not in METHODS:
            raise InvalidInput(f"Unknown method {quoted(args.method)}. Known methods: {', '.join(METHODS)}.")
        if args.num_layers is None or args.num_layers < 1:
            raise InvalidInput("--method needs --num_layers K ≥ 1 (how many layers to cut).")
    if args.drop and args.method is None:
        raise InvalidInput("--drop needs --method sublayer --num_layers N (the blocks come from its scores).")
    if args.drop:
        check_remove(args.drop, args.method)


def _check_steps(args, adding: bool) -> None:
    """Each family's options, and no step added to a sweep or the frontier (which choose their own)."""
    for family in FAMILIES.values():
        if family.check_args is not None:
            family.check_args(args)
    if adding and (args.sweep is not None or args.sparsity_sweep or args.frontier is not None):
        flags = [f.flag for f in FAMILIES.values() if f.flag]
        raise InvalidInput(f"{', '.join(flags[:-1])} and {flags[-1]} add a step to a compared model: not with "
                           "--sweep, --sparsity_sweep or --frontier.")


def _check_sweep_options(args) -> None:
    """--frontier's options with it only (checked there), --sparsity_sweep's likewise."""
    if args.frontier is not None:
        check_frontier(args)
    elif args.axis or args.sizes or args.target or args.frontier_all:
        raise InvalidInput("--axis, --sizes, --target and --frontier_all go with --frontier.")
    if (args.levels is not None or args.methods is not None) and not args.sparsity_sweep:
        raise InvalidInput("--levels and --methods go with --sparsity_sweep.")


def check_frontier(args) -> None:
    """--frontier's options, checked before anything loads (``args.target`` becomes a Target)."""
    if args.frontier not in METHODS:
        raise InvalidInput(f"Unknown method {quoted(args.frontier)} for --frontier. "
                           f"Known methods: {', '.join(METHODS)}.")
    if args.target is not None:
        args.target = check_target(args.target)
        if args.axis not in (None, args.target.axis):
            raise InvalidInput(f"--target {args.target.axis}=… measures by {args.target.axis}: leave out --axis.")
    repair = None if args.repair is None else check_repair(args.repair[0], _seconds(args.repair[1]))
    args.families = FRONTIER_FAMILIES if args.families is None else \
        tuple(part.strip() for part in args.families.split(";") if part.strip())
    args.plan = check_plan(args.axis or DEFAULT_AXIS, DEFAULT_SIZES if args.sizes is None else check_sizes(args.sizes),
                           args.frontier, families=args.families, repair=repair)
    if args.export_dir and args.target is None:
        raise InvalidInput("--frontier saves a model with --target (the best under it) and --export_dir.")
    if args.explain:
        raise InvalidInput("--explain compares chosen cuts: not with --frontier.")


def _seconds(text: str) -> float | str:
    try:
        return float(text)
    except ValueError:
        return text  # refused in one line by check_repair


def _check_rank_search(args) -> None:
    """--rank_search's options with it only, and within their range."""
    search_options = (args.search_on != WIKITEXT or args.tolerance != RANK_SEARCH.tolerance
                      or args.search_limit != RANK_SEARCH.limit or args.search_layers is not None)
    if search_options and args.rank_search is None:
        raise InvalidInput("--search_on, --tolerance, --search_limit and --search_layers go with --rank_search.")
    if args.rank_search is not None and (args.search_limit < 0 or args.tolerance < 0 or
                                         (args.search_layers is not None and args.search_layers < 1)):
        raise InvalidInput("--search_limit and --tolerance are at least 0, --search_layers at least 1.")


def _check_extras(args, adding: bool) -> None:
    """--explain, --speed, --gguf and --export_dir where a comparison has them to give, and the batch size."""
    if args.explain and (args.sweep is not None or args.sparsity_sweep or args.export_dir or
                         (args.full and not adding)):
        raise InvalidInput("--explain compares a compressed model with the original: use it with a cut mode "
                           "(--personalized, --method, --persistence, --rank_search) or a step, without --sweep, "
                           "--sparsity_sweep or --export_dir.")
    if args.speed and (args.sweep is not None or args.sparsity_sweep or args.frontier is not None or args.explain):
        raise InvalidInput("--speed adds speed and memory rows to a comparison (--full, a cut mode, a step or "
                           "--recipe); the frontier times every candidate itself, and sweeps and --explain do not.")
    if args.engine and not (args.speed or args.frontier is not None):
        raise InvalidInput(f"--engine {args.engine} goes with --speed (the compared columns timed and scored there) or "
                           "--frontier (each point's decode timed there).")
    if args.gguf and not args.export_dir:
        raise InvalidInput("--gguf goes with --export_dir.")
    if args.full and args.export_dir and not adding:
        raise InvalidInput("--export_dir saves a pruned model: use it with a cut or a step, not --full alone.")
    if args.batch_size < 1:
        raise InvalidInput("--batch_size must be at least 1.")
