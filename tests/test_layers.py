"""The package's layers: no module imports one above it.

From the ground up: `annotated.base` (files, devices, threads, checkpoints, data sets: what the
chapters stand on), chapters 0 to 6 (each importing only earlier ones), `annotated.training` (a
run's machinery), chapters 7 to 11, and on top what only serves a reader or a maintainer: each
chapter's figures and exercises, the site's export and the commands (`python -m annotated.train`,
`translate`, `ddp_check`). An import counts wherever it is written: at the top of a module, inside a
function (run later) or under `TYPE_CHECKING` (a type from above is a dependency on above all the
same). A chapter's notebook-only cells are comments to Python and not read here: a notebook may
show a chapter with its figures and exercises, which the module itself must not import.
"""

import ast
import shutil
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "annotated"

GROUND, EARLY_CHAPTERS, TRAINING, LATE_CHAPTERS, TOP = range(5)
LAYER_NAMES = ("base", "chapters 0-6", "training", "chapters 7-11", "figures, exercises, commands")
TOP_PACKAGES = {"figures", "exercises", "export"}
COMMANDS = {"train", "translate", "ddp_check"}
# The preface runs chapter 1's attention to count its operations against a recurrent layer's: the
# one import of a later chapter, read as a look ahead.
LOOKS_AHEAD = {("annotated.ch00_preface", "annotated.ch01_attention")}


def module_name(path: Path, package: Path) -> str:
    relative = path.relative_to(package.parent).with_suffix("")
    parts = relative.parts[:-1] if relative.name == "__init__" else relative.parts
    return ".".join(parts)


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


def imported(path: Path) -> set[str]:
    """Every `annotated` module the file imports, anywhere in its code."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return {name for name in names if name.split(".")[0] == "annotated"}


def upward_imports(package: Path) -> list[str]:
    """'importer -> imported (layer -> layer)' for each import from a lower layer into a higher
    one, or from a chapter into a later chapter."""
    modules = {module_name(p, package): p for p in sorted(package.rglob("*.py"))}
    found = []
    for name, path in modules.items():
        below = layer(name)
        for target in sorted(imported(path)):
            if target not in modules or (name, target) in LOOKS_AHEAD:
                continue  # `from annotated.x import function`: the module is x
            above = layer(target)
            if above[0] > below[0] or (above[0] == below[0] and above[1] > below[1]):
                found.append(
                    f"{name} -> {target} ({LAYER_NAMES[below[0]]} -> {LAYER_NAMES[above[0]]})"
                )
    return found


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
    assert "annotated.base.files" in imported(PACKAGE / "ch03_training.py")
    assert "annotated.ch05_text" in imported(PACKAGE / "training" / "runs.py")
    assert "annotated.ch01_attention" in imported(PACKAGE / "figures" / "ch01_attention.py")


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
    copy = tmp_path / "annotated"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__", "*.json"))
    assert upward_imports(copy) == []
    with (copy / module).open("a", encoding="utf-8") as handle:
        handle.write("\n" + line)
    assert upward_imports(copy) == [expected]
