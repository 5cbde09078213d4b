"""The one installed command, ``layercut``: ``layercut [app] [--model NAME] [--shared]`` serves the page and
``layercut bench …`` runs the benchmark CLI (also installed as ``layercut-benchmark``), each importing only
what it needs."""

from __future__ import annotations

import argparse
import sys

APP_HELP = "serve the web UI (the default): [--model NAME] [--shared]; host/port from GRADIO_SERVER_NAME / _PORT"
BENCH_HELP = ("benchmark a model and its cuts with lm-eval, export them "
              "(`layercut bench --help`; alias layercut-benchmark)")


def parser() -> argparse.ArgumentParser:
    """The top level only, for its help and its error on an unknown command: each subcommand parses its own."""
    top = argparse.ArgumentParser(prog="layercut", description="LayerCut: depth-prune an LLM and compare it.")
    commands = top.add_subparsers(dest="command", metavar="{app,bench}")
    commands.add_parser("app", help=APP_HELP, add_help=False)
    commands.add_parser("bench", help=BENCH_HELP, add_help=False)
    return top


def main(argv: list[str] | None = None) -> int:
    """Dispatch on the first word, so that each subcommand keeps its own parser and imports only what it needs."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["bench"]:
        from evaluation.cli import main as bench

        return bench(argv[1:])
    if argv[:1] == ["app"] or not argv or argv[0].startswith("-") and argv[0] not in ("-h", "--help"):
        from ui.launch import main as serve

        serve(argv[1:] if argv[:1] == ["app"] else argv, prog="layercut app")
        return 0
    parser().parse_args(argv)  # prints the help, or the error for an unknown command; both exit
    return 2
