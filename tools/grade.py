"""A grade sheet for a class: each student's exercises run sandboxed, and judged by the grader.

    python -m tools.grade FOLDER [--out DIR] [--timeout 120] [--call-timeout 10] [--no-sandbox]

FOLDER holds the class's filled-in student notebooks (`make student` writes the edition), as
whatever collected them left them: a subfolder per student (its name is the student's, every
.ipynb inside is theirs), or notebooks side by side (each file's name is a student's). Links are
not followed, and the class folder is only read: the sheet goes to DIR (default FOLDER/grades).

For every notebook, the grader reads the code cells of its "Exercises" section and, for each
`check(exercise_N_M, my_function)` line, which function answers which exercise. A fresh Python
process in a sandbox (tools/grade_worker.py; see tools/sandbox.py) runs those cells with the
chapter's definitions imported, each cell in its own try, with the book's `check` made inert, and
then calls each function on inputs the grader sends it: the exercise's own cases and as many
drawn afresh for this grading, each call with its own time limit. It sends back only what the
functions returned, as plain data (tools/wire.py). The grader compares those values with the
book's reference in its own process (annotated.exercises.judge): pass, fail with the check's own
line (what is wrong), not done, error (the cell that defines the answer raised), or timed out.
Nothing the student's code prints counts. One student's notebook never costs another's row.

The sandbox (Linux, bubblewrap; tools/sandbox.py says what it shows and allows) keeps the
students' code from the file system, the network, the grader and each other, under limits.
Where bubblewrap cannot run, grading stops and says why; `--no-sandbox` grades anyway (the
students' code then runs with your rights) and the sheet says so at its top.

Writes DIR/grades.csv (a row per student, a column per exercise: the result, then the line; a
cell that would start a spreadsheet formula is written as text) and DIR/grades.html
(tools/sheets.py).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import secrets
import sys
import tempfile
from pathlib import Path

import torch

import annotated
from annotated.exercises import fresh_cases, judge
from tools import wire
from tools.sandbox import (
    CALL_TIMEOUT_S,
    MEMORY_BYTES,
    TIMEOUT_S,
    Limits,
    book_problem,
    run_worker,
    sandbox_problem,
)
from tools.sheets import NOTEBOOK, Result, Sheet, printable, write_sheet
from tools.wire import Status

CHECKED = re.compile(r"\bcheck\(\s*exercise_(\d+)_(\d+)\s*,\s*([A-Za-z_]\w*)")
CHAPTER = re.compile(r"from annotated\.exercises\.(ch\d\d_\w+) import")
DEFAULTS = Limits()  # tools/sandbox.py's limits, as `make grade` runs without flags


def exercise_cells(notebook: dict) -> list[str]:
    """The code of the cells after the notebook's "Exercises" heading (IPython's %magics and !shell
    lines left out: the grader runs plain Python)."""
    cells, inside = [], False
    for cell in notebook.get("cells", []):
        source = "".join(cell.get("source", ""))
        if cell.get("cell_type") == "markdown" and re.search(r"^#+\s*Exercises", source, re.M):
            inside = True
        elif inside and cell.get("cell_type") == "code":
            lines = [
                line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))
            ]
            cells.append("\n".join(lines))
    return cells


def chapters() -> set[str]:
    """The chapters that have exercises (annotated/exercises/chNN_*.py)."""
    folder = Path(annotated.__file__).parent / "exercises"
    return {path.stem for path in folder.glob("ch[0-9][0-9]_*.py")}


def plan(cells: list[str], seed: int) -> tuple[str | None, dict[str, tuple], dict[str, int]]:
    """The chapter, exercise id -> (Exercise, function name, cases), and exercise id -> the number
    of the cell whose check names it. The exercises come from the book's own modules."""
    found = CHAPTER.search("\n".join(cells))
    chapter = found[1] if found and found[1] in chapters() else None
    module = importlib.import_module(f"annotated.exercises.{chapter}") if chapter else None
    exercises, cell_of = {}, {}
    generator = torch.Generator().manual_seed(seed)
    for number, source in enumerate(cells, start=1):
        for a, b, name in CHECKED.findall(source):
            exercise = getattr(module, f"exercise_{a}_{b}", None) if module else None
            if exercise is None or f"{a}.{b}" in exercises:
                continue
            cases = exercise.cases() + fresh_cases(exercise, generator)
            exercises[f"{a}.{b}"] = (exercise, name, cases)
            cell_of[f"{a}.{b}"] = number
    return chapter, exercises, cell_of


def grade_notebook(path: Path, limits: Limits = DEFAULTS) -> dict[str, Result]:
    """Exercise id ("1.2") -> its result, for every exercise the notebook checks."""
    try:
        notebook = json.loads(read_no_follow(path))
        if not isinstance(notebook, dict):
            raise ValueError("not a notebook (its JSON is not an object)")
        cells = exercise_cells(notebook)
    except (OSError, ValueError, TypeError, AttributeError) as error:
        return {
            NOTEBOOK: Result(
                Status.ERROR, f"{path.name} is not a notebook that can be read: {error}"
            )
        }
    chapter, exercises, cell_of = plan(cells, secrets.randbits(62))
    if not exercises:
        return {NOTEBOOK: Result(Status.ERROR, f"{path.name} has no exercise checks of the book's")}
    calls = [(e, name, cases) for e, (_, name, cases) in exercises.items()]
    job = wire.job_message(chapter, cells, limits.call_timeout, calls)
    received, timed_out = run_worker(job, limits)
    records = wire.read_records(received)
    return results_from(records, exercises, cell_of, timed_out, limits.timeout)


def read_no_follow(path: Path) -> str:
    """A notebook's text; a link is refused (a student's file may point anywhere)."""
    descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(descriptor, encoding="utf-8") as handle:
        return handle.read(64 * 2**20)


def results_from(
    records: list[dict], exercises: dict, cell_of: dict[str, int], timed_out: bool, timeout: float
) -> dict[str, Result]:
    """The worker's records judged against the book's reference, on this side."""
    raised = {r["cell"]: r["raised"] for r in records if "cell" in r and r.get("raised")}
    answered = {r["exercise"]: r for r in records if "exercise" in r}
    results = {}
    for exercise_id, (exercise, name, cases) in exercises.items():
        record = answered.get(exercise_id)
        if cell_of[exercise_id] in raised:
            results[exercise_id] = Result(
                Status.ERROR, f"the cell raised {raised[cell_of[exercise_id]]}"
            )
        elif record is None:
            results[exercise_id] = (
                Result(Status.TIMED_OUT, f"stopped after {timeout:g} s")
                if timed_out
                else Result(Status.ERROR, "the notebook's process ended before this exercise ran")
            )
        elif "missing" in record:
            results[exercise_id] = Result(Status.NOT_DONE, f"no function named {name} was defined")
        else:
            results[exercise_id] = judged(exercise, cases, record.get("outcomes", []))
    return results


def judged(exercise, cases: list, outcomes: list) -> Result:
    """judge() on the outcomes the worker sent (its word read as a Status); a malformed record is
    the student's error."""
    try:
        status, line = judge(
            exercise, cases, [wire.outcome(item) for item in outcomes[: len(cases)]]
        )
    except Exception as error:  # noqa: BLE001 - what the student's process sent is untrusted
        return Result(
            Status.ERROR, f"what the notebook's process sent back could not be read ({error})"
        )
    return Result(Status(status), line)


def submissions(folder: Path) -> dict[str, list[Path]]:
    """Student -> their notebooks: a subfolder per student, or one notebook per student. Links
    (to a file or a folder) are not followed."""
    found: dict[str, list[Path]] = {}
    for entry in sorted(folder.iterdir()):
        if entry.is_symlink():
            continue
        if entry.is_dir() and entry.name != "grades":
            notebooks = []
            for parent, folders, files in os.walk(entry):  # does not enter linked folders
                folders[:] = sorted(f for f in folders if f != ".ipynb_checkpoints")
                paths = (Path(parent, name) for name in sorted(files))
                notebooks += [p for p in paths if p.suffix == ".ipynb" and not p.is_symlink()]
            if notebooks:
                found[entry.name] = notebooks
        elif entry.suffix == ".ipynb" and entry.is_file():
            found[entry.stem] = [entry]
    return found


def grade(folder: Path, limits: Limits = DEFAULTS, log=print) -> Sheet:
    sheet = {}
    for student, notebooks in submissions(folder).items():
        row: dict[str, Result] = {}
        for notebook in notebooks:
            log(f"grade: {printable(student)}: {printable(notebook.name)}")
            row |= grade_notebook(notebook, limits)
        sheet[student] = row
    return sheet


REHEARSAL = "ch01_attention"  # the solved chapter graded before any student's notebook


def rehearsal(limits: Limits = DEFAULTS) -> str | None:
    """The book's own solved chapter graded as a student's notebook is, through the same sandbox
    and limits: None when every exercise passes, else one line saying what failed, what the
    sandbox could not reach and what to do. A grader that cannot pass its own solutions would
    fail every honest student, so then nobody is graded."""
    from tools import book  # jupytext: needed here only, and only by the grader's side

    notebook = book.read_chapter(Path(annotated.__file__).resolve().parent / f"{REHEARSAL}.py")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"{REHEARSAL}.ipynb"
        path.write_text(json.dumps(notebook), encoding="utf-8")
        results = grade_notebook(path, limits)
    failed = {k: r for k, r in results.items() if r.status is not Status.PASS}
    if results and not failed:
        return None
    first = next(iter(failed.items()), (NOTEBOOK, Result(Status.ERROR, "no exercise graded")))
    where = "the sandbox" if limits.sandbox else "this machine (--no-sandbox)"
    reason = book_problem(limits)
    reached = f"; there the book does not load: {reason}" if reason else ""
    return (
        f"grade: nobody was graded: the book's own solved {REHEARSAL} fails in {where} "
        f"(exercise {first[0]}: {first[1].status.value}, {first[1].line}){reached}. "
        f"{what_to_do()}"
    )


def what_to_do() -> str:
    """Advice for a failed rehearsal: where this environment's book was installed from, if that
    is not the book the grader runs, else the usual remedies."""
    from importlib import metadata

    here = Path(annotated.__file__).resolve().parent.parent
    try:
        text = metadata.distribution("annotated-transformer-book").read_text("direct_url.json")
        url = json.loads(text or "{}").get("url", "")
    except (metadata.PackageNotFoundError, ValueError):
        url = ""
    installed = Path(url.removeprefix("file://")) if url.startswith("file://") else None
    if installed is not None and installed.resolve() != here:
        return (
            f"This environment's book is an install of {installed}, not of {here}: run make grade "
            f"from {installed}, or give {here} an environment of its own (make setup)."
        )
    return (
        "Check that make sandbox installed bubblewrap and that this Python's environment is "
        "readable by every user (make setup), then run make grade again."
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.grade", description=__doc__.splitlines()[0]
    )
    parser.add_argument("folder", type=Path, help="the class's notebooks")
    parser.add_argument("--out", type=Path, help="where grades.csv and grades.html go")
    parser.add_argument("--timeout", type=float, default=TIMEOUT_S, help="seconds per notebook")
    parser.add_argument(
        "--call-timeout", type=float, default=CALL_TIMEOUT_S, help="seconds per function call"
    )
    parser.add_argument(
        "--memory", type=float, default=MEMORY_BYTES / 2**30, help="GiB of memory per notebook"
    )
    parser.add_argument(
        "--no-sandbox",
        action="store_true",
        help="run the students' code with your rights (where no sandbox can run; the sheet says so)",
    )
    args = parser.parse_args(argv)
    if not args.folder.is_dir():
        print(f"grade: {args.folder} is not a folder of notebooks", file=sys.stderr)
        return 2
    if not submissions(args.folder):
        print(
            f"grade: no notebooks in {args.folder}: put each student's notebooks in a subfolder "
            "named after them, or one notebook per student named after them",
            file=sys.stderr,
        )
        return 2
    problem = None if args.no_sandbox else sandbox_problem()
    if problem:
        print(problem, file=sys.stderr)
        return 2
    limits = Limits(args.timeout, args.call_timeout, int(args.memory * 2**30), not args.no_sandbox)
    failed = rehearsal(limits)
    if failed:
        print(failed, file=sys.stderr)
        return 3
    sheet = grade(args.folder, limits)
    csv_path, html_path = write_sheet(sheet, args.out or args.folder / "grades", limits.sandbox)
    print(f"grade: {len(sheet)} students; wrote {csv_path} and {html_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
