"""The import layers: nothing imports upward (ARCHITECTURE.md), read from every module's imports."""

from __future__ import annotations

import ast

from conftest import REPO

PACKAGES = ("prune", "evaluation", "ui")
IMPORTANCE = ("prune.depth.methods", "prune.depth.result")  # the depth family's registry, which drop scores on


def imports() -> list[tuple[str, str]]:
    """(importing module, imported module) for every LayerCut import anywhere in a module, functions included."""
    found = []
    for package in PACKAGES:
        for file in (REPO / package).rglob("*.py"):
            module = ".".join(file.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
            for node in ast.walk(ast.parse(file.read_text())):
                names = [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else \
                    [a.name for a in node.names] if isinstance(node, ast.Import) else []
                assert not (isinstance(node, ast.ImportFrom) and node.level), f"{module}: a relative import"
                found += [(module, name) for name in names if name.split(".")[0] in (*PACKAGES, "app")]
    return found


def _family(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "prune" and len(parts) > 2 and parts[1] != "core" else None


def test_the_scan_sees_the_imports_it_judges():
    found = imports()
    assert ("prune.depth.step", "prune.core.step") in found and ("ui.catalog", "prune.core.family") in found
    assert ("evaluation.serving.backend", "prune") in found


def test_prune_imports_nothing_from_evaluation_ui_or_the_app():
    assert [(a, b) for a, b in imports() if a.startswith("prune") and not b.startswith("prune")] == []


def test_the_core_imports_no_family_it_reads_the_registry():
    assert [(a, b) for a, b in imports() if a.startswith("prune.core") and _family(b + ".x")] == []


def test_a_family_imports_the_core_and_only_the_depth_familys_importance_registry():
    sideways = [(a, b) for a, b in imports() if _family(a) and _family(b + ".x") not in (None, _family(a))
                and not b.startswith(IMPORTANCE)]
    assert sideways == []


def test_evaluation_imports_no_page_and_the_page_not_the_app():
    assert [(a, b) for a, b in imports() if a.startswith("evaluation") and b.split(".")[0] in ("ui", "app")] == []
    assert [(a, b) for a, b in imports() if a.startswith("ui") and b.split(".")[0] == "app"] == []
