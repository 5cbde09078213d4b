"""The ``layercut`` command: its help names both subcommands, and each subcommand answers with its own."""

from __future__ import annotations

import pytest

from ui.command import main


def help_of(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == 0
    return capsys.readouterr().out


def test_the_help_lists_app_and_bench(capsys):
    out = help_of(["--help"], capsys)
    assert out.startswith("usage: layercut") and "app" in out and "bench" in out and "layercut-benchmark" in out


def test_bench_is_the_benchmark_cli(capsys):
    out = help_of(["bench", "--help"], capsys)
    assert "--personalized" in out and "--export_dir" in out


def test_app_takes_the_apps_arguments(capsys):
    out = help_of(["app", "--help"], capsys)
    assert out.startswith("usage: layercut app") and "--model" in out and "--shared" in out


def test_an_unknown_command_is_refused(capsys):
    with pytest.raises(SystemExit) as done:
        main(["serve"])
    assert done.value.code == 2 and "invalid choice: 'serve'" in capsys.readouterr().err


def test_options_without_a_command_go_to_the_app(capsys):
    assert help_of(["--shared", "--help"], capsys).startswith("usage: layercut app")
