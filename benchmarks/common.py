"""What every benchmark records: the machine it ran on, and the result file, written atomically."""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path

import torch

from annotated.ch03_training import use_bf16
from annotated.files import atomic_write

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def machine() -> str:
    """CPU architecture and model, cores, torch version and threads, bf16 support."""
    model = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (
        f"{platform.machine()} {model}, {os.cpu_count()} cores, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads, bf16 hardware: {use_bf16('auto', torch.device('cpu'))}"
    )


def write_results(name: str, record: dict) -> Path:
    """Write benchmarks/results/<name>.json (atomically) and print it."""
    path = RESULTS_DIR / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(path, "w", encoding="utf-8") as handle:
        handle.write(json.dumps(record, indent=2) + "\n")
    print(json.dumps(record, indent=2))
    return path
