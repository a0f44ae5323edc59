"""What every benchmark records: the machine it ran on, and the result file, written atomically."""

from __future__ import annotations

import json
from pathlib import Path

from annotated.files import atomic_write
from annotated.runs import machine  # noqa: F401  (the benchmarks import it from here)

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def write_results(name: str, record: dict, quiet: bool = False) -> Path:
    """Write benchmarks/results/<name>.json (atomically) and print it (unless `quiet`)."""
    path = RESULTS_DIR / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(path, "w", encoding="utf-8") as handle:
        handle.write(json.dumps(record, indent=2) + "\n")
    if not quiet:
        print(json.dumps(record, indent=2))
    return path
