"""``--persistence`` from the authors' zigzag CSV: ``--zigzag_output``, ``--dry_run`` and ``--num_hidden_layers``,
and the persistence cuts (from the file, or the backend's own analysis); the CSV itself is read in
:mod:`evaluation.exports.zigzag_csv`."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from prune.core.errors import InvalidCut, InvalidInput
from prune.core.recipe import Recipe
from prune.depth.topology import PERSISTENCE_THRESHOLDS

from evaluation.exports.zigzag_csv import describe, result_from_csv

MODES = {f"persistence_{name.rstrip('%')}": name for name in PERSISTENCE_THRESHOLDS}  # results_<mode>.json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The benchmark's flags for reading the authors' zigzag output."""
    parser.add_argument("--zigzag_output", metavar="FILE", default=None,
                        help="with --persistence: take the cuts from this zigzag CSV (dimension,birth,death, as the "
                             "authors' run_fast_zigzag.py writes it) instead of computing them")
    parser.add_argument("--dry_run", action="store_true",
                        help="with --zigzag_output: print the cuts as JSON (0-based layers) and stop, "
                             "loading no weights")
    parser.add_argument("--num_hidden_layers", type=int, default=None, metavar="N",
                        help="the model's depth for --zigzag_output when the model is not at hand")


def check(args) -> None:
    """The zigzag flags go with --persistence, and --dry_run and the depth with a file."""
    if (args.zigzag_output or args.dry_run or args.num_hidden_layers is not None) and not args.persistence:
        raise InvalidInput("--zigzag_output, --dry_run and --num_hidden_layers go with --persistence.")
    if (args.dry_run or args.num_hidden_layers is not None) and not args.zigzag_output:
        raise InvalidInput("--dry_run and --num_hidden_layers need --zigzag_output FILE.")
    if args.num_hidden_layers is not None and args.num_hidden_layers < 2:
        raise InvalidInput("--num_hidden_layers must be at least 2.")


def dry_run(args) -> bool:
    """For ``--dry_run``, print the file's cuts (last stdout line, JSON) and say so."""
    if not args.dry_run:
        return False
    result = result_from_csv(args.zigzag_output, args.num_hidden_layers or _config_depth(args))
    for line in describe(result):
        print(line, file=sys.stderr)
    print(json.dumps({name: result.cuts.get(name, []) for name in PERSISTENCE_THRESHOLDS}))
    return True


def persistence_cuts(args, backend, spec, depth: int, progress) -> dict[str, Recipe]:
    """Mode → the cut for ``--persistence``: from ``--zigzag_output`` if given, else LayerCut's own analysis."""
    if args.zigzag_output:
        if args.num_hidden_layers not in (None, depth):
            raise InvalidInput(f"--num_hidden_layers {args.num_hidden_layers} disagrees with the model's "
                               f"{depth} layers.")
        result = result_from_csv(args.zigzag_output, depth)
    else:
        result = backend.analysis.score(spec, "zigzag", progress=progress)
    for line in describe(result):
        progress(1.0, line)
    missing = [name for name in MODES.values() if name not in result.cuts]
    if missing:
        raise InvalidCut(f"Zigzag persistence found no removable layers for the {', '.join(missing)} cut(s) "
                         f"of this model. {' '.join(result.warnings)}")
    source = f"the zigzag file {Path(args.zigzag_output).name}" if args.zigzag_output else "zigzag persistence"
    return {mode: Recipe.cut(depth, result.cuts[name], origin=f"{source}, the {name} threshold cut")
            for mode, name in MODES.items()}


def _config_depth(args) -> int:
    """The model's layer count from its config alone (no weights)."""
    from transformers import AutoConfig

    from prune.core.loading import default_checkpoint, is_default

    try:
        source = default_checkpoint() if is_default(args.model) else args.model
        return int(AutoConfig.from_pretrained(source, token=args.token).num_hidden_layers)
    except (OSError, ValueError) as err:
        raise InvalidInput(f"Cannot read the model's depth ({str(err).splitlines()[0]}): pass --num_hidden_layers N.") \
            from None
