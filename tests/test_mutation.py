"""The mutation check's own consistency (tools/mutation): cheap, so it runs with the suite.

The mutation run itself (``python3 tools/mutation/run.py``) takes minutes; these tests make sure
that what it would run still makes sense: every anchor still matches exactly one place (another
branch may have edited the line: update the mutant), every mutated file still parses, and every
test a mutant names exists.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

from tools.mutation import run as runner
from tools.mutation.mutants import MUTANTS

ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("m", MUTANTS, ids=[m.name for m in MUTANTS])
def test_each_anchor_matches_exactly_once(m):
    text = (ROOT / m.file).read_text()
    assert text.count(m.old) == 1, (
        f"{m.name}: the anchor occurs {text.count(m.old)} times in {m.file}; the mutated line "
        f"changed, so update tools/mutation/mutants.py")
    assert m.old != m.new
    # A mutant must break a rule, not the file: an anchor that matches the tail of a line
    # indented deeper (the code moved into a function) leaves it unparsable, and the run
    # reports a tool error instead of a kill (session 15's clean-clone CI).
    ast.parse(text.replace(m.old, m.new), m.file)


@pytest.mark.parametrize("m", MUTANTS, ids=[m.name for m in MUTANTS])
def test_each_mutant_names_tests_that_exist_in_its_suite(m):
    assert m.suite in ("cpu", "cuda") and m.tests and m.rule
    for t in m.tests:
        path, _, func = t.partition("::")
        file = ROOT / path
        assert file.is_file(), t
        is_cuda_file = file.name.startswith("test_cuda")
        assert is_cuda_file == (m.suite == "cuda"), f"{m.name}: {t} is not in the {m.suite} suite"
        if func:
            names = {n.name for n in ast.walk(ast.parse(file.read_text()))
                     if isinstance(n, ast.FunctionDef)}
            assert func.split("[")[0] in names, t


def test_names_are_unique():
    names = [m.name for m in MUTANTS]
    assert len(names) == len(set(names))


NOT_FOUND = "ERROR: not found: tests/test_x.py::test_nope"


@pytest.mark.parametrize("rc, out, want", [
    (1, "F\nFAILED tests/test_x.py::test_a - AssertionError\n1 failed",
     ("killed", "tests/test_x.py::test_a")),
    (0, "3 passed in 1.0s", ("SURVIVED", "")),
    (0, "3 skipped in 1.0s", ("not run", "every test skipped")),
    (4, NOT_FOUND, ("BAD SELECTION", NOT_FOUND)),
    (-11, 'Fatal Python error: Segmentation fault\n  File "/tmp/r/tests/test_x.py", line 3 in '
          'test_b\n', ("killed", "tests/test_x.py::test_b (crashed: signal 11)")),
    (-1, "", ("killed", "(timed out)")),
])
def test_outcomes_are_classified(rc, out, want):
    assert runner.classify(rc, out) == want


def test_a_forked_run_sees_its_own_copy_and_reports_the_failing_test(tmp_path):
    # The runner forks each run from a process that has imported torch: what it reports must
    # still come from the copy's own files, written after that process started.
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text(
        "import marker\n\ndef test_a():\n    assert marker.VALUE == 1\n")
    (tmp_path / "marker.py").write_text("VALUE = 1\n")
    assert runner.classify(*runner.pytest(tmp_path, ("tests/test_x.py",), 120)) == (
        "SURVIVED", "")
    (tmp_path / "marker.py").write_text("VALUE = 2\n")
    assert runner.classify(*runner.pytest(tmp_path, ("tests/test_x.py",), 120)) == (
        "killed", "tests/test_x.py::test_a")
