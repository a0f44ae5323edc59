"""One spine for a training run: how far a run's configuration travels, and no import circles.

A run climbs back up the layers each time its configuration goes down to a lower module and comes
back: `runs -> ch05 -> runs` is one climb. `config_path` follows the configuration through a real
(tiny) run and counts them; the spine keeps them few. And no two modules of the package import
each other, by any road (an import under `TYPE_CHECKING` counts: a type from a module is a
dependency on it all the same).
"""

import ast
import dataclasses
import re
import shutil
import sys
from pathlib import Path

import pytest

from annotated.ch02_model import ModelConfig
from annotated.ch03_training import TrainConfig
from annotated.training.config import RunConfig, Schedule
from annotated.training.plan import TimeBudget

PACKAGE = Path(__file__).resolve().parent.parent / "annotated"
MADE_FROM_THE_CONFIG = (RunConfig, ModelConfig, TrainConfig, Schedule, TimeBudget)
MOST_CLIMBS = 6  # before the run was split by stage (commit 1858904) it climbed 9 times; now 5


# ---------------------------------------------------------------- following the configuration


def layer(module: str) -> int:
    """The ground (annotated.base) 0, chapters 1 to 6 their numbers, a run's machinery
    (annotated.training) 7, chapters 7 to 9 8 to 10, anything else 11."""
    part = module.split(".")[1] if "." in module else ""
    chapter = re.fullmatch(r"ch(\d\d)_\w+", part)
    if part == "base":
        return 0
    if part == "training":
        return 7
    if chapter and int(chapter[1]) <= 6:
        return int(chapter[1])
    if chapter and int(chapter[1]) <= 9:
        return int(chapter[1]) + 1
    return 11


def _arguments(frame) -> list:
    """The values a function was called with (self, positional, keyword, *args and **kwargs)."""
    code = frame.f_code
    count = code.co_argcount + code.co_kwonlyargcount
    count += bool(code.co_flags & 0x04) + bool(code.co_flags & 0x08)  # *args, **kwargs
    values = []
    for name in code.co_varnames[:count]:
        value = frame.f_locals.get(name)
        values += list(value.values()) if isinstance(value, dict) else [value]
        values += list(value) if isinstance(value, tuple) else []
    return values


def config_path(call, kinds: tuple[type, ...] = MADE_FROM_THE_CONFIG) -> list[str]:
    """The `annotated` modules, in call order, of the functions `call()` calls with the run's
    configuration or a value made from it (an instance of `kinds`), repeats in a row made one."""
    path: list[str] = []

    def watch(frame, event, _):
        module = frame.f_globals.get("__name__", "")
        if event != "call" or not module.startswith("annotated"):
            return
        if (not path or path[-1] != module) and any(
            isinstance(value, kinds) for value in _arguments(frame)
        ):
            path.append(module)

    sys.setprofile(watch)
    try:
        call()
    finally:
        sys.setprofile(None)
    return path


def climbs(path: list[str]) -> list[str]:
    """Each step of the path into a higher layer than the one before, as 'lower -> higher'."""
    return [
        f"{low} -> {high}"
        for low, high in zip(path, path[1:], strict=False)
        if layer(high) > layer(low)
    ]


def test_climbs_are_counted_between_layers_not_modules():
    path = [
        "annotated.training.runs",
        "annotated.ch05_text",
        "annotated.training.runs",
        "annotated.training.plan",  # the same layer: no climb
        "annotated.ch02_model",
        "annotated.ch01_attention",
        "annotated.ch02_model",
        "annotated.base.files",
        "annotated.ch07_multi30k",
    ]
    assert climbs(path) == [
        "annotated.ch05_text -> annotated.training.runs",
        "annotated.ch01_attention -> annotated.ch02_model",
        "annotated.base.files -> annotated.ch07_multi30k",
    ]
    assert [layer(name) for name in ("annotated.base.devices", "annotated.ch06_decoding")] == [0, 6]
    assert layer("annotated.ch09_table3") == 10 and layer("annotated.figures.ch07_multi30k") == 11


@pytest.mark.multi30k
def test_a_run_climbs_the_layers_at_most_six_times(corpus, tmp_path, capsys):
    from annotated.ch05_text import Corpus
    from annotated.ch07_multi30k import PROFILES
    from annotated.training.finish import save_vocabularies
    from annotated.training.runs import train_run

    # Chapter 7's smoke profile with a time budget, cut to a few seconds: planned, trained,
    # evaluated, averaged.
    config = dataclasses.replace(
        PROFILES["smoke"], train_pairs=200, max_tokens=200, val_sentences=4, precision="fp32"
    )
    small = Corpus(corpus.src_vocab, corpus.tgt_vocab, corpus.raw, corpus.ids)
    save_vocabularies(small, tmp_path)
    path = config_path(lambda: train_run(config, tmp_path, small, progress=False))
    with capsys.disabled():
        print("\nthe configuration's path:\n  " + "\n  ".join(path))
        print(f"{len(climbs(path))} climbs:\n  " + "\n  ".join(climbs(path)))
    assert "annotated.training.runs" in path and "annotated.ch03_training" in path
    assert len(climbs(path)) <= MOST_CLIMBS, climbs(path)


# ---------------------------------------------------------------- import circles


def _module_name(path: Path, package: Path) -> str:
    relative = path.relative_to(package.parent).with_suffix("")
    parts = relative.parts[:-1] if relative.name == "__init__" else relative.parts
    return ".".join(parts)


def import_graph(package: Path) -> dict[str, set[str]]:
    """Each module of the package and the package's modules it imports, wherever the import is
    written: at the top, under `TYPE_CHECKING`, or inside a function. `from a.b import c` imports
    a.b.c when that is a module, else a.b. A module's import of a package it lies inside is left
    out: Python imports that package before the module anyway, so it is no edge of the module's
    own (a package that imports its own module is one)."""
    modules = {_module_name(p, package): p for p in sorted(package.rglob("*.py"))}

    def module_of(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found.update(module_of(alias.name) for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.update(module_of(f"{node.module}.{alias.name}") for alias in node.names)
        graph[name] = {m for m in found if m and not name.startswith(f"{m}.") and m != name}
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every circle of imports, each as a path from its first module (by name) back to it."""
    circles = []
    for start in sorted(graph):
        # The shortest way back to `start` through modules after it by name (each circle once).
        ways, seen = [[start]], {start}
        while ways and not any(way[-1] == start and len(way) > 1 for way in ways):
            ways = [
                [*way, after]
                for way in ways
                for after in sorted(graph[way[-1]])
                if after == start or (after > start and after not in seen)
            ]
            seen.update(way[-1] for way in ways)
        circles += [way for way in ways if way[-1] == start and len(way) > 1][:1]
    return circles


def test_no_import_circle_in_the_book():
    circles = import_circles(import_graph(PACKAGE))
    assert not circles, "import circles:\n" + "\n".join(" -> ".join(c) for c in circles)


@pytest.mark.parametrize(
    ("module", "line", "circle"),
    [
        (  # a type-only import of the module above, which imports this one
            "base/files.py",
            "if TYPE_CHECKING:\n    from annotated.base.checkpoints import save_checkpoint\n",
            ["annotated.base.checkpoints", "annotated.base.files", "annotated.base.checkpoints"],
        ),
        (  # an import inside a function, round three modules
            "ch02_model.py",
            "def f():\n    from annotated.ch05_text import Vocab\n",
            [
                "annotated.ch02_model",
                "annotated.ch05_text",
                "annotated.ch03_training",
                "annotated.ch02_model",
            ],
        ),
    ],
)
def test_a_planted_import_circle_is_found(tmp_path, module, line, circle):
    copy = tmp_path / "annotated"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__", "*.json"))
    before = import_circles(import_graph(copy))
    with (copy / module).open("a", encoding="utf-8") as handle:
        handle.write("\n" + line)
    assert circle in import_circles(import_graph(copy)) and circle not in before
