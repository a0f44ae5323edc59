"""annotated/__init__.py: importing the book enlarges oneDNN's cache of prepared kernels.

oneDNN says, with ONEDNN_VERBOSE=profile_create, whether each kernel it prepares came from its
cache (cache_hit) or was made afresh (cache_miss). A child process prepares kernels for SHAPES
different shapes, twice over: with the default cache of 1,024 the second pass finds none of them
(the cache keeps the newest 1,024 and the shapes come round in order), with the book's all.
"""

import os
import subprocess
import sys

import pytest
import torch

# Every test here is slow-marked (fresh processes that import torch):
# `make unit` leaves them to `make test`.
pytestmark = pytest.mark.slow

SHAPES = 600  # oneDNN's inner product makes two kernels a shape: 1,200, more than 1,024

CHILD = f"""
import torch
{{imports}}
weight = torch.randn(8, 3).to_mkldnn()
for _ in range(2):
    for rows in range(1, {SHAPES} + 1):
        torch._C._nn.mkldnn_linear(torch.randn(rows, 3).to_mkldnn(), weight)
"""


def prepared_kernels(imports: str, **environment: str) -> dict[str, int]:
    """How many kernels a child process found in oneDNN's cache, and how many it made."""
    env = {k: v for k, v in os.environ.items() if k != "ONEDNN_PRIMITIVE_CACHE_CAPACITY"}
    env |= {"ONEDNN_VERBOSE": "profile_create", **environment}
    done = subprocess.run(
        [sys.executable, "-c", CHILD.format(imports=imports)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return {kind: done.stdout.count(kind) for kind in ("cache_hit", "cache_miss")}


@pytest.fixture(scope="module")
def onednn():
    if not torch.backends.mkldnn.is_available():
        pytest.skip("this torch build has no oneDNN")
    try:
        torch._C._nn.mkldnn_linear(torch.randn(2, 3).to_mkldnn(), torch.randn(4, 3).to_mkldnn())
    except RuntimeError as error:  # a build or CPU without oneDNN's fp32 inner product
        pytest.skip(f"oneDNN's inner product does not run here: {error}")


def test_importing_the_book_keeps_every_kernel_a_run_prepares(onednn):
    # Imported after torch, as a notebook may: the cache is sized at the first kernel, not before.
    counts = prepared_kernels("import annotated")
    # Each kernel made once (the first pass), and found again in the second.
    assert counts["cache_miss"] == 2 * SHAPES, "the second pass made kernels afresh"
    assert counts["cache_hit"] >= 2 * SHAPES


def test_without_the_book_the_default_cache_forgets_them_all(onednn):
    # The control, which shows that the check above can fail: oneDNN's default capacity.
    counts = prepared_kernels("")
    assert counts["cache_miss"] == 4 * SHAPES  # every kernel made afresh, both passes


def test_a_capacity_the_reader_chose_wins(onednn):
    counts = prepared_kernels("import annotated", ONEDNN_PRIMITIVE_CACHE_CAPACITY="1024")
    assert counts["cache_miss"] == 4 * SHAPES
