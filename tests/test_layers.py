"""The import layers (ARCHITECTURE.md), read from every import statement of every module, deferred ones included.

The graph is built as a linter builds it: ``import a.b`` and ``from a import b`` are edges to the module ``a.b``
when it is one (else to ``a``), whether the statement sits at the top of a file, in a function or under
``TYPE_CHECKING``: a deferred import hides a loop from readers, it does not remove it.
"""

from __future__ import annotations

import ast
from functools import cache

from conftest import REPO

PACKAGES = ("prune", "evaluation", "ui", "benchmarks")
IMPORTANCE = ("prune.depth.methods", "prune.depth.result")  # the depth family's registry, which drop scores on
FACE = "evaluation.serving"  # the backend's public face (its package's __init__): all the page takes from evaluation/
COMMAND = ("ui.command", "evaluation.cli")  # the installed `layercut` command hands `layercut bench` to the CLI
# evaluation's floors, bottom first: a floor imports only its own and lower ones (the CLI sits on the backend)
FLOORS = (("evaluation.core",), ("evaluation.measure",), ("evaluation.quality",),
          ("evaluation.explain", "evaluation.exports", "evaluation.sweeps",
           "evaluation.engines"), ("evaluation.frontier",),
          ("evaluation.serving",), ("evaluation.cli",))


@cache
def modules() -> dict[str, str]:
    """Every LayerCut module (dotted name → its source), app.py included."""
    files = [REPO / "app.py", *(file for package in PACKAGES for file in (REPO / package).rglob("*.py"))]
    return {".".join(f.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__"): f.read_text()
            for f in files}


@cache
def imports() -> tuple[tuple[str, str], ...]:
    """(importing module, imported module) for every LayerCut import anywhere in a module, functions included."""
    known, found = modules(), []
    for module, source in known.items():
        for node in ast.walk(ast.parse(source)):
            assert not (isinstance(node, ast.ImportFrom) and node.level), f"{module}: a relative import"
            if isinstance(node, ast.Import):
                found += [(module, a.name) for a in node.names if a.name in known]
            elif isinstance(node, ast.ImportFrom) and node.module in known:
                found += [(module, f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in known else node.module)
                          for a in node.names]
    return tuple(sorted(set(found)))


def circles(edges) -> list[list[str]]:
    """The strongly connected components of more than one module (or a module importing itself): Tarjan's."""
    graph: dict[str, list[str]] = {}
    for a, b in edges:
        graph.setdefault(a, []).append(b)
        graph.setdefault(b, [])
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while not component or component[-1] != v:
                component.append(stack.pop())
                on.discard(component[-1])
            if len(component) > 1 or v in graph[v]:
                found.append(sorted(component))

    for v in list(graph):
        if v not in index:
            visit(v)
    return found


def _family(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "prune" and len(parts) > 2 and parts[1] != "core" else None


def _floor(module: str) -> int | None:
    return next((i for i, floor in enumerate(FLOORS) for top in floor if module.startswith(top + ".")
                 or module == top), None)


def test_the_scan_sees_the_imports_it_judges_deferred_ones_too():
    found = imports()
    assert ("prune.depth.step", "prune.core.step") in found and ("ui.catalog", "prune.core.family") in found
    assert ("evaluation.serving.analysis", "prune") in found
    assert ("evaluation.quality.cloze", "evaluation.quality.cloze_task") in found  # inside a function
    assert ("benchmarks.width", "benchmarks.harness") in found


def test_the_circle_finder_finds_a_circle_and_its_members():
    assert circles([("a", "b"), ("b", "c"), ("c", "a"), ("c", "d"), ("d", "d")]) == [["d"], ["a", "b", "c"]]
    assert circles([("a", "b"), ("b", "c")]) == []


def test_no_module_imports_itself_round_a_circle():
    assert circles(imports()) == []


def test_every_evaluation_module_has_a_floor_and_imports_none_above_it():
    unplaced = [m for m in modules() if m.startswith("evaluation.") and _floor(m) is None and m != "evaluation"]
    assert unplaced == []
    upward = [(a, b) for a, b in imports() if _floor(a) is not None and _floor(b) is not None and _floor(b) > _floor(a)]
    assert upward == []


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


def test_the_page_takes_from_evaluation_only_the_backends_public_face():
    reaching = [(a, b) for a, b in imports() if a.split(".")[0] in ("ui", "app") and b.startswith("evaluation")
                and b != FACE and (a, b) != COMMAND]
    assert reaching == []


def test_nothing_below_the_page_imports_the_face():
    assert [(a, b) for a, b in imports() if b == FACE and a.split(".")[0] not in ("ui", "app")] == []


def test_the_face_exports_each_name_it_imports_and_nothing_it_does_not():
    import evaluation.serving as face

    tree = ast.parse(modules()[FACE])
    imported = {a.asname or a.name for node in tree.body if isinstance(node, ast.ImportFrom) for a in node.names}
    assert sorted(face.__all__) == sorted(imported) and len(set(face.__all__)) == len(face.__all__)


def test_the_page_imports_no_private_name():
    private = [(module, a.name) for module, source in modules().items() if module.split(".")[0] in ("ui", "app")
               for node in ast.walk(ast.parse(source)) if isinstance(node, ast.ImportFrom)
               for a in node.names if a.name.startswith("_")]
    assert private == []


def test_nothing_the_package_installs_imports_the_benchmarks():
    assert [(a, b) for a, b in imports() if a.split(".")[0] != "benchmarks" and b.split(".")[0] == "benchmarks"] == []
