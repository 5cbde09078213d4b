"""The docs' figure tables, generated from what the benchmarks wrote (issue 42). In README.md and the pages under
docs/, a generated table sits between two markers::

    <!-- results: deployed_default -->
    (a caption naming the file, model, machine, date and commit, then the table)
    <!-- /results -->

and is rendered from ``benchmarks/results/deployed_default.json`` by the renderer registered for that result
(``benchmarks/renderers.py``).
``<!-- results: frontier#bytes80 -->`` asks that result's renderer for a view of it (here: by bytes, the 80 % rows).

    python -m benchmarks.tables           # rewrite every marked block from its JSON
    python -m benchmarks.tables --check   # exit 1, naming each block that differs from what its JSON renders
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from benchmarks import REPO, harness
from benchmarks.record import RESULTS
from benchmarks.renderers import renderer

REGENERATE = ".venv/bin/python -m benchmarks.tables"
BLOCK = re.compile(r"^(?P<indent>[ \t]*)<!-- results: (?P<name>\S+) -->[ \t]*\n"
                   r"(?P<body>(?:(?!<!-- results: ).)*?)"  # another block's opening marker: this one is unclosed
                   r"^[ \t]*<!-- /results -->[ \t]*$", re.M | re.S)
FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,}).*?^[ \t]*\1[ \t]*$", re.M | re.S)  # fenced code: shown, not generated
OPENING = re.compile(r"^[ \t]*<!-- results: \S+ -->", re.M)  # a marker begins its line: one in prose is text

# ---------------------------------------------------------------- the generator


def documents(root: Path = REPO) -> list[Path]:
    """The Markdown files that may hold marked tables: those at the top of the repository and under docs/."""
    return sorted({*root.glob("*.md"), *(root / "docs").rglob("*.md")})


def render(name: str, results: Path = RESULTS) -> str:
    """A marked block's content for result ``name``: its caption and table. ``NAME#VIEW`` hands the renderer a view
    of its own (``frontier#80``: the 80 % rows). LookupError: no JSON, no renderer."""
    name, _, view = name.partition("#")
    path = results / f"{name}.json"
    if not path.is_file():
        raise LookupError(f"no results file {path.name} in {results}")
    found = json.loads(path.read_text(encoding="utf-8"))
    function = renderer(name, found)
    if function is None:
        raise LookupError(f"no renderer for '{name}': register one in benchmarks/renderers.py")
    return f"{caption(name, found)}\n\n{function(found, view) if view else function(found)}\n"


def rewrite(text: str, results: Path = RESULTS) -> tuple[str, list[str], list[str]]:
    """``text`` with every marked block rendered again from its JSON (markers inside fenced code are text); the
    names of the blocks that changed, and the problems found (a block that cannot be rendered is left as it is)."""
    changed, problems = [], []

    def again(match: re.Match) -> str:
        indent, name = match["indent"], match["name"]
        try:
            body = render(name, results)
        except (LookupError, KeyError, TypeError, ValueError, ZeroDivisionError) as error:
            problems.append(f"block '{name}': {type(error).__name__}: {error}")
            return match[0]
        lines = [indent + line if line else "" for line in body.splitlines()]
        block = "\n".join([f"{indent}<!-- results: {name} -->", *lines, "", f"{indent}<!-- /results -->"])
        changed.extend([name] if block != match[0] else [])
        return block

    def outside_code(part: str) -> str:
        new = BLOCK.sub(again, part)
        unclosed = len(OPENING.findall(part)) - len(BLOCK.findall(part))
        if unclosed:
            problems.append(f"{unclosed} '<!-- results: NAME -->' marker(s) without a '<!-- /results -->' after them")
        return new

    parts, last = [], 0
    for fence in FENCE.finditer(text):
        parts += [outside_code(text[last:fence.start()]), fence[0]]
        last = fence.end()
    return "".join([*parts, outside_code(text[last:])]), changed, problems


def check(root: Path = REPO, results: Path | None = None) -> list[str]:
    """Each marked block that differs from what its JSON renders, or cannot be rendered, named with its file."""
    results = results or root / "benchmarks" / "results"
    problems = []
    for path in documents(root):
        _new, changed, trouble = rewrite(path.read_text(encoding="utf-8"), results)
        where = path.relative_to(root)
        problems += [f"{where}: {problem}" for problem in trouble]
        problems += [f"{where}: block '{name}' differs from what {name}.json renders" for name in changed]
    return problems


def regenerate(root: Path = REPO, results: Path | None = None) -> tuple[list[Path], list[str]]:
    """Rewrite every marked block; the files changed and the problems found."""
    results = results or root / "benchmarks" / "results"
    changed, problems = [], []
    for path in documents(root):
        text = path.read_text(encoding="utf-8")
        new, _changed, trouble = rewrite(text, results)
        problems += [f"{path.relative_to(root)}: {problem}" for problem in trouble]
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed.append(path)
    return changed, problems


def caption(name: str, found: dict) -> str:
    """Where the figures came from: the file, the model, the machine (and device), the date, the commit."""
    machine = found.get("machine")
    if isinstance(machine, dict):  # an older space_build.json
        machine = f"{machine.get('cpus')} CPU cores, {machine.get('processor') or machine.get('platform')}"
    commit = found.get("commit")
    parts = [found.get("model") if isinstance(found.get("model"), str) else None,
             machine or "machine not recorded",
             found["device"] if found.get("device") not in (None, "CPU") else None,
             found.get("date") or "date not recorded",
             f"commit {commit}{' with uncommitted changes' if found.get('dirty') else ''}" if commit else
             "commit not recorded"]
    return f"*`benchmarks/results/{name}.json`: {'; '.join(p for p in parts if p)}.*"


def main() -> None:
    parser = harness.parser(__doc__)
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a table differs from its JSON")
    args = parser.parse_args()
    if args.check:
        problems = check()
        for problem in problems:
            print(problem, file=sys.stderr)
        if problems:
            sys.exit(f"{len(problems)} generated table(s) out of date or broken; regenerate with: {REGENERATE}")
        print("every generated table matches its JSON")
        return
    changed, problems = regenerate()
    for path in changed:
        print(f"rewrote {path.relative_to(REPO)}")
    for problem in problems:
        print(problem, file=sys.stderr)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
