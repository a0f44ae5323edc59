"""`make grade` (tools/grade.py) on a class of five made here from chapter 1's student edition: one
solved everything, one nothing, one got both exercises wrong, one's cell raises, one's answer
never returns. The sheet must say exactly that (the same lines as the notebook's own checks), and
the whole class must be graded within the time limit of the hanging call and a little more.
tests/test_grade_attacks.py holds what dishonest students try; tests/test_sandbox.py,
tests/test_grade_wire.py and tests/test_sheets.py the grader's parts on their own."""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import nbformat
import pytest
import torch
from needs import missing

from tools import book, grade, student
from tools.sandbox import Limits
from tools.sheets import write_sheet

ROOT = Path(__file__).resolve().parent.parent

TIMEOUT = 60
CALL_TIMEOUT = 5


def chapter_1(solved: bool) -> nbformat.NotebookNode:
    notebook = book.read_chapter(ROOT / "annotated" / "ch01_attention.py")
    if not solved:
        student.strip_solutions(notebook)
    return notebook


def replaced(notebook, function: str, body: str) -> nbformat.NotebookNode:
    """The notebook with the solution of `def function` replaced by `body` (indented code)."""
    for cell in notebook.cells:
        if cell.cell_type == "code" and f"def {function}(" in cell.source:
            start = cell.source.index("### BEGIN SOLUTION")
            end = cell.source.index("### END SOLUTION") + len("### END SOLUTION")
            cell.source = cell.source[:start] + body.strip() + cell.source[end:]
            return notebook
    raise AssertionError(f"chapter 1 has no cell defining {function}")


def with_line_before_check(notebook, exercise: str, line: str) -> nbformat.NotebookNode:
    for cell in notebook.cells:
        if cell.cell_type == "code" and f"check({exercise}," in cell.source:
            cell.source = cell.source.replace(f"check({exercise},", f"{line}\ncheck({exercise},")
            return notebook
    raise AssertionError(exercise)


@pytest.fixture(scope="module")
def class_folder(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("class")
    no_sqrt = (
        "scores = query @ key.transpose(-2, -1)\n    if mask is not None:\n"
        "        scores = scores.masked_fill(~mask, float('-inf'))\n"
        "    return scores.softmax(dim=-1) @ value"
    )
    notebooks = {
        "ada": chapter_1(solved=True),
        "ben": chapter_1(solved=False),
        "cleo": replaced(
            replaced(chapter_1(True), "my_attention", no_sqrt),
            "my_subsequent_mask",
            "return torch.ones(1, size, size, dtype=torch.bool).triu()",
        ),
        "dev": with_line_before_check(chapter_1(True), "exercise_1_2", "1 / 0"),
        "eve": replaced(chapter_1(True), "my_subsequent_mask", "while True:\n        pass"),
    }
    (folder / "dev").mkdir()  # a student's subfolder, as a shared folder would have it
    for name, notebook in notebooks.items():
        path = (
            folder / "dev" / "ch01_attention.ipynb" if name == "dev" else folder / f"{name}.ipynb"
        )
        nbformat.write(notebook, path)
    return folder


@pytest.mark.slow
def test_the_sheet_says_who_solved_what(class_folder):
    if shutil.which("bwrap") is None:
        missing("needs bubblewrap, make grade's sandbox (make sandbox installs Debian's)")
    started = time.perf_counter()
    limits = Limits(timeout=TIMEOUT, call_timeout=CALL_TIMEOUT)
    sheet = grade.grade(class_folder, limits, log=lambda line: None)
    seconds = time.perf_counter() - started
    status = {s: {e: r.status for e, r in row.items()} for s, row in sheet.items()}
    assert status == {
        "ada": {"1.2": "pass", "1.3": "pass"},
        "ben": {"1.2": "not done", "1.3": "not done"},
        "cleo": {"1.2": "fail", "1.3": "fail"},
        "dev": {"1.2": "error", "1.3": "pass"},
        "eve": {"1.2": "pass", "1.3": "timed out"},
    }
    assert "not divided by sqrt(d_k)" in sheet["cleo"]["1.2"].line  # the check's own line
    assert sheet["cleo"]["1.3"].line.startswith("✗ exercise 1.3")
    assert "ZeroDivisionError" in sheet["dev"]["1.2"].line
    assert "did not return within 5 s" in sheet["eve"]["1.3"].line
    assert seconds < CALL_TIMEOUT + 5 * 20, f"grading took {seconds:.0f} s"

    csv_path, html_path = write_sheet(sheet, class_folder / "grades")
    rows = list(csv.reader(csv_path.open(encoding="utf-8")))
    assert rows[0] == ["student", "1.2", "1.3", "passed"]
    table = {row[0]: row[1:] for row in rows[1:]}
    assert table["ada"] == ["pass", "pass", "2"]
    assert table["ben"][0].startswith("not done: … exercise 1.2") and table["ben"][2] == "0"
    assert table["eve"][1].startswith("timed out") and table["eve"][2] == "1"
    page = html_path.read_text(encoding="utf-8")
    assert page.count("<tr>") == 6 and "timed-out" in page and "not divided by sqrt(d_k)" in page


def test_a_folder_without_notebooks_is_refused_with_what_to_do(tmp_path, capsys):
    assert grade.main([str(tmp_path)]) == 2
    assert "subfolder named after them" in capsys.readouterr().err


# --- Before a class: the book's own solved chapter, through the same sandbox --------------------


def honest_class(folder: Path) -> Path:
    nbformat.write(chapter_1(solved=True), folder / "ada.ipynb")
    return folder


@pytest.mark.slow
def test_a_grader_that_fails_its_own_solved_chapter_grades_nobody(tmp_path, capsys, monkeypatch):
    """The sandbox made unable to import torch (an empty folder shown where torch's is): every
    honest student would get "the process ended", so nobody is graded, the exit
    status says so, and one line says what the sandbox could not reach."""
    if shutil.which("bwrap") is None:
        missing("needs bubblewrap, make grade's sandbox (make sandbox installs Debian's)")
    from tools import sandbox

    (tmp_path / "class").mkdir()
    folder = honest_class(tmp_path / "class")
    kept = sandbox.grader_files
    empty = tmp_path / "empty"
    empty.mkdir()
    torch_folder = str(Path(torch.__file__).resolve().parent)
    monkeypatch.setattr(
        sandbox, "grader_files", lambda: [*kept(), "--ro-bind", str(empty), torch_folder]
    )
    assert grade.main([str(folder)]) == 3
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "nobody was graded" in err and "the book does not load" in err and "torch" in err, err
    assert not (folder / "grades").exists()
    monkeypatch.setattr(sandbox, "grader_files", kept)
    assert grade.rehearsal() is None  # the same grader, as it is, passes its own chapter


@pytest.mark.slow
def test_a_checkout_whose_venv_links_another_checkouts_environment_grades_its_class(tmp_path):
    """As a shared class server may have it: checkout B installed the book into B/.venv in
    editable mode, and checkout A's .venv is a link to B/.venv. Graded from A, the honest student
    passes: the sandbox's worker imports A's book (the grader's), not B's folder, which the
    sandbox does not show."""
    if shutil.which("bwrap") is None:
        missing("needs bubblewrap, make grade's sandbox (make sandbox installs Debian's)")
    from checkout import copy_tracked
    from test_package import purelib_of

    other, here = copy_tracked(tmp_path / "B"), copy_tracked(tmp_path / "A")
    venv = other / ".venv"  # pip, setuptools and the rest are this environment's, seen from it
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    # This environment's packages (torch, jupytext...) seen from B's, as if installed there.
    pth = purelib_of(python) / "this-environment.pth"
    pth.write_text(sysconfig.get_paths()["purelib"] + "\n")
    install = [str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation"]
    done = subprocess.run(
        [*install, "--no-index", "-e", str(other)], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (here / ".venv").symlink_to(venv)
    which = subprocess.run(
        [str(python), "-c", "import annotated; print(annotated.__file__)"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert which.stdout.strip().startswith(str(other)), "B's environment imports B's book"
    (tmp_path / "class").mkdir()
    folder = honest_class(tmp_path / "class")
    graded = subprocess.run(
        [str(here / ".venv" / "bin" / "python"), "-m", "tools.grade", str(folder)],
        cwd=here,
        capture_output=True,
        text=True,
        timeout=900,
        env={k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}},
    )
    assert graded.returncode == 0, graded.stderr
    rows = list(csv.reader((folder / "grades" / "grades.csv").open(encoding="utf-8")))
    assert rows[1][:3] == ["ada", "pass", "pass"], rows
