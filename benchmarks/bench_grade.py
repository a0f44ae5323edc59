"""make bench-grade: what the sandbox costs `make grade`, on a class of 30 students who each hand in
chapter 1's and chapter 3's notebooks (60 notebooks: a third solved, a third not started, a third
with one exercise wrong and one cell that raises).

The same class is graded by `python -m tools.grade` without the sandbox (--no-sandbox) and with it,
one after the other in one run on one machine, and (BENCH_ARGS="--against ../start") by an earlier
checkout's grader too. Each grading is a process of its own, timed from outside; the record keeps
the seconds per notebook, the sandbox's cost per notebook (the target: under a second) and whether
every grader gave every student the same statuses. Run it alone (benchmarks/common.py).

    python -m benchmarks.bench_grade [--students 30] [--against PATH]
"""

from __future__ import annotations

import argparse
import csv
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

from benchmarks.common import Timing, describe, write_results
from tools import book, student  # the chapters' notebooks, and the student edition

ROOT = Path(__file__).resolve().parent.parent

CHAPTERS = ("ch01_attention", "ch03_training")
TARGET_SECONDS = 1.0  # the sandbox's cost per notebook


def spoiled(notebook: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The solved notebook with its first exercise's answer off by a factor and its second
    exercise's cell raising: a fail and an error."""
    answers = [
        c for c in notebook.cells if c.cell_type == "code" and "### BEGIN SOLUTION" in c.source
    ]
    first, second = answers[0], answers[1]
    first.source = first.source.replace("    return ", "    return 2 * ", 1)
    second.source = "1 / 0\n" + second.source
    return notebook


def make_class(folder: Path, students: int) -> int:
    """A subfolder per student with their two notebooks; returns how many notebooks."""
    for number in range(students):
        mine = folder / f"student{number:02d}"
        mine.mkdir(parents=True)
        for chapter in CHAPTERS:
            notebook = book.read_chapter(ROOT / "annotated" / f"{chapter}.py")
            if number % 3 == 1:
                student.strip_solutions(notebook)
            elif number % 3 == 2:
                notebook = spoiled(notebook)
            nbformat.write(notebook, mine / f"{chapter}.ipynb")
    return students * len(CHAPTERS)


def statuses(folder: Path) -> dict[str, dict[str, str]]:
    """Student -> exercise -> status, from the sheet a grading wrote."""
    rows = list(csv.reader((folder / "grades" / "grades.csv").open(encoding="utf-8")))
    header = next(row for row in rows if row[:1] == ["student"])
    sheet = {}
    for row in rows[rows.index(header) + 1 :]:
        cells = zip(header[1:-1], row[1:-1], strict=True)
        sheet[row[0]] = {e: cell.split(":")[0] for e, cell in cells if cell and e[0].isdigit()}
    return sheet


def grader_command(checkout: Path) -> list[str]:
    """How a checkout's grader starts (from that checkout's root): `python -m tools.grade`, or,
    in a checkout from before tools/ was a package, its tools/grade.py."""
    if (checkout / "tools" / "__init__.py").is_file():
        return [sys.executable, "-m", "tools.grade"]
    return [sys.executable, str(checkout / "tools" / "grade.py")]


def graded(checkout: Path, folder: Path, flags: list[str]) -> tuple[float, dict]:
    """Seconds one grading of the class by the checkout's grader took, and its statuses."""
    started = time.perf_counter()
    command = [*grader_command(checkout), str(folder), *flags]
    subprocess.run(command, cwd=checkout, check=True)
    return time.perf_counter() - started, statuses(folder)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--students", type=int, default=30)
    parser.add_argument("--against", type=Path, help="an earlier checkout whose grader to time")
    args = parser.parse_args(argv)
    graders = {"without the sandbox": (ROOT, ["--no-sandbox"]), "with the sandbox": (ROOT, [])}
    if args.against:
        graders[f"earlier grader ({args.against.name})"] = (args.against.resolve(), [])
    runs, sheets = {}, {}
    with tempfile.TemporaryDirectory() as scratch:
        notebooks = make_class(Path(scratch) / "class", args.students)
        timing = Timing(1).start()
        for name, (checkout, flags) in graders.items():
            seconds, sheets[name] = graded(checkout, Path(scratch) / "class", flags)
            runs[name] = {
                "seconds": round(seconds, 1),
                "per notebook": round(seconds / notebooks, 3),
            }
            print(name, runs[name], flush=True)
        timing.stop()
    cost = runs["with the sandbox"]["per notebook"] - runs["without the sandbox"]["per notebook"]
    first = next(iter(sheets.values()))
    record = {
        "benchmark": "make grade on a class: seconds per notebook with and without the sandbox",
        "class": f"{args.students} students x {', '.join(CHAPTERS)} ({notebooks} notebooks): "
        "a third solved, a third not started, a third with a wrong answer and a raising cell",
        "machine": describe(),
        "measured at": time.strftime("%Y-%m-%d %H:%M"),
        "timing": timing.conditions(),
        "graders": runs,
        "sandbox cost per notebook (s)": round(cost, 3),
        "target (s)": TARGET_SECONDS,
        "same statuses": all(sheet == first for sheet in sheets.values()),
        "statuses of the first three students": {s: first[s] for s in list(first)[:3]},
    }
    write_results("grade", record)
    return 0 if cost < TARGET_SECONDS and record["same statuses"] else 1


if __name__ == "__main__":
    sys.exit(main())
