"""The documentation stays true to the code: the CLI's flag list is the parser's, every relative link resolves,
the README stays short, and every family has its page."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from conftest import REPO

DOCS = REPO / "docs"
PAGES = sorted([REPO / "README.md", REPO / "ARCHITECTURE.md", *DOCS.rglob("*.md")])
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
CODE = re.compile(r"(`+)(?:(?!\1).)+?\1", re.S)
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$", re.M)


def _gen_cli():
    spec = importlib.util.spec_from_file_location("gen_cli", DOCS / "gen_cli.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _prose(text: str) -> str:
    """The text without code blocks and code spans, where a bracket is no link."""
    return CODE.sub("", FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text lower-cased, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text only
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").replace("*", "")
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading's anchor in a markdown file (repeats get -1, -2, … as on GitHub)."""
    seen: dict[str, int] = {}
    found = set()
    for _, text in HEADING.findall(FENCE.sub("", path.read_text(encoding="utf-8"))):
        base = slug(text)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def broken_links(page: Path, root: Path = REPO) -> list[str]:
    """What each relative link or image of ``page`` misses: its file, or the heading its ``#anchor`` names."""
    problems = []
    for target in LINK.findall(_prose(page.read_text(encoding="utf-8"))):
        if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            problems.append(f"{page.relative_to(root)}: {target} (no such file)")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            problems.append(f"{page.relative_to(root)}: {target} (no such heading in {file.relative_to(root)})")
    return problems


def test_the_cli_page_lists_the_flags_the_parser_has_now():
    gen_cli = _gen_cli()
    page = (DOCS / "cli.md").read_text(encoding="utf-8")
    assert page.count(gen_cli.START) == 1 and page.count(gen_cli.END) == 1, "docs/cli.md lost its flag markers"
    assert gen_cli.written(page) == page, f"docs/cli.md's flag list is out of date: run `{gen_cli.COMMAND}`"


def test_every_relative_link_and_image_resolves_to_a_file_and_heading():
    assert len(PAGES) > 3
    problems = [problem for page in PAGES for problem in broken_links(page)]
    assert not problems, "broken links:\n" + "\n".join(problems)


def test_the_link_check_finds_what_is_broken(tmp_path):
    (tmp_path / "other.md").write_text("# A heading: with `code`, *emphasis* and punctuation!\n"
                                       "## A heading\n## A heading\n")
    page = tmp_path / "page.md"
    page.write_text("[ok](other.md#a-heading-with-code-emphasis-and-punctuation) [ok](other.md#a-heading-1) "
                    "[ok](#here) ![gone](missing.png) [gone](other.md#nowhere) `[code](missing.md)`\n"
                    "```\n[fenced](missing.md)\n```\n# Here\n[web](https://example.com)\n")
    assert broken_links(page, tmp_path) == ["page.md: missing.png (no such file)",
                                            "page.md: other.md#nowhere (no such heading in other.md)"]


def test_the_readme_stays_within_300_lines():
    lines = (REPO / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= 300, f"README.md has {lines} lines: move detail to docs/"


@pytest.mark.parametrize("family", sorted(p.name for p in (REPO / "prune").iterdir()
                                          if p.is_dir() and p.name != "core" and p.name[0] not in "_."))
def test_every_family_has_its_page(family):
    assert (DOCS / "methods" / f"{family}.md").is_file(), f"prune/{family}/ has no docs/methods/{family}.md"


def test_the_readme_gives_the_test_command_ci_runs():
    command = (REPO / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()[-1]
    assert f"```bash\n{command}\n```" in (REPO / "README.md").read_text(encoding="utf-8"), (
        f"README.md's test command differs from .ci/run's: {command}")
