"""Write the student edition of the book: the notebooks with the exercise solutions taken out.

    python -m tools.student [FOLDER]      # default: _build/student (`make student`)

A chapter's "implement" solutions sit in its notebook-only code cells between a line
`### BEGIN SOLUTION` and a line `### END SOLUTION` (nbgrader's markers). Here each such block
becomes `raise NotImplementedError(...)` at the same indentation, so the function's signature,
the exercise and its `check(...)` call stay, and the check reports "not done yet" instead of a
traceback. The answers of "predict" and "modify" exercises (`<details>` blocks in markdown) are
removed, and every output is cleared. The chapters are read from annotated/*.py, the single
source, so nothing is ever synced back from a student notebook (jupytext/jupytext#157 is how
answers leak back into paired files). FOLDER gets notebooks/ and a README.md for the teacher.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import nbformat

from tools import book  # how the chapters' notebooks are written
from tools.chapters import chapter_sources

SOLUTION = re.compile(
    r"^(?P<indent>[ \t]*)### BEGIN SOLUTION[ \t]*\n.*?^[ \t]*### END SOLUTION[ \t]*\n?",
    re.MULTILINE | re.DOTALL,
)
ANSWER = re.compile(r"\n*<details>.*?</details>[ \t]*", re.DOTALL)
STUB = '{indent}raise NotImplementedError("exercise: write your answer here")\n'

TEACHER_README = """# The Annotated Transformer, student edition

These notebooks are the book's chapters with the exercise solutions taken out: each "implement"
exercise raises `NotImplementedError` until the student writes it, and its `check(...)` cell says
what is wrong with an answer, naming the likely mistake. The answers to the "predict" and "modify"
exercises are removed too; they are in the full edition (the book's own notebooks and site).

Students need the book's code, so that `annotated.exercises` and the data loaders import: each
notebook's first cell finds it installed, or installs the release the notebook names
(`pip install annotated-transformer-book`; on a class server, install it once for everyone).
Chapters 7 and 8 train; set `ANNOTATED_PROFILE=class` for every chapter (chapter 7's 15-minute
class run, chapter 8's smoke run, chapter 9's recorded table), or `smoke` for a one-minute check.
On a shared server, prepare one data folder for everyone (`python -m annotated.base.datasets FOLDER`)
and set `ANNOTATED_DATA_DIR=FOLDER`; the course page ("One installation for a whole class") has
the rest. To see who solved what, collect the filled-in notebooks into one folder (a subfolder
per student) and run `make grade FOLDER=that-folder` in a clone of the book (the course page's
"A grade sheet for the class").
"""


def strip_solutions(notebook: nbformat.NotebookNode) -> int:
    """Replace solutions by stubs and remove answers, in place; return how many solutions went."""
    removed = 0
    for cell in notebook.cells:
        if cell.cell_type == "code":
            cell.source, count = SOLUTION.subn(
                lambda m: STUB.format(indent=m["indent"]), cell.source
            )
            removed += count
            cell.outputs, cell.execution_count = [], None
        elif cell.cell_type == "markdown":
            cell.source = ANSWER.sub("", cell.source)
    return removed


def write_edition(folder: Path) -> dict[str, int]:
    """Write every chapter's student notebook into folder/notebooks; return the solutions removed
    per chapter."""
    target = folder / "notebooks"
    target.mkdir(parents=True, exist_ok=True)
    removed = {}
    for source in chapter_sources():
        notebook = book.read_chapter(source)  # with the book's first cell, as in the full edition
        removed[source.stem] = strip_solutions(notebook)
        book._normalise(notebook, None)
        book.write_atomically(notebook, target / f"{source.stem}.ipynb")
    (folder / "README.md").write_text(TEACHER_README, encoding="utf-8")
    return removed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("folder", nargs="?", type=Path, default=book.ROOT / "_build" / "student")
    args = parser.parse_args(argv)
    removed = write_edition(args.folder)
    print(
        f"student edition: {args.folder / 'notebooks'} ({len(removed)} chapters, "
        f"{sum(removed.values())} solutions taken out)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
