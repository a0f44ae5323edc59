"""The student edition (`make student`): solutions and answers taken out, and every notebook still
runs to its end, each unfinished exercise reporting "not done yet" instead of a traceback."""

import os
import subprocess
import sys

import nbformat
import pytest

from annotated.base.files import REPO_ROOT as ROOT
from annotated.figures import HTML_ENV
from tools import book, student


@pytest.fixture(scope="module")
def edition(tmp_path_factory):
    folder = tmp_path_factory.mktemp("student")
    result = subprocess.run(
        [sys.executable, "-m", "tools.student", str(folder)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert "solutions taken out" in result.stdout
    return folder


def test_strip_solutions_keeps_the_function_and_the_check():
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_code_cell(
            "def f(x):\n    ### BEGIN SOLUTION\n    return x + 1\n    ### END SOLUTION\n\n\n"
            "check(exercise, f)"
        ),
        nbformat.v4.new_markdown_cell(
            "**1.1 Predict.** What?\n\n<details><summary>Answer</summary>\n\nThis.\n\n</details>"
        ),
    ]
    assert student.strip_solutions(notebook) == 1
    code, text = notebook.cells[0].source, notebook.cells[1].source
    assert "return x + 1" not in code and "BEGIN SOLUTION" not in code
    assert '    raise NotImplementedError("exercise: write your answer here")' in code
    assert code.startswith("def f(x):") and code.endswith("check(exercise, f)")
    assert text == "**1.1 Predict.** What?" and "This." not in text


def test_the_edition_has_every_chapter_without_answers(edition):
    notebooks = sorted((edition / "notebooks").glob("ch*.ipynb"))
    assert [n.stem for n in notebooks] == [
        p.stem for p in sorted((ROOT / "annotated").glob("ch[0-9][0-9]_*.py"))
    ]
    stubs = 0
    for path in notebooks:
        notebook = nbformat.read(path, as_version=4)
        for cell in notebook.cells:
            assert "BEGIN SOLUTION" not in cell.source and "<details>" not in cell.source, path.name
            if cell.cell_type == "code":
                assert cell.outputs == [], f"{path.name}: outputs must be cleared"
                stubs += cell.source.count('raise NotImplementedError("exercise')
        assert any("## Exercises" in c.source for c in notebook.cells), (
            f"{path.name} has no exercises"
        )
    assert stubs >= 13  # every "implement" exercise
    assert (edition / "README.md").exists()


def test_every_student_notebook_that_runs_code_opens_with_the_books_first_cell(edition):
    # The same cell as the full edition's: it finds the book, or installs it, before anything else.
    cell = book.first_cell().source
    for path in sorted((edition / "notebooks").glob("ch*.ipynb")):
        notebook = nbformat.read(path, as_version=4)
        code = [c for c in notebook.cells if c.cell_type == "code"]
        if code:
            assert notebook.cells[1] is code[0] and code[0].source == cell, path.name
            assert code[0].outputs == []
            assert [c.source for c in code].count(cell) == 1


def _exercises_start(notebook) -> int:
    """The index of the cell that opens the notebook's "## Exercises" section."""
    lines = [c.source.splitlines() for c in notebook.cells]
    return next(i for i, cell in enumerate(lines) if "## Exercises" in cell)


def test_before_its_exercises_a_student_notebook_runs_the_books_own_code(edition):
    """Up to its exercises a student notebook holds the book's code cells unchanged, which nbval
    executes (`make test`): so running them once more here would repeat that work."""
    for path in sorted((edition / "notebooks").glob("ch*.ipynb")):
        notebook = nbformat.read(path, as_version=4)
        full = nbformat.read(ROOT / "notebooks" / path.name, as_version=4)
        if not any("## Exercises" in c.source for c in notebook.cells):
            continue
        mine = notebook.cells[: _exercises_start(notebook)]
        theirs = full.cells[: _exercises_start(full)]
        code = [c.source for c in mine if c.cell_type == "code"]
        assert code == [c.source for c in theirs if c.cell_type == "code"], path.name


@pytest.mark.slow
def test_the_student_exercises_run_and_every_stub_says_not_done_yet(edition):
    """Each notebook's first cell, then its exercises section to the end, in a fresh kernel: an
    exercise that needs anything an earlier cell made fails here (NameError), as it would fail a
    student who runs the exercises after a restart."""
    from nbclient import NotebookClient

    os.environ.setdefault("ANNOTATED_PROFILE", "smoke")
    os.environ[HTML_ENV] = "1"
    stubs = 0
    for path in sorted((edition / "notebooks").glob("ch*.ipynb")):
        notebook = nbformat.read(path, as_version=4)
        code = [c for c in notebook.cells if c.cell_type == "code"]
        if not code or not any("## Exercises" in c.source for c in notebook.cells):
            continue  # the lab notebook runs no code
        first = code[0]
        notebook.cells = [first, *notebook.cells[_exercises_start(notebook) :]]
        NotebookClient(
            notebook,
            timeout=600,
            kernel_name="python3",
            resources={"metadata": {"path": str(ROOT / "notebooks")}},
        ).execute()
        for cell in notebook.cells:
            if cell.cell_type == "code" and "check(exercise_" in cell.source:
                text = "".join(o.get("text", "") for o in cell.outputs)
                assert "not done yet" in text and "Traceback" not in text, (path.name, text)
                stubs += 1
    assert stubs >= 13, f"only {stubs} exercise checks ran: every 'implement' exercise should"
