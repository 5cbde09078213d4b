"""Writes the command line's flags into docs/cli.md, read from the parser itself so the page cannot drift.

Run it after changing a flag: ``.venv/bin/python docs/gen_cli.py``. ``tests/test_docs.py`` fails while the page's
block differs from what this writes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PAGE = REPO / "docs" / "cli.md"
START, END = "<!-- flags:start -->", "<!-- flags:end -->"
COMMAND = ".venv/bin/python docs/gen_cli.py"


def _cell(text: str) -> str:
    """One table cell: pipes escaped, on one line."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _flag(action: argparse.Action, formatter: argparse.HelpFormatter) -> str:
    """``--flag VALUE`` (or ``--flag {a,b}``) as the usage line shows it."""
    names = ", ".join(action.option_strings)
    if action.nargs == 0:
        return f"`{names}`"
    return f"`{names} {formatter._format_args(action, formatter._get_default_metavar_for_optional(action))}`"


def _default(action: argparse.Action) -> str:
    if action.nargs == 0:
        return "off" if not action.default else "on"
    return "—" if action.default is None else f"`{action.default}`"


def flags_block() -> str:
    """The markdown between the markers: every flag of ``evaluation.cli.build_parser()``, in the parser's order."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from evaluation.cli import build_parser

    parser = build_parser()
    formatter = parser._get_formatter()
    modes = {id(a) for group in parser._mutually_exclusive_groups for a in group._group_actions}
    rows = ["| flag | default | what it does |", "|---|---|---|"]
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        text = formatter._expand_help(action) if action.help else ""
        if id(action) in modes:
            text = f"(mode) {text}"
        rows.append(f"| {_cell(_flag(action, formatter))} | {_cell(_default(action))} | {_cell(text)} |")
    lead = (f"Generated from `evaluation.cli.build_parser()` by `{COMMAND}`; do not edit by hand. "
            "Exactly one flag marked (mode) is required.")
    return "\n".join([lead, "", *rows])


def written(page: str) -> str:
    """The page with its block between the markers replaced by ``flags_block()``."""
    head, rest = page.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n{flags_block()}\n{END}{tail}"


def main() -> None:
    page = PAGE.read_text(encoding="utf-8")
    new = written(page)
    if new != page:
        PAGE.write_text(new, encoding="utf-8")
        print(f"updated {PAGE.relative_to(REPO)}")
    else:
        print(f"{PAGE.relative_to(REPO)} is up to date")


if __name__ == "__main__":
    main()
