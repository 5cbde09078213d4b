"""requirements.txt, which a Space's builder installs with no repository beside it, stays in step with what
LayerCut declares (pyproject.toml) and what the suite passed with (constraints.txt)."""

from __future__ import annotations

import re
import tomllib

from conftest import REPO


def pins(path) -> dict[str, str]:
    """{normalized name: version} of the ``name==version`` lines of a requirements-style file (a line's own options,
    such as llama-cpp-python's portable build settings, after the version)."""
    found = {}
    for line in path.read_text().splitlines():
        name, _, version = line.split("#")[0].strip().partition("==")
        if version:
            found[normalized(re.sub(r"\[.*\]", "", name))] = version.split()[0]
    return found


def test_the_space_builds_llama_cpp_portable():
    """The builder's CPU is not the one the Space runs on: no -march=native (docs/install.md)."""
    (line,) = [line for line in (REPO / "requirements.txt").read_text().splitlines()
               if line.startswith("llama-cpp-python==")]
    assert "--config-settings=cmake.define.GGML_NATIVE=OFF" in line.split()


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_requirements_stand_alone_and_pin_every_dependency():
    lines = [line.split("#")[0].strip() for line in (REPO / "requirements.txt").read_text().splitlines()]
    lines = [line for line in lines if line]
    assert all("==" in line and not line.startswith(("-", ".")) for line in lines), lines
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    missing = {normalized(re.split(r"[<>=!~ \[;]", d)[0]) for d in declared} - set(pins(REPO / "requirements.txt"))
    assert missing == set()


def test_requirements_pin_what_the_suite_passed_with():
    required, tested = pins(REPO / "requirements.txt"), pins(REPO / "constraints.txt")
    assert {n: v for n, v in required.items() if n in tested and tested[n] != v} == {}
