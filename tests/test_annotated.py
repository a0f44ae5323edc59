"""annotated/__init__.py: the book's version, and the one setting made on import: oneDNN's cache of
prepared kernels enlarged to the book's capacity, unless the reader chose one (the flag says
which). Each import is a fresh process, as a reader's is. (That oneDNN then keeps the kernels, by
its own count, is tests/test_onednn_cache.py's.)"""

import subprocess
import sys
import tomllib

from command_line import ROOT

import annotated

CAPACITY = "ONEDNN_PRIMITIVE_CACHE_CAPACITY"
SAYS = (
    "import os, annotated; "
    f"print(os.environ[{CAPACITY!r}], annotated.ONEDNN_CACHE_FROM_BOOK, annotated.__file__)"
)


def imported_with(**environment: str) -> list[str]:
    """What a fresh `import annotated` leaves, in an environment of `environment` only (and PATH)."""
    env = {"PATH": "/usr/bin:/bin", **environment}
    done = subprocess.run(
        [sys.executable, "-c", SAYS], capture_output=True, text=True, cwd=ROOT, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    *said, where = done.stdout.split()
    assert where == str(ROOT / "annotated" / "__init__.py")  # this checkout's book
    return said


def test_the_version_is_the_one_pyproject_releases():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert annotated.__version__ == project["version"]


def test_importing_the_book_sets_its_cache_capacity_where_the_reader_set_none():
    assert imported_with() == [str(annotated.ONEDNN_CACHE_CAPACITY), "True"]
    assert annotated.ONEDNN_CACHE_CAPACITY >= 4 * 1024  # four times oneDNN's default at least


def test_a_capacity_the_reader_set_is_kept_and_said_not_to_be_the_books():
    assert imported_with(**{CAPACITY: "64"}) == ["64", "False"]
