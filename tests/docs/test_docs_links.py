"""The README and every docs/ page point only at files that exist: relative Markdown links
and repository paths written in backticks (`docs/x.md`, `benchmarks/README.md`)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
TOP_FOLDERS = "docs|benchmarks|tests|plugins|core|deploy|examples|scripts|tools"
PATH_IN_BACKTICKS = re.compile(rf"`((?:{TOP_FOLDERS})/[A-Za-z0-9_./-]+)`")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_links_and_paths_exist(page):
    text = page.read_text()
    broken = [target for target in LINK.findall(text)
              if "://" not in target and not target.startswith("mailto:")
              and not (page.parent / target).exists()]
    broken += [path for path in PATH_IN_BACKTICKS.findall(text)
               if not (ROOT / path.rstrip(".")).exists()]
    assert not broken, f"{page.name} points at missing files: {broken}"


def test_the_readme_indexes_every_docs_page():
    readme = (ROOT / "README.md").read_text()
    missing = [p.name for p in sorted((ROOT / "docs").glob("*.md"))
               if f"(docs/{p.name})" not in readme]
    assert not missing, f"README.md's docs index lacks {missing}"
