"""The README and docs/ as a reader walks them on GitHub: every relative link lands on a file,
every #anchor on a heading of its page, every docs page is reachable from the README, and the
README stays a front door (at most 350 lines; the rest lives in docs/); and the README and
examples/ import data names from `t5forge.data` itself, never from a module behind it.

Links inside code (fenced blocks, `spans`) are text, not links, and are not followed. Anchors
are GitHub's: the heading's text lower-cased, punctuation other than - and _ dropped, spaces
turned into hyphens, a repeated heading numbered -1, -2, ...

Why a test and not `mkdocs build --strict`: mkdocs 1.6.1 cannot see README.md (outside its
docs_dir) and, in strict mode, refuses every link from docs/ to README.md and examples/ (9 on
these pages when tried), links a reader on GitHub follows.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from urllib.parse import unquote

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = sorted((REPO / "docs").rglob("*.md"))
EXAMPLE_READMES = sorted((REPO / "examples").glob("*/README.md"))
PAGES = [README, *DOCS, *EXAMPLE_READMES]
README_MAX_LINES = 350

FENCE = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1[^\n]*$", re.M | re.S)
CODE_SPAN = re.compile(r"(`+)(?!`).+?(?<!`)\1(?!`)", re.S)
LINK = re.compile(r"\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HTML_TARGET = re.compile(r"""<(?:img|a)\s[^>]*?(?:src|href)=["']([^"']+)["']""")
HTML_ANCHOR = re.compile(r"""<a\s[^>]*?(?:id|name)=["']([^"']+)["']""")
HEADING = re.compile(r"^ {0,3}#{1,6}\s+(.+?)\s*#*\s*$", re.M)


def prose(text: str) -> str:
    """`text` without its fenced code blocks and code spans."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def github_slug(heading: str) -> str:
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text stays
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text())
    seen: Counter[str] = Counter()
    found = set(HTML_ANCHOR.findall(text))
    for heading in HEADING.findall(text):
        slug = github_slug(heading)
        found.add(f"{slug}-{seen[slug]}" if seen[slug] else slug)
        seen[slug] += 1
    return found


def relative_targets(page: Path) -> list[str]:
    text = prose(page.read_text())
    targets = LINK.findall(text) + HTML_TARGET.findall(text)
    return [t for t in targets if not re.match(r"[a-z][a-z0-9+.-]*:", t)]  # no https:, mailto:


def broken_links(page: Path) -> list[str]:
    """Each link of `page` whose file or #anchor is not there, as 'target: why'."""
    broken = []
    for target in relative_targets(page):
        path_part, _, anchor = unquote(target).partition("#")
        destination = (page.parent / path_part).resolve() if path_part else page
        if not destination.exists():
            broken.append(f"{target}: no such file")
        elif anchor and destination.suffix == ".md" and anchor not in anchors(destination):
            broken.append(f"{target}: no heading #{anchor} in {destination.name}")
    return broken


def linked_pages(page: Path) -> set[Path]:
    pages = set()
    for target in relative_targets(page):
        path_part = unquote(target).partition("#")[0]
        destination = (page.parent / path_part).resolve()
        if path_part.endswith(".md") and destination.exists():
            pages.add(destination)
    return pages


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(REPO)))
def test_every_link_lands_on_a_file_and_heading(page):
    assert broken_links(page) == []


def test_every_docs_page_is_reachable_from_the_readme():
    reached, frontier = {README}, [README]
    while frontier:
        for page in linked_pages(frontier.pop()) - reached:
            reached.add(page)
            frontier.append(page)
    unreached = [str(page.relative_to(REPO)) for page in DOCS if page not in reached]
    assert unreached == [], "link these pages from README.md's documentation list"


def test_the_readme_is_a_front_door():
    lines = README.read_text().count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines: move detail into docs/"


DATA_MODULE_IMPORT = re.compile(r"from t5forge\.data\.[a-z_.]+ import")


def data_module_imports(root: Path) -> list[str]:
    """Each `from t5forge.data.<module> import` in the README and examples/, as 'file:line'."""
    files = [root / "README.md", *sorted((root / "examples").rglob("*"))]
    found = []
    for path in files:
        if not path.is_file():
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if DATA_MODULE_IMPORT.search(line):
                found.append(f"{path.relative_to(root)}:{number}")
    return found


def test_readers_import_data_from_the_facade():
    """What a reader copies imports `from t5forge.data import X`: the modules behind the
    facade are the data wing's families and may move (issue 38)."""
    assert data_module_imports(REPO) == [], "import these names from t5forge.data itself"


def test_the_facade_check_finds_a_module_import(tmp_path):
    (tmp_path / "README.md").write_text("from t5forge.data import Task\n")
    (tmp_path / "examples" / "x").mkdir(parents=True)
    (tmp_path / "examples" / "x" / "tasks.py").write_text(
        "import t5forge\nfrom t5forge.data.providers import Task\n"
        "from t5forge.data.cache.search_dirs import add_global_cache_dirs\n"
    )
    assert data_module_imports(tmp_path) == ["examples/x/tasks.py:2", "examples/x/tasks.py:3"]


def test_the_checker_sees_what_a_reader_sees(tmp_path):
    """Code is not a link; anchors follow GitHub's rule, repeated headings numbered."""
    target = tmp_path / "target.md"
    target.write_text(
        "# T5X's own gin files, file by file\n## `cache-tasks` on Beam\n## Notes\n## Notes\n"
    )
    page = tmp_path / "page.md"
    page.write_text(
        "[a](target.md#t5xs-own-gin-files-file-by-file) [b](target.md#cache-tasks-on-beam)\n"
        "[c](target.md#notes-1) `[not a link](nowhere.md)`\n```\n[nor](this.md)\n```\n"
        "[d](missing.md) [e](target.md#notes-2) [f](https://example.com/x.md)\n"
    )
    assert broken_links(page) == [
        "missing.md: no such file",
        "target.md#notes-2: no heading #notes-2 in target.md",
    ]
