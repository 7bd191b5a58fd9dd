"""docs/reliability.md and README.md stay true to the code: every test a row links to exists,
every bad-input row links to one, and the option bounds README gives are the ones enforced."""

from __future__ import annotations

import ast
import pathlib
import re

from fxslots import options

ROOT = pathlib.Path(__file__).resolve().parent.parent
RELIABILITY = (ROOT / "docs" / "reliability.md").read_text()
LINK = re.compile(r"\[`(test_\w+)`\]\(\.\./(tests/\w+\.py)\)")


def _functions(path: pathlib.Path) -> set[str]:
    return {n.name for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.FunctionDef)}


def test_every_linked_test_exists():
    links = LINK.findall(RELIABILITY)
    assert len(links) > 30
    missing = [f"{f}::{name}" for name, f in links if name not in _functions(ROOT / f)]
    assert not missing, f"docs/reliability.md links to tests that do not exist: {missing}"


def test_every_bad_input_row_names_its_test():
    section = RELIABILITY.split("## 2. Bad-input matrix")[1].split("\n## ")[0]
    rows = [line for line in section.splitlines() if line.startswith("| ")][1:]  # no header
    assert len(rows) > 20
    unlinked = [r[:60] for r in rows if not LINK.search(r)]
    assert not unlinked, f"rows without a test: {unlinked}"
    failing = [r[:60] for r in rows if "FAILS" in r]
    assert not failing, f"rows that still say they fail: {failing}"


def test_readme_gives_the_bounds_the_options_enforce():
    readme = (ROOT / "README.md").read_text()
    table = readme.split("## Options")[1].split("\n## ")[0]
    for bound in (options.MAX_SLOTS, options.MAX_ALIGNMENT, options.MAX_ARENA_BYTES):
        assert f"{bound:,}" in table or str(bound) in table, bound
