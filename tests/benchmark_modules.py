"""A module of benchmarks/, freshly executed under its own name, `benchmarks.NAME`: it imports
`benchmarks.common` as it does when run (`python -m benchmarks.NAME` from the checkout's root,
which pytest puts on sys.path: pyproject.toml's `pythonpath`)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load(name: str) -> ModuleType:
    """benchmarks/<name>.py, freshly executed (a test may patch it without touching another's)."""
    spec = importlib.util.spec_from_file_location(f"benchmarks.{name}", BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    previous = sys.modules.get(spec.name)
    sys.modules[spec.name] = module  # as an import does: a dataclass finds its module there
    try:
        spec.loader.exec_module(module)
    finally:  # then as before: the next test gets a fresh copy
        if previous is None:
            sys.modules.pop(spec.name, None)
        else:
            sys.modules[spec.name] = previous
    return module
