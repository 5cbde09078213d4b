"""The tables of measurements the page shows: the comparison of ``evaluation.measure.measurement``, each compared
model's column titled with its recipe (as its chart's legend and its generation column are), and column widths
that fit the page: no header broken inside a word, no table wider than the page."""

from __future__ import annotations

import math

import gradio as gr
import pandas as pd

from evaluation.serving import mt_bench_cells, ORIGINAL, to_dataframe
from ui import judge_text, text

WRAPPED_CHARS = 22  # a longer cell (a metric's name) wraps at its spaces instead of widening its column
ONE_LINE_HEADER = 14  # a header up to this long stays on one line; a longer one wraps between its words
PADDING_CHARS = 2  # a cell's padding, in characters
SHARE_OF_WIDTH = 99.0  # % of the table's width the columns share (its borders take the rest)


def comparison_table(measurements, variants: dict) -> dict:
    """The original and each compressed model (``variants``: label → recipe) side by side, one row per metric: the
    table's update, its value and its column widths. No "Group" column: the metrics' names say it, and the
    page's width goes to the models."""
    table = to_dataframe(list(measurements)).drop(columns="Group", errors="ignore")
    table = table.rename(columns={label: text.column_label(label, variants) for label in variants})
    return gr.update(value=table, column_widths=column_widths(table))


def agreement_rows(report) -> list[list[str]]:
    """A cut sweep's methods, best agreement first, each ρ as the chart's legend writes it ("+0.71"); "—" where it
    is undefined (a constant score), "failed" for a method that did not run."""
    def rank(item):
        return -item[1] if math.isfinite(item[1]) else 2

    rows = [[method, f"{rho:+.2f}" if math.isfinite(rho) else "—"]
            for method, rho in sorted(report.agreement.items(), key=rank)]
    return rows + [[method, "failed"] for method in report.failed]


def column_widths(table: pd.DataFrame) -> list[str]:
    """Each column's share of the width, in proportion to the characters it needs (see the module's constants)."""
    needs = [_chars(str(header), table[header]) + PADDING_CHARS for header in table.columns]
    total = sum(needs)
    return [f"{math.floor(10 * SHARE_OF_WIDTH * need / total) / 10}%" for need in needs]  # rounded down: never over


def _chars(header: str, cells: pd.Series) -> int:
    words = len(header) if len(header) <= ONE_LINE_HEADER else max(map(len, header.split()))
    longest_cell = max((len(str(cell)) for cell in cells), default=0)
    return max(words, min(longest_cell, WRAPPED_CHARS))


def mt_bench_table(tally: dict[str, dict[str, dict]], titles: dict[str, str]) -> dict:
    """MT-Bench's tally (``MtBenchRun.tally``) as rows grouped by category, then turn, then overall: each model's
    mean score, its unparsable ratings, and a compressed model's games against the original."""
    groups = list(dict.fromkeys(group for found in tally.values() for group in found))
    rows = []
    for group in groups:
        for label, found in tally.items():
            if (t := found.get(group)) is None:
                continue
            rows.append([group, titles.get(label, label), *mt_bench_cells(t, games=label != ORIGINAL)])
    table = pd.DataFrame(rows, columns=list(judge_text.MT_BENCH_HEADERS))
    return gr.update(value=table, column_widths=column_widths(table))
