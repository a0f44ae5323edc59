"""What every benchmark records: the machine it ran on, the load it ran under, and the result
file, written atomically.

A time means something only if nothing else ran on the machine meanwhile (two cores shared with
a test run have made a training twice as slow). So a benchmark runs inside `Timing`, which
measures the CPU time other processes used in a few seconds before it started and while it ran
(the lagging load average only where that cannot be read), notes the load averages, and the share
of the CPU the benchmark's processes got; it lives in annotated/base/machine.py, with `describe()` (the machine)
and `cpu_kind()`; chapter 9 and the training runs describe their machine with the same module. A record taken on a busy machine says so
(`"busy": true`, and why), and `write_results` never lets it replace a clean record: it goes
beside it, as `<name>.busy.json`, with a warning.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from annotated.base.files import atomic_write
from annotated.base.machine import Timing, cpu_kind, describe  # noqa: F401  (benchmarks import them here)

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def _is_clean(path: Path) -> bool:
    try:
        timing = json.loads(path.read_text()).get("timing")
    except (OSError, ValueError, AttributeError):
        return False
    return isinstance(timing, dict) and timing.get("busy") is False


def code_commit() -> str:
    """The commit the measured code is checked out at, saying so when the tree has uncommitted
    changes (then the code is that commit's plus them), or why it is unknown. $ANNOTATED_COMMIT,
    when set, names it instead."""
    named = os.environ.get("ANNOTATED_COMMIT", "").strip()
    if named:  # a copy of the checkout without its history (a lent GPU machine) says which
        return named
    root = Path(__file__).resolve().parent.parent  # the checkout whose code is measured
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
        changed = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown: not measured in a git checkout"
    return f"{head} with uncommitted changes" if changed else head


def read_json_object(path: Path) -> dict:
    """The JSON object a record file holds ({} while there is no such file): a ValueError if it
    holds another kind of value (json's own for what is not JSON at all)."""
    if not path.exists():
        return {}
    value = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(value, dict):
        raise ValueError(f"{path} holds a JSON {type(value).__name__}, not an object")
    return value


def write_results(name: str, record: dict, quiet: bool = False) -> Path:
    """Write benchmarks/results/<name>.json (atomically) and print it (unless `quiet`).

    The record names the commit its code was measured on ("commit"), unless it names one already.
    A record whose "timing" says the machine was busy never replaces one taken on an idle
    machine: it is written to <name>.busy.json instead, and a warning says so.
    """
    record = {**record, "commit": record.get("commit") or code_commit()}
    path = RESULTS_DIR / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    busy = bool(record.get("timing", {}).get("busy"))
    if busy:
        print(
            f"WARNING: the machine was busy ({record['timing']['why busy']}): the times in this "
            "record are not comparable. Run the benchmark again with nothing else running.",
            file=sys.stderr,
        )
        if _is_clean(path):
            path = path.with_name(f"{name}.busy.json")
            print(
                f"WARNING: {path.name} written; the idle machine's {name}.json is kept.",
                file=sys.stderr,
            )
    with atomic_write(path, "w", encoding="utf-8") as handle:
        handle.write(json.dumps(record, indent=2) + "\n")
    if not quiet:
        print(json.dumps(record, indent=2))
    return path
