"""What several test files share: the Multi30k corpus, loaded once, a mark for the tests that
need the data (`@pytest.mark.multi30k`: skipped, with the reason, where no local copy exists, or
failed where $ANNOTATED_REQUIRE_ALL says every data set must be there: tests/needs.py),
another process that holds a folder's lock (`held_elsewhere`), the book's wheel and sdist,
built once (`dist`), and the site, one server and one browser (tests/browsing.py, a plugin)."""

import contextlib
import subprocess
import sys
from pathlib import Path

import pytest
from needs import missing

from annotated.base.datasets import DATA_DIR_ENV, available_offline
from annotated.ch05_text import load_multi30k
from tools import publish

# The site, its server and a browser, shared by every test file that reads a page.
pytest_plugins = ["browsing"]


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "multi30k: needs a local Multi30k copy (else skipped: tests/needs.py)"
    )


def pytest_runtest_setup(item):
    if item.get_closest_marker("multi30k") is None:
        return
    if not available_offline("multi30k", "train.de.gz"):
        missing(f"no local Multi30k copy: set {DATA_DIR_ENV} (CI points it at ../shared/data)")


@pytest.fixture(scope="session")
def corpus():
    """Multi30k with chapter 5's word vocabularies (min_freq 2), as chapter 7 trains on it."""
    return load_multi30k()


LOCK_HOLDER = (
    "import sys\n"
    "from annotated.base.files import folder_lock\n"
    "with folder_lock(sys.argv[1]):\n"
    "    print('held', flush=True)\n"
    "    sys.stdin.read()\n"
)


@contextlib.contextmanager
def _held_elsewhere(folder: Path):
    """Another process holding `folder`'s lock until the block ends (then it exits in order)."""
    process = subprocess.Popen(
        [sys.executable, "-c", LOCK_HOLDER, str(folder)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout.readline().strip() == "held"
        yield process
    finally:
        process.stdin.close()
        process.wait(timeout=60)


@pytest.fixture
def held_elsewhere():
    """`with held_elsewhere(folder) as process:` another live process holds the folder's lock."""
    return _held_elsewhere


@pytest.fixture(scope="session")
def dist(tmp_path_factory) -> Path:
    """A folder with the wheel and the sdist of this checkout, built and checked as `make dist`
    builds them for a release (tools/publish.py, `build_dist`)."""
    folder = tmp_path_factory.mktemp("dist")
    publish.build_dist(folder)
    return folder
