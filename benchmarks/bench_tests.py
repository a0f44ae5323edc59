"""make bench-tests: what `make test` costs on a fresh clone, and where its time goes.

This checkout's last commit is cloned into a temporary folder (this checkout's ../shared seen
beside it, as CI has it) and `make test` runs there as CI runs it (`.ci/run`: the setup, then the
lanes), with benchmarks/pytest_cost.py loaded in every pytest session. The record keeps the whole
run's seconds, the setup's (until the first lane's tests began), each lane's seconds, every test
file's wall and CPU seconds, and the machine's busy CPU seconds over the lanes: with nothing else
running, that is the work the lanes do, daemons included. Divided by the cores and added to the
setup's seconds, it gives the shortest the run could take on them with every core busy all the
time (the floor), which the record sets beside the target, ten minutes. Run it alone, with
$ANNOTATED_DATA_DIR set as CI sets it (the chapters that train on data are skipped without it).

    python -m benchmarks.bench_tests [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from benchmarks.common import Timing, describe, write_results
from benchmarks.pytest_cost import OUT_ENV, become_subreaper, cpu_seconds

ROOT = Path(__file__).resolve().parent.parent
TARGET_SECONDS = 600  # issue 63: make test on a fresh clone of a 2-core host, alone
PLUGIN = "-p benchmarks.pytest_cost"


def lane_of(arguments: list[str]) -> str:
    """The lane a pytest session belongs to, from its arguments (the Makefile's test-python,
    test-reader and nbval-kernels)."""
    if "tests" in arguments:  # the whole folder
        return "python"
    if any(a.startswith("tests/test_") for a in arguments):  # some of its files
        return "reader"
    return "nbval-kernels"  # notebooks only


def summary(lines: list[dict]) -> dict:
    """Each lane's seconds, tests and CPU seconds, and every file's, the costliest first."""
    lane_by_pid = {line["pid"]: lane_of(line["session"]) for line in lines if "session" in line}
    lanes: dict[str, dict] = {}
    files: dict[str, dict] = defaultdict(lambda: {"tests": 0, "seconds": 0.0, "cpu seconds": 0.0})
    for line in lines:
        lane = lane_by_pid.get(line["pid"], "unfinished")
        if "session" in line:
            entry = lanes.setdefault(lane, {"tests": 0, "cpu seconds": 0.0})
            entry["seconds"] = line["wall"]
            continue
        entry = lanes.setdefault(lane, {"tests": 0, "cpu seconds": 0.0})
        entry["tests"] += 1
        entry["cpu seconds"] += line["cpu"]
        file = files[line["test"].split("::")[0]]
        file["lane"] = lane
        file["tests"] += 1
        file["seconds"] += line["wall"]
        file["cpu seconds"] += line["cpu"]
    for entry in [*lanes.values(), *files.values()]:
        for key in ("seconds", "cpu seconds"):
            if key in entry:
                entry[key] = round(entry[key], 1)
    ranked = sorted(files.items(), key=lambda item: -item[1]["cpu seconds"])
    return {"lanes": lanes, "files": [{"file": name, **cost} for name, cost in ranked]}


def floor(lanes_cpu: float, cores: int, setup: float) -> dict:
    """The shortest run the lanes' work allows after the setup, with every core busy all the
    time, and the CPU seconds the target leaves them."""
    return {
        "seconds with every core busy": round(setup + lanes_cpu / cores),
        "target seconds": TARGET_SECONDS,
        "cpu seconds the target leaves the lanes": round(max(TARGET_SECONDS - setup, 0) * cores),
    }


def lanes_began(lines: list[dict]) -> tuple[float, float | None]:
    """When the first lane's pytest began (seconds since the epoch), and the machine's busy CPU
    seconds then (None where they cannot be read)."""
    sessions = [line for line in lines if "session" in line]
    if not sessions:
        raise SystemExit("bench-tests: no pytest session ended: see make test's output above")
    first = min(sessions, key=lambda line: line["started"])
    return first["started"], first["machine cpu at start"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="keep the clone (its path is printed)")
    args = parser.parse_args()
    if not os.environ.get("ANNOTATED_DATA_DIR"):
        print(
            "bench-tests: set ANNOTATED_DATA_DIR to the data sets' folder, as CI does "
            "(ANNOTATED_DATA_DIR=../shared/data make bench-tests): without it the chapters "
            "that train on data are skipped and the time means nothing.",
            file=sys.stderr,
        )
        return 2
    scratch = Path(tempfile.mkdtemp(prefix="bench-tests-"))
    clone, costs = scratch / "clone", scratch / "costs.jsonl"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    if (ROOT.parent / "shared").is_dir():  # ../shared beside the clone, as CI has it
        (scratch / "shared").symlink_to(ROOT.parent / "shared")
    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=clone, capture_output=True, text=True, check=True
    ).stdout.strip()
    become_subreaper()  # what the lanes leave behind stays countable as this run's, not others'
    timing = Timing(os.cpu_count() or 1, cpu_seconds=cpu_seconds).start()
    started = time.time()
    done = subprocess.run(
        ["make", "test", f"SLOWEST={PLUGIN} --durations=10"],
        cwd=clone,
        env=os.environ | {OUT_ENV: str(costs)},
    )
    seconds = time.time() - started
    conditions = timing.stop()
    lines = [json.loads(line) for line in costs.read_text().splitlines()] if costs.exists() else []
    began, machine_then = lanes_began(lines)
    setup = began - started
    if timing.machine is None or machine_then is None:  # no /proc/stat: the tests' own count
        lanes_cpu = sum(line["cpu"] for line in lines if "test" in line)
    else:
        lanes_cpu = timing.machine_started + timing.machine - machine_then
    cores = os.cpu_count() or 1
    record = {
        "benchmark": "make test on a fresh clone: the setup, each lane, every test file",
        "machine": describe(),
        "measured at": time.strftime("%Y-%m-%d %H:%M"),
        "commit": commit,
        "timing": conditions,
        "passed": done.returncode == 0,
        "make test seconds": round(seconds),
        "setup seconds": round(setup),
        "lanes cpu seconds": round(lanes_cpu),
        "cores": cores,
        "cores busy in the lanes": round(lanes_cpu / max(seconds - setup, 1e-9) / cores, 2),
        "floor": floor(lanes_cpu, cores, setup),
        **summary(lines),
    }
    write_results("tests", record)
    if args.keep:
        print(f"the clone: {clone}")
    else:
        shutil.rmtree(scratch, ignore_errors=True)
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
