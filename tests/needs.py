"""What to do when a test finds something missing from the machine: Chromium, pdftoppm, the
package registry or a local copy of a data set.

On a maintainer's laptop such a test is skipped, with the reason and what would provide it. Where
$ANNOTATED_REQUIRE_ALL is 1 (the book's GitHub workflow sets it, after installing all of them),
it fails with the same reason instead: there a skip would only hide a broken set-up step, and a
green run would have checked less than it claims. `.ci/run` leaves the variable unset.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

REQUIRE_ALL_ENV = "ANNOTATED_REQUIRE_ALL"


def everything_required() -> bool:
    """Whether this run must have every browser, registry and data set its tests need."""
    return os.environ.get(REQUIRE_ALL_ENV, "") not in {"", "0"}


def missing(reason: str) -> NoReturn:
    """Skip the calling test (or fixture) for `reason`, or fail it where everything is required."""
    __tracebackhide__ = True  # the report names the caller's line, not this one
    if everything_required():
        pytest.fail(f"{reason} ({REQUIRE_ALL_ENV} is set, so this fails instead of skipping)")
    pytest.skip(reason)
