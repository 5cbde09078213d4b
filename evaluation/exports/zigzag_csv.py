"""Zigzag bars as the authors' CSV files, and the benchmark's ``--zigzag_output`` / ``--dry_run``.

The CSV is what their ``run_fast_zigzag.py`` writes (``dimension,birth,death``; their times, see
``prune.depth.topology.authors_rows``). Its cuts follow their ``post_process.py`` and ``benchmark.py``.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
from pathlib import Path

import numpy as np

from prune.core.errors import InvalidCut, InvalidInput, quoted
from prune.depth.methods.zigzag import persistence_result
from prune.core.paths import write_atomic
from prune.core.recipe import Recipe
from prune.depth.result import ImportanceResult
from prune.depth.topology import PERSISTENCE_THRESHOLDS, authors_rows, bars_from_authors_rows

HEADER = ["dimension", "birth", "death"]
MODES = {f"persistence_{name.rstrip('%')}": name for name in PERSISTENCE_THRESHOLDS}  # results_<mode>.json


def write_bars_csv(diagrams: dict[int, list[tuple[float, float]]], representations: int, path) -> None:
    """LayerCut's bars (per dimension, our times) as the authors' CSV, readable by their post-processing."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(HEADER)
    writer.writerows(authors_rows(diagrams, representations))
    write_atomic(Path(path), out.getvalue())


def read_bars_csv(path, representations: int) -> dict[int, list[tuple[float, float]]]:
    """The authors' CSV (or ours) → bars per dimension in our times, checked against the depth."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise InvalidInput(f"Zigzag output file {quoted(str(file))} does not exist.")
    with file.open() as handle:
        if [cell.strip() for cell in handle.readline().split(",")] != HEADER:
            raise InvalidInput(f"{quoted(str(file))} is not a zigzag output: its first line must be "
                               f"{','.join(HEADER)}.")
        try:
            rows = np.loadtxt(handle, delimiter=",", ndmin=2)
        except ValueError:
            raise InvalidInput(f"{quoted(str(file))} has a malformed row: each must be three numbers.") from None
    if rows.size and (rows.shape[1] != 3 or np.any(rows != np.round(rows))):
        raise InvalidInput(f"{quoted(str(file))} has a malformed row: each must be three integers.")
    return bars_from_authors_rows(rows, representations)


def result_from_csv(path, num_layers: int) -> ImportanceResult:
    """The zigzag result (scores, the authors' cuts, warnings) of a CSV for a model of ``num_layers`` layers."""
    bars = read_bars_csv(path, num_layers + 1).get(1, [])
    return persistence_result(bars, num_layers, params={"zigzag_output": str(path)})


# ----------------------------------------------------------------------- the command line


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


def handled_early(args) -> bool:
    """Check the zigzag flags; for ``--dry_run`` print the file's cuts (last stdout line, JSON) and say so."""
    if (args.zigzag_output or args.dry_run or args.num_hidden_layers is not None) and not args.persistence:
        raise InvalidInput("--zigzag_output, --dry_run and --num_hidden_layers go with --persistence.")
    if (args.dry_run or args.num_hidden_layers is not None) and not args.zigzag_output:
        raise InvalidInput("--dry_run and --num_hidden_layers need --zigzag_output FILE.")
    if args.num_hidden_layers is not None and args.num_hidden_layers < 2:
        raise InvalidInput("--num_hidden_layers must be at least 2.")
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


def describe(result: ImportanceResult) -> list[str]:
    """One line per cut (what it removes), then the warnings."""
    lines = [f"zigzag {name} cut (r ≥ {PERSISTENCE_THRESHOLDS[name]}·max r): removes {size['layers']} of "
             f"{result.num_layers} layers ({100 * size['fraction']:.0f} %): {result.cuts[name]}"
             for name, size in result.cut_sizes.items()]
    return lines + [f"warning: {note}" for note in result.warnings]


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
