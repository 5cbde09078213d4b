"""LayerCut as an installed package: the wheel holds the built-in texts and both commands, and works with no
checkout beside it (a Space runs the checkout; ``pip install .`` users run this)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile

import pytest

from conftest import REPO
from prune.core.calibration import Calibration, load_text

SOURCES = ("prune", "evaluation", "ui", "pyproject.toml", "README.md")  # what the build reads
PROBE = """import json, prune
from prune.core.calibration import Calibration, load_text
from prune.core.paths import default_data_dir
from evaluation.quality import cbt_style
print(json.dumps({"prune": prune.__file__, "builtin": load_text(Calibration()), "data_dir": default_data_dir(),
                  "questions": len(cbt_style.build("P"))}))"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """A wheel built from a copy of the sources (the build writes build/ and egg-info where it runs)."""
    source, out = tmp_path_factory.mktemp("source"), tmp_path_factory.mktemp("wheels")
    for name in SOURCES:
        copy = shutil.copytree if (REPO / name).is_dir() else shutil.copy
        copy(REPO / name, source / name,
             **({"ignore": shutil.ignore_patterns("__pycache__")} if copy is shutil.copytree else {}))
    pip = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(out), str(source)], check=True)
    return next(out.glob("layercut-*.whl"))


def test_the_wheel_carries_the_texts_and_both_commands(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        entry_points = archive.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
    assert {"prune/core/texts/calibration.txt", "prune/core/texts/alice.txt"} <= set(names)
    assert "layercut = ui.command:main" in entry_points
    assert "layercut-benchmark = evaluation.cli:main" in entry_points


def test_installed_elsewhere_it_reads_its_own_texts_and_needs_no_data_folder(wheel, tmp_path):
    site, elsewhere = tmp_path / "site", tmp_path / "elsewhere"
    elsewhere.mkdir()
    subprocess.run([sys.executable, "-m", "pip", "-q", "--disable-pip-version-check", "install", "--no-deps",
                    "--target", str(site), str(wheel)], check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("LAYERCUT_DATA_DIR", "PYTHONPATH")}
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=elsewhere, env={**env, "PYTHONPATH": str(site)},
                          capture_output=True, text=True, check=True)
    found = json.loads(done.stdout.splitlines()[-1])
    assert found["prune"].startswith(str(site))
    assert found["builtin"] == load_text(Calibration())  # the checkout's text, read from the installed copy
    assert found["data_dir"] is None  # no ../shared/benchdata beside site-packages is looked for
    assert found["questions"] > 100  # the CBT-style book is there too
