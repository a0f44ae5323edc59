"""make bench-tests (benchmarks/bench_tests.py) and its pytest plugin (benchmarks/pytest_cost.py):
a test's CPU seconds are counted, not its wall seconds, children and live descendants included;
the lanes are told apart as the Makefile runs them; the floor is the arithmetic it says."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import bench_tests, pytest_cost

ROOT = Path(__file__).resolve().parent.parent

# Each test starts a child: one that works 0.6 s of CPU and is waited for, one that only sleeps,
# one that works 0.6 s and is still alive (asleep) when its test ends, ended by the next; and one
# that leaves an orphan working 0.6 s, which ends (asleep) during the test after.
TESTS = """
import subprocess, sys, time

BURN = "import time\\nend = time.process_time() + 0.6\\nwhile time.process_time() < end: pass\\n"
LEFT = []

def test_a_busy_child():
    subprocess.run([sys.executable, "-c", BURN], check=True)

def test_a_sleeping_child():
    subprocess.run([sys.executable, "-c", "import time; time.sleep(0.8)"], check=True)

def test_a_busy_child_left_running():
    LEFT.append(subprocess.Popen([sys.executable, "-c", BURN + "time.sleep(60)"]))
    time.sleep(2.0)

def test_the_last_one_ends_it():
    LEFT[0].kill()
    LEFT[0].wait()

ORPHAN = f"import subprocess, sys; subprocess.Popen([sys.executable, '-c', {BURN + 'time.sleep(1.2)'!r}])"

def test_an_orphan_works():
    subprocess.run([sys.executable, "-c", ORPHAN], check=True)  # its parent ends at once
    time.sleep(1.2)

def test_the_orphan_ends():
    time.sleep(1.5)
"""


@pytest.fixture(scope="module")
def costs(tmp_path_factory) -> dict[str, dict]:
    folder = tmp_path_factory.mktemp("cost")
    (folder / "test_children.py").write_text(TESTS)
    out = folder / "costs.jsonl"
    ran = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "benchmarks.pytest_cost",
            "-p",
            "no:cacheprovider",
            str(folder / "test_children.py"),
        ],
        cwd=ROOT,
        env=os.environ | {pytest_cost.OUT_ENV: str(out)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-2000:]
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    return {line.get("test", "session").split("::")[-1]: line for line in lines}


def test_a_child_that_works_counts_and_one_that_sleeps_does_not(costs):
    busy, asleep = costs["test_a_busy_child"], costs["test_a_sleeping_child"]
    assert busy["cpu"] >= 0.5, busy
    assert asleep["wall"] >= 0.8 and asleep["cpu"] < 0.4, asleep  # wall seconds are not CPU


@pytest.mark.skipif(
    not Path("/proc/self/stat").exists(), reason="live processes are read from /proc"
)
def test_a_live_descendant_counts_while_it_works_for_the_test(costs):
    # Never waited for within its test, so getrusage alone would give it nothing.
    assert costs["test_a_busy_child_left_running"]["cpu"] >= 0.5, costs


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="subreapers are Linux's")
def test_an_orphan_counts_while_it_works_and_its_end_takes_nothing_away(costs):
    # Its parent gone, it would be init's, out of the count; its end would then take its seconds
    # from the test it ends in (made negative).
    assert costs["test_an_orphan_works"]["cpu"] >= 0.5, costs
    assert costs["test_the_orphan_ends"]["cpu"] >= 0, costs


def test_the_session_says_who_ran_it_and_when(costs):
    session = costs["session"]
    assert session["pid"] == costs["test_a_busy_child"]["pid"]
    assert session["wall"] >= 2.8 and session["started"] > 1.6e9
    assert str(session["session"][-1]).endswith("test_children.py")


def _makefile_pytest_arguments(target: str) -> list[str]:
    """The arguments `make -n TARGET` gives pytest (after `-m pytest`)."""
    shown = subprocess.run(
        ["make", "-n", "--no-print-directory", target],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    line = next(line for line in shown.splitlines() if " -m pytest " in line)
    words = shlex.split(line)
    return words[words.index("pytest") + 1 :]


@pytest.mark.parametrize(
    "target,lane",
    [("test-python", "python"), ("test-reader", "reader"), ("nbval-kernels", "nbval-kernels")],
)
def test_the_lanes_are_named_as_the_makefile_runs_them(target, lane):
    assert bench_tests.lane_of(_makefile_pytest_arguments(target)) == lane


def test_the_summary_adds_up_tests_by_lane_and_file():
    lines = [
        {"test": "tests/test_a.py::one", "pid": 1, "wall": 2.0, "cpu": 1.5},
        {"test": "tests/test_a.py::two", "pid": 1, "wall": 1.0, "cpu": 1.0},
        {"test": "tests/test_site.py::page", "pid": 2, "wall": 4.0, "cpu": 0.5},
        {
            "session": ["tests", "--nbval"],
            "pid": 1,
            "started": 10.0,
            "wall": 3.5,
            "machine cpu at start": 100.0,
        },
        {
            "session": ["tests/test_site.py"],
            "pid": 2,
            "started": 9.0,
            "wall": 4.2,
            "machine cpu at start": 90.0,
        },
    ]
    found = bench_tests.summary(lines)
    assert found["lanes"] == {
        "python": {"tests": 2, "cpu seconds": 2.5, "seconds": 3.5},
        "reader": {"tests": 1, "cpu seconds": 0.5, "seconds": 4.2},
    }
    assert [f["file"] for f in found["files"]] == ["tests/test_a.py", "tests/test_site.py"]
    assert found["files"][0] == {
        "file": "tests/test_a.py",
        "tests": 2,
        "seconds": 3.0,
        "cpu seconds": 2.5,
        "lane": "python",
    }
    assert bench_tests.lanes_began(lines) == (9.0, 90.0)  # the earlier session


def test_the_floor_is_the_setup_and_the_lanes_work_spread_over_every_core():
    floor = bench_tests.floor(lanes_cpu=1800, cores=2, setup=140)
    assert floor == {
        "seconds with every core busy": 1040,
        "target seconds": 600,
        "cpu seconds the target leaves the lanes": 920,
    }


def test_without_the_data_sets_it_says_what_to_set_and_runs_nothing():
    env = {k: v for k, v in os.environ.items() if k != "ANNOTATED_DATA_DIR"}
    ran = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_tests"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 2
    assert "set ANNOTATED_DATA_DIR" in ran.stderr and not ran.stdout, ran.stderr
    assert len(ran.stderr.strip().splitlines()) == 1, ran.stderr  # one line, no traceback
