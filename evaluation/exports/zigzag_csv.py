"""Zigzag bars as the authors' CSV files, read and written, and the cuts a file gives described (the command line's
``--zigzag_output`` / ``--dry_run`` are in :mod:`evaluation.cli.zigzag`).

The CSV is what their ``run_fast_zigzag.py`` writes (``dimension,birth,death``; their times, see
``prune.depth.topology.authors_rows``). Its cuts follow their ``post_process.py`` and ``benchmark.py``.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import numpy as np

from prune.core.errors import InvalidInput, quoted
from prune.depth.methods.zigzag import persistence_result
from prune.core.paths import write_atomic
from prune.depth.result import ImportanceResult
from prune.depth.topology import PERSISTENCE_THRESHOLDS, authors_rows, bars_from_authors_rows

HEADER = ["dimension", "birth", "death"]


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


def describe(result: ImportanceResult) -> list[str]:
    """One line per cut (what it removes), then the warnings."""
    lines = [f"zigzag {name} cut (r ≥ {PERSISTENCE_THRESHOLDS[name]}·max r): removes {size['layers']} of "
             f"{result.num_layers} layers ({100 * size['fraction']:.0f} %): {result.cuts[name]}"
             for name, size in result.cut_sizes.items()]
    return lines + [f"warning: {note}" for note in result.warnings]

