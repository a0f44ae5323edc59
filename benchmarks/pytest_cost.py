"""A pytest plugin for `make bench-tests`: what each test cost, in wall seconds and CPU seconds.

Loaded with `-p benchmarks.pytest_cost`; it writes only where $ANNOTATED_TEST_COST names a file, a
JSON line per test (its node id, wall and CPU seconds over setup, call and teardown) and one per
pytest session (its process, its arguments, when it began, the machine's busy CPU seconds then,
its wall seconds), appended as they end.

A test's CPU seconds are those of this process and of every process it started: the finished
children it waited for (getrusage), and on Linux the live descendants too, read from /proc (a
notebook's kernel or a browser that outlives the test is counted while it works for it). On Linux
the session also makes itself its descendants' subreaper: a process whose parent ends (a browser's
renderer, a daemon) becomes its child instead of init's, so its seconds stay in the tree, counted
once, and never drop out of it in the middle of a later test. (Elsewhere such a process is lost
to the count; the machine's CPU time over the whole run, which bench_tests.py records beside these,
has it.)
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import sys
import time
from pathlib import Path

import pytest

from annotated.base.machine import _machine_seconds  # /proc/stat's busy seconds (Linux), or None

OUT_ENV = "ANNOTATED_TEST_COST"
PR_SET_CHILD_SUBREAPER = 36  # prctl(2), Linux 3.4 and later


def _tree_seconds(root: int) -> float:
    """CPU seconds of the live descendants of process `root` (with the children each waited
    for), from /proc; 0 where there is none."""
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
        ticks = os.sysconf("SC_CLK_TCK")
    except (OSError, AttributeError, ValueError):
        return 0.0
    children: dict[int, list[tuple[int, int]]] = {}
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:  # ended meanwhile
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # after the command's name
        parent = int(fields[1])
        used = sum(int(x) for x in fields[11:15])  # utime, stime, cutime, cstime
        children.setdefault(parent, []).append((int(pid), used))
    total, stack = 0, [root]
    while stack:
        for pid, used in children.get(stack.pop(), []):
            total += used
            stack.append(pid)
    return total / ticks


def cpu_seconds() -> float:
    """This process's CPU seconds, its finished children's, and its live descendants'."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    done = resource.getrusage(resource.RUSAGE_CHILDREN)
    used = own.ru_utime + own.ru_stime + done.ru_utime + done.ru_stime
    return used + _tree_seconds(os.getpid())


def _write(line: dict) -> None:
    with open(os.environ[OUT_ENV], "a", encoding="utf-8") as out:
        out.write(json.dumps(line) + "\n")


_began, _began_clock, _machine_at_start = time.time(), time.monotonic(), _machine_seconds()


def become_subreaper() -> None:
    """Orphaned descendants of this process become its children, not init's (Linux only)."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def pytest_configure(config):
    if os.environ.get(OUT_ENV):  # orphaned descendants stay this session's while it counts
        become_subreaper()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if not os.environ.get(OUT_ENV):
        yield
        return
    wall, cpu = time.monotonic(), cpu_seconds()
    yield
    wall, cpu = time.monotonic() - wall, cpu_seconds() - cpu
    _write({"test": item.nodeid, "pid": os.getpid(), "wall": round(wall, 3), "cpu": round(cpu, 3)})


def pytest_sessionfinish(session, exitstatus):
    if os.environ.get(OUT_ENV):
        _write(
            {
                "session": sys.argv[1:],
                "pid": os.getpid(),
                "started": _began,
                "machine cpu at start": _machine_at_start,
                "wall": round(time.monotonic() - _began_clock, 3),
            }
        )
