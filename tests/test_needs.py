"""A test that finds its browser, registry or data set missing: skipped on a maintainer's machine,
failed where $ANNOTATED_REQUIRE_ALL is set (the GitHub workflow, tests/needs.py)."""

import ast
import re
from pathlib import Path

import pytest
from needs import REQUIRE_ALL_ENV, everything_required, missing

TESTS = Path(__file__).resolve().parent
# What a reason names when the test waits on the machine rather than on the book's own state.
MACHINE = re.compile(
    r"chromium|browser|pdftoppm|registry|multi30k|DATA_DIR_ENV|ANNOTATED_DATA_DIR", re.I
)


def test_a_missing_tool_skips_unless_everything_is_required(monkeypatch):
    for unset in (None, "", "0"):
        if unset is None:
            monkeypatch.delenv(REQUIRE_ALL_ENV, raising=False)
        else:
            monkeypatch.setenv(REQUIRE_ALL_ENV, unset)
        assert not everything_required()
        with pytest.raises(pytest.skip.Exception, match="no frobnicator here"):
            missing("no frobnicator here")
    monkeypatch.setenv(REQUIRE_ALL_ENV, "1")
    assert everything_required()
    with pytest.raises(pytest.fail.Exception, match=f"no frobnicator here.*{REQUIRE_ALL_ENV}"):
        missing("no frobnicator here")


def _skips(tree: ast.Module, source: str):
    """(line, text) of every pytest.skip(...) and pytest.mark.skip/skipif(...) call."""
    for node in ast.walk(tree):
        func = node.func if isinstance(node, ast.Call) else None
        named = isinstance(func, ast.Attribute) and func.attr in {"skip", "skipif"}
        if named and "pytest" in ast.unparse(func):
            yield node.lineno, ast.get_source_segment(source, node) or ""


def test_no_test_skips_for_want_of_the_machine_except_through_needs():
    """A skip whose reason is a browser, the registry or a data set goes through needs.missing,
    so that the workflow's run fails on it instead of passing with less checked."""
    found = []
    for path in sorted(TESTS.glob("*.py")):
        source = path.read_text(encoding="utf-8")
        for line, text in _skips(ast.parse(source), source):
            if MACHINE.search(text):
                found.append(f"{path.name}:{line}: {text.splitlines()[0]}")
    assert not found, "use needs.missing(reason) instead:\n" + "\n".join(found)
