"""The grade sheets `make grade` writes: grades.csv (a row per student, a column per exercise: the
result, then the line; a cell that would start a spreadsheet formula is written as text) and
grades.html, the same table for a browser. A sheet is student -> exercise id -> `Result`; the
names in it come from the class folder, and are shown with their control characters visible.
"""

from __future__ import annotations

import csv
import html
import io
from dataclasses import dataclass
from pathlib import Path

from annotated.base.files import atomic_write
from tools.wire import Status

MISSING = "not in the student's notebooks"
NOTEBOOK = "notebook"  # the sheet's column for a notebook that could not be graded at all
NO_SANDBOX_WARNING = (
    "GRADED WITHOUT A SANDBOX (--no-sandbox): the students' code ran with the grader's rights, "
    "and could have changed files, this sheet's inputs or the network."
)


@dataclass
class Result:
    """One exercise of one student, as the sheet shows it: the status, and the line that says
    why (not shown for a pass)."""

    status: Status
    line: str = ""


Sheet = dict[str, dict[str, Result]]  # student -> exercise id ("1.2", or NOTEBOOK) -> result


def printable(text: str) -> str:
    """A name from the class folder, its control characters (a newline, an escape) made visible."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def as_text(cell: str) -> str:
    """A spreadsheet cell that cannot start a formula: = + - @ (and tab, carriage return) get a
    leading apostrophe, which spreadsheets read as "this is text"."""
    return "'" + cell if cell[:1] in ("=", "+", "-", "@", "\t", "\r") else cell


def _exercise_key(exercise: str) -> tuple:
    return tuple(int(part) for part in exercise.split(".")) if exercise != NOTEBOOK else (999,)


def write_sheet(sheet: Sheet, out: Path, sandboxed: bool = True) -> tuple[Path, Path]:
    """grades.csv and grades.html in `out`; an exercise a student's notebooks lack is "not done"
    (a notebook column another student has is left blank). Without the sandbox, both say so at
    their top."""
    exercises = sorted({e for row in sheet.values() for e in row}, key=_exercise_key)
    rows = {
        printable(student): [
            row.get(e, None if e == NOTEBOOK else Result(Status.NOT_DONE, MISSING))
            for e in exercises
        ]
        for student, row in sheet.items()
    }
    out.mkdir(parents=True, exist_ok=True)
    with atomic_write(out / "grades.csv", "w", encoding="utf-8") as handle:
        handle.write(_table(exercises, rows, sandboxed))
    with atomic_write(out / "grades.html", "w", encoding="utf-8") as handle:
        handle.write(_page(exercises, rows, sandboxed))
    return out / "grades.csv", out / "grades.html"


def _status(result: Result | None) -> str:
    """The status as the sheet writes it; a blank cell's is empty."""
    return "" if result is None else result.status.value


def _why(result: Result | None) -> str:
    """The line shown after the status: none for a pass or a blank cell."""
    return result.line if result is not None and result.status is not Status.PASS else ""


def _passed(results: list[Result | None]) -> int:
    return sum(r is not None and r.status is Status.PASS for r in results)


def _table(exercises: list[str], rows: dict[str, list[Result | None]], sandboxed: bool) -> str:
    text = io.StringIO()
    writer = csv.writer(text)
    if not sandboxed:
        writer.writerow([NO_SANDBOX_WARNING])
    writer.writerow(["student", *exercises, "passed"])
    for student, results in rows.items():
        cells = [f"{_status(r)}: {_why(r)}" if _why(r) else _status(r) for r in results]
        writer.writerow([as_text(cell) for cell in (student, *cells)] + [_passed(results)])
    return text.getvalue()


def _page(exercises: list[str], rows: dict[str, list[Result | None]], sandboxed: bool) -> str:
    head = "".join(f"<th>{html.escape(e)}</th>" for e in exercises)
    body = []
    for student, results in rows.items():
        cells = "".join(
            f'<td class="{_status(r).replace(" ", "-")}"><b>{_status(r)}</b>'
            + (f"<br><small>{html.escape(_why(r))}</small>" if _why(r) else "")
            + "</td>"
            for r in results
        )
        body.append(f"<tr><th>{html.escape(student)}</th>{cells}<td>{_passed(results)}</td></tr>")
    warning = "" if sandboxed else f'<p class="warning">{html.escape(NO_SANDBOX_WARNING)}</p>'
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Exercise grades</title>
<style>
body {{ font-family: sans-serif; margin: 1rem; }}
table {{ border-collapse: collapse; }}
th, td {{ border: 1px solid #999; padding: 0.3rem 0.5rem; vertical-align: top; text-align: left; }}
td small {{ display: block; max-width: 28rem; }}
.pass {{ background: #d8f0d8; }} .fail, .error, .timed-out {{ background: #f6dcdc; }}
.not-done {{ background: #eeeeee; }}
.warning {{ background: #f6dcdc; border: 2px solid #a00; padding: 0.5rem; font-weight: bold; }}
</style></head><body>
<h1>Exercise grades</h1>{warning}
<p>Each student's exercise cells, run in a sandbox by <code>make grade</code>, their functions
called on the book's inputs and fresh ones, and the values judged against the book's: pass, fail
(with what is wrong), not done, error (a cell raised) or timed out.</p>
<table><thead><tr><th>student</th>{head}<th>passed</th></tr></thead>
<tbody>{"".join(body)}</tbody></table>
</body></html>
"""
