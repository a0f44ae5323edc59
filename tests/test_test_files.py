"""Every module of annotated/ that is not a chapter has its test file, found by its name.

The rule, for a module of the package (annotated/ and its subpackages):

1. annotated/<package.../>NAME.py is tested in tests/test_NAME.py: its own name, without the
   packages around it (annotated/translate.py in tests/test_translate.py,
   annotated/base/checkpoints.py in tests/test_checkpoints.py, annotated/training/loop.py in
   tests/test_loop.py).
2. A package's __init__.py is the module of the package's name: annotated/figures/__init__.py is
   tested in tests/test_figures.py, annotated/__init__.py in tests/test_annotated.py. An
   __init__.py that holds nothing but its docstring (annotated/base/, training/, export/) has
   nothing to test and needs no file.
3. The chapters, annotated/chNN_topic.py, are not in this rule (each has its notebook, which nbval
   runs, and most a tests/test_chNN_topic.py).
4. A package's per-chapter modules, annotated/PACKAGE/chNN_topic.py (the exercises and the
   figures of each chapter), are tested in the package's file, tests/test_PACKAGE.py
   (tests/test_exercises.py, tests/test_figures.py): under rule 1 they would take the chapters'
   names.
5. The test file imports the module it is named for (`import annotated.x.NAME`, `from
   annotated.x.NAME import ...` or `from annotated.x import NAME`): a file of the right name
   that tests something else does not count. No two modules may share a file.

Test files that are no module's keep their names: the cross-cutting ones (tests/test_layers.py,
tests/test_training_spine.py, tests/test_quoted_figures.py, tests/test_numerals.py, the site's
and the package's tests, tests/test_onednn_cache.py...), and the tools' (tests/test_book.py
for tools/book.py, tests/test_grade.py...). A module may also be tested there; its own file
holds the tests of its own contracts.
"""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "annotated"
TESTS = ROOT / "tests"
CHAPTER = re.compile(r"ch\d\d_\w+")


def module_name(path: Path, package: Path = PACKAGE) -> str:
    """The dotted name of a module file: annotated/base/files.py -> annotated.base.files."""
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def only_a_docstring(path: Path) -> bool:
    body = ast.parse(path.read_text(encoding="utf-8")).body
    return all(isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) for node in body)


def rule_file(path: Path, package: Path = PACKAGE) -> str | None:
    """The test file (its name in tests/) the rule gives the module at `path`; None where the
    rule asks for none (a chapter, an __init__.py with only a docstring)."""
    parts = path.relative_to(package).with_suffix("").parts
    if parts[-1] == "__init__":
        if only_a_docstring(path):
            return None
        return f"test_{parts[-2] if len(parts) > 1 else package.name}.py"
    if CHAPTER.fullmatch(parts[-1]):
        return None if len(parts) == 1 else f"test_{parts[-2]}.py"
    return f"test_{parts[-1]}.py"


def modules(package: Path = PACKAGE) -> list[Path]:
    return sorted(p for p in package.rglob("*.py") if "__pycache__" not in p.parts)


def imported_modules(test: Path) -> set[str]:
    """Every module of the package a test file imports, wherever the import is written
    (`from annotated.x import y` counts annotated.x and annotated.x.y)."""
    found = set()
    for node in ast.walk(ast.parse(test.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return {name for name in found if name == "annotated" or name.startswith("annotated.")}


def missing_test_files(package: Path = PACKAGE, tests: Path = TESTS) -> list[str]:
    """What the rule asks for and tests/ lacks: one line per module, saying what to create."""
    missing = []
    for path in modules(package):
        name = rule_file(path, package)
        if name is None:
            continue
        test, module = tests / name, module_name(path, package)
        if not test.exists():
            missing.append(f"{path.relative_to(package.parent)}: create tests/{name}")
        elif CHAPTER.fullmatch(path.stem) is None and module not in imported_modules(test):
            missing.append(
                f"{path.relative_to(package.parent)}: tests/{name} never imports {module}"
            )
    return missing


def test_every_module_that_is_not_a_chapter_has_its_test_file():
    missing = missing_test_files()
    assert not missing, (
        "modules without their test file (the rule is tests/test_test_files.py's docstring):\n  "
        + "\n  ".join(missing)
    )


def test_no_two_modules_share_a_test_file():
    owners: dict[str, list[str]] = {}
    for path in modules():
        name = rule_file(path)
        if name is not None and not CHAPTER.fullmatch(path.stem):
            owners.setdefault(name, []).append(module_name(path))
    shared = {name: names for name, names in owners.items() if len(names) > 1}
    assert not shared, f"rename a module, or split its tests: {shared}"


@pytest.mark.parametrize(
    ("module", "expected"),
    [
        ("translate.py", "test_translate.py"),
        ("ch03_training.py", None),
        ("__init__.py", "test_annotated.py"),
        ("base/__init__.py", None),
        ("base/checkpoints.py", "test_checkpoints.py"),
        ("figures/__init__.py", "test_figures.py"),
        ("figures/ch02_model.py", "test_figures.py"),
        ("exercises/ch01_attention.py", "test_exercises.py"),
        ("exercises/diagnoses.py", "test_diagnoses.py"),
    ],
)
def test_the_rule_names_each_kind_of_module(module, expected):
    assert rule_file(PACKAGE / module) == expected


def test_the_check_names_a_missing_file_and_a_file_that_tests_something_else(tmp_path):
    package, tests = tmp_path / "annotated", tmp_path / "tests"
    (package / "base").mkdir(parents=True)
    tests.mkdir()
    (package / "__init__.py").write_text('"""The book."""\n')
    (package / "base" / "__init__.py").write_text('"""The ground floor."""\n')
    (package / "base" / "files.py").write_text("X = 1\n")
    (package / "base" / "loop.py").write_text("Y = 2\n")
    (package / "ch01_attention.py").write_text("Z = 3\n")
    (tests / "test_files.py").write_text("from annotated.base import files\n")
    (tests / "test_loop.py").write_text("from annotated.base.files import X\n")
    assert missing_test_files(package, tests) == [
        "annotated/base/loop.py: tests/test_loop.py never imports annotated.base.loop"
    ]
    (tests / "test_loop.py").unlink()
    (package / "__init__.py").write_text('"""The book."""\n\nVERSION = 1\n')
    assert missing_test_files(package, tests) == [
        "annotated/__init__.py: create tests/test_annotated.py",
        "annotated/base/loop.py: create tests/test_loop.py",
    ]
