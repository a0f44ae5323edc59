"""The package's layers: no module imports one above it.

From the ground up: `annotated.base` (files, devices, threads, checkpoints, data sets: what the
chapters stand on), chapters 0 to 6 (each importing only earlier ones), `annotated.training` (a
run's machinery), chapters 7 to 11, and on top what only serves a reader or a maintainer: each
chapter's figures and exercises, the site's export and the commands (`python -m annotated.train`,
`translate`, `ddp_check`). An import counts wherever it is written: at the top of a module, inside a
function (run later) or under `TYPE_CHECKING` (a type from above is a dependency on above all the
same). A chapter's notebook-only cells are comments to Python and not read here: a notebook may
show a chapter with its figures and exercises, which the module itself must not import. Nor do
two modules import each other, by any road (`import_circles`). The graph is tools/chapters.py's,
the one `python -m tools.book` follows to decide which notebooks a change makes stale.
"""

import shutil
from pathlib import Path

import pytest

from tools.chapters import PACKAGE, import_graph, module_name

GROUND, EARLY_CHAPTERS, TRAINING, LATE_CHAPTERS, TOP = range(5)
LAYER_NAMES = ("base", "chapters 0-6", "training", "chapters 7-11", "figures, exercises, commands")
TOP_PACKAGES = {"figures", "exercises", "export"}
COMMANDS = {"train", "translate", "ddp_check"}
# The preface runs chapter 1's attention to count its operations against a recurrent layer's: the
# one import of a later chapter, read as a look ahead.
LOOKS_AHEAD = {("annotated.ch00_preface", "annotated.ch01_attention")}


def layer(name: str) -> tuple[int, int]:
    """A module's layer, and for a chapter its number (chapters import only earlier ones)."""
    parts = name.split(".")
    if len(parts) == 1 or parts[1] == "base":
        return GROUND, 0
    if parts[1].startswith("ch") and parts[1][2:4].isdigit() and len(parts) == 2:
        number = int(parts[1][2:4])
        return (EARLY_CHAPTERS if number <= 6 else LATE_CHAPTERS), number
    if parts[1] == "training":
        return TRAINING, 0
    if parts[1] in TOP_PACKAGES or parts[1] in COMMANDS:
        return TOP, 0
    raise AssertionError(f"{name}: a module in no layer. Give it one in tests/test_layers.py")


def upward_imports(package: Path) -> list[str]:
    """'importer -> imported (layer -> layer)' for each import from a lower layer into a higher
    one, or from a chapter into a later chapter."""
    found = []
    for name, targets in import_graph(package).items():
        below = layer(name)
        for target in sorted(targets):
            above = layer(target)
            if (name, target) not in LOOKS_AHEAD and above > below:
                found.append(
                    f"{name} -> {target} ({LAYER_NAMES[below[0]]} -> {LAYER_NAMES[above[0]]})"
                )
    return found


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


def test_no_module_imports_a_higher_layer():
    found = upward_imports(PACKAGE)
    assert not found, "imports from a lower layer into a higher one:\n" + "\n".join(found)


def test_every_module_has_a_layer():
    for path in PACKAGE.rglob("*.py"):
        layer(module_name(path, PACKAGE))


def test_the_layers_are_real():
    # Each layer holds modules, and each imports the one below: the order is not empty words.
    names = [module_name(p, PACKAGE) for p in PACKAGE.rglob("*.py")]
    assert {layer(name)[0] for name in names} == set(range(5))
    graph = import_graph(PACKAGE)
    assert "annotated.base.files" in graph["annotated.ch03_training"]
    assert "annotated.ch05_text" in graph["annotated.training.runs"]
    assert "annotated.ch01_attention" in graph["annotated.figures.ch01_attention"]


@pytest.mark.parametrize(
    ("module", "line", "expected"),
    [
        # a ground module that needs a chapter's type
        (
            "base/checkpoints.py",
            "if TYPE_CHECKING:\n    from annotated.ch02_model import ModelConfig\n",
            "annotated.base.checkpoints -> annotated.ch02_model (base -> chapters 0-6)",
        ),
        # a chapter that draws its own picture
        (
            "ch02_model.py",
            "def f():\n    from annotated.figures.svg import Canvas\n",
            "annotated.ch02_model -> annotated.figures.svg (chapters 0-6 -> figures, exercises, "
            "commands)",
        ),
        # an early chapter reaching for a later one
        (
            "ch05_text.py",
            "from annotated import ch06_decoding\n",
            "annotated.ch05_text -> annotated.ch06_decoding (chapters 0-6 -> chapters 0-6)",
        ),
        # the run's machinery reaching into a training chapter
        (
            "training/runs.py",
            "from annotated.ch07_multi30k import MULTI30K_PROFILES\n",
            "annotated.training.runs -> annotated.ch07_multi30k (training -> chapters 7-11)",
        ),
    ],
)
def test_a_planted_upward_import_is_found(tmp_path, module, line, expected):
    copy = _copy_of_the_package(tmp_path)
    assert upward_imports(copy) == []
    _plant(copy / module, line)
    assert upward_imports(copy) == [expected]


def _copy_of_the_package(tmp_path: Path) -> Path:
    copy = tmp_path / "annotated"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__", "*.json"))
    return copy


def _plant(module: Path, line: str) -> None:
    with module.open("a", encoding="utf-8") as handle:
        handle.write("\n" + line)


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
    copy = _copy_of_the_package(tmp_path)
    before = import_circles(import_graph(copy))
    _plant(copy / module, line)
    assert circle in import_circles(import_graph(copy)) and circle not in before
