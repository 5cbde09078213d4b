"""The benchmarks are one package (issue 50): every script reaches the others through ``benchmarks.``, never as a
module beside it; the harness's parser, timer and fresh cache do what the scripts rely on; a module run records the
command that was typed."""

from __future__ import annotations

import ast
import os
import sys
import time
from types import SimpleNamespace

import pytest

from benchmarks import harness, record
from conftest import REPO

SCRIPTS = sorted((REPO / "benchmarks").glob("*.py"))
SIBLINGS = {path.stem for path in SCRIPTS}


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda path: path.name)
def test_a_script_imports_its_siblings_through_the_package(path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    bare = [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names
            if alias.name.split(".")[0] in SIBLINGS]
    bare += [node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
             if node.level or (node.module or "").split(".")[0] in SIBLINGS]
    assert not bare, f"import them as benchmarks.<name>: {bare}"


def test_a_module_run_records_the_command_as_typed(monkeypatch):
    monkeypatch.setitem(sys.modules, "__main__", SimpleNamespace(__spec__=SimpleNamespace(name="benchmarks.heal")))
    monkeypatch.setattr(sys, "argv", [str(REPO / "benchmarks" / "heal.py"), "--start", "3", "--methods", "a b"])
    assert record.command() == "python -m benchmarks.heal --start 3 --methods 'a b'"


def test_the_parser_takes_its_description_from_the_docstring_and_the_shared_options_by_name():
    args = harness.parser("Why this script exists.\n\nMore.", "ppl_windows", "data_dir").parse_args([])
    assert (args.ppl_windows, args.data_dir) == (64, None)
    assert harness.parser("One line.").description == "One line."


def test_the_clock_times_its_block_and_reads_so_far_while_it_runs():
    with harness.Clock() as clock:
        time.sleep(0.05)
        assert clock.elapsed >= 0.05
    assert 0.05 <= clock.wall < 5 and 0 <= clock.cpu < clock.wall


def test_pairs_keep_the_order_two_at_a_time():
    assert harness.pairs({"a": 1, "b": 2, "c": 3}) == [{"a": 1, "b": 2}, {"c": 3}]


def test_a_fresh_cache_reuses_the_models_and_is_gone_after(tmp_path, monkeypatch):
    monkeypatch.setenv("LAYERCUT_CACHE", str(tmp_path / "persistent"))
    seen = {}
    harness.in_fresh_cache(lambda: seen.update(cache=os.environ["LAYERCUT_CACHE"]))
    used = seen["cache"]
    assert used != str(tmp_path / "persistent") and not os.path.exists(used)
    assert (tmp_path / "persistent" / "models").is_dir()
