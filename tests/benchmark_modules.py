"""A module of benchmarks/, freshly executed under its own name, `benchmarks.NAME`: it imports
`benchmarks.common` as it does when run (`python -m benchmarks.NAME` from the checkout's root,
which pytest puts on sys.path: pyproject.toml's `pythonpath`)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load(name: str) -> ModuleType:
    """benchmarks/<name>.py, freshly executed (a test may patch it without touching another's)."""
    spec = importlib.util.spec_from_file_location(f"benchmarks.{name}", BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
