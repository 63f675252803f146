"""Every file the docs point at exists.

Scans ``README.md``, ``docs/*.md`` and ``bench/results/*.md`` for relative markdown links
(resolved from the page) and for paths written out as ``bench/results/...`` or
``docs/...`` (resolved from the repository root). ``a.{json,csv}`` stands for both files,
``*`` and a ``<placeholder>`` for any name (at least one file must match). A path written as
``git show <commit>:<path>`` names a file in history and is not checked.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "bench" / "results").glob("*.md")])

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
#: A repository path: bench/results/... or docs/..., not right after "<commit>:" (git show).
REPO_PATH = re.compile(r"(?<![\w:/.-])((?:bench/results|docs)/[\w./*{},<>-]*)")


def expand(pattern: str) -> list[str]:
    """``a.{json,csv}`` -> ``["a.json", "a.csv"]``; ``<name>`` -> ``*``."""
    pattern = re.sub(r"<[^>/]*>", "*", pattern)
    parts = re.split(r"\{([^{}]*)\}", pattern)
    options = [[p] if i % 2 == 0 else p.split(",") for i, p in enumerate(parts)]
    return ["".join(choice) for choice in itertools.product(*options)]


def exists(base: Path, pattern: str) -> bool:
    for path in expand(pattern.rstrip(".,;:")):
        if any(c in path for c in "*?"):
            if not list(base.glob(path)):
                return False
        elif not (base / path).exists():
            return False
    return True


def references(page: Path) -> list[tuple[Path, str]]:
    """``(base directory, path pattern)`` for every local reference on ``page``."""
    text = page.read_text()
    refs = []
    for target in LINK.findall(text):
        target = target.split("#", 1)[0]
        if target and not re.match(r"[a-z]+:", target):
            refs.append((page.parent, target))
    for path in REPO_PATH.findall(text):
        if path.rstrip("/.,;:") not in ("bench/results", "docs"):
            refs.append((ROOT, path.rstrip("/") if path.endswith("/") else path))
    return refs


def test_pages_are_found_and_have_references():
    names = {p.relative_to(ROOT).as_posix() for p in PAGES}
    assert {"README.md", "docs/results.md", "docs/performance.md", "bench/results/README.md"} <= names
    assert sum(len(references(p)) for p in PAGES) > 50


def test_expand_and_exists_catch_a_missing_file():
    assert expand("bench/results/a.{json,csv}") == ["bench/results/a.json", "bench/results/a.csv"]
    assert expand("bench/results/grpo_<recipe>.json") == ["bench/results/grpo_*.json"]
    assert exists(ROOT, "bench/results/grpo_<recipe>.json")
    assert not exists(ROOT, "bench/results/recipes.{json,nope}")
    assert not exists(ROOT, "docs/no_such_page.md")


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(ROOT).as_posix() for p in PAGES])
def test_every_referenced_file_exists(page):
    missing = sorted({path for base, path in references(page) if not exists(base, path)})
    assert not missing, f"{page.relative_to(ROOT)} points at missing files: {missing}"
