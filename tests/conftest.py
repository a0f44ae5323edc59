"""What several test files share: the Multi30k corpus, loaded once, a mark for the tests that
need the data (`@pytest.mark.multi30k`: skipped, with the reason, where no local copy exists), and
another process that holds a folder's lock (`held_elsewhere`)."""

import contextlib
import subprocess
import sys
from pathlib import Path

import pytest

from annotated.ch05_text import load_multi30k
from annotated.datasets import DATA_DIR_ENV, available_offline


def pytest_configure(config):
    config.addinivalue_line("markers", "multi30k: needs a local Multi30k copy (else skipped)")


def pytest_collection_modifyitems(config, items):
    if available_offline("multi30k", "train.de.gz"):
        return
    skip = pytest.mark.skip(
        reason=f"no local Multi30k copy: set {DATA_DIR_ENV} (CI points it at ../shared/data)"
    )
    for item in items:
        if item.get_closest_marker("multi30k") is not None:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def corpus():
    """Multi30k with chapter 5's word vocabularies (min_freq 2), as chapter 7 trains on it."""
    return load_multi30k()


LOCK_HOLDER = (
    "import sys\n"
    "from annotated.files import folder_lock\n"
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
