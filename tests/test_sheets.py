"""The grade sheets (tools/sheets.py), written from a sheet made here: what a student's notebooks
lack is "not done", a pass shows no line, a name that would start a spreadsheet formula is text
and its control characters are shown, and a grading without the sandbox says so at the top of both
files. tests/test_grade.py writes the sheet of a class graded for real."""

from __future__ import annotations

import csv
import html
from pathlib import Path

from tools.sheets import MISSING, NO_SANDBOX_WARNING, NOTEBOOK, Result, write_sheet
from tools.wire import Status

SHEET = {
    "ada": {"1.2": Result(Status.PASS, "✓ all 4 inputs"), "1.10": Result(Status.FAIL, "✗ off")},
    "=cmd|' /C calc'!A0": {"1.2": Result(Status.TIMED_OUT, "stopped after 5 s")},
    "ben\x1b[2J": {NOTEBOOK: Result(Status.ERROR, "not one")},
}


def rows(path: Path) -> list[list[str]]:
    return list(csv.reader(path.open(encoding="utf-8")))


def test_the_sheet_has_a_column_per_exercise_and_a_cell_per_student(tmp_path):
    csv_path, html_path = write_sheet(SHEET, tmp_path / "grades")
    assert rows(csv_path) == [
        ["student", "1.2", "1.10", NOTEBOOK, "passed"],
        ["ada", "pass", "fail: ✗ off", "", "1"],
        ["'=cmd|' /C calc'!A0", "timed out: stopped after 5 s", f"not done: {MISSING}", "", "0"],
        ["ben\\x1b[2J", f"not done: {MISSING}", f"not done: {MISSING}", "error: not one", "0"],
    ]
    page = html_path.read_text(encoding="utf-8")
    assert '<td class="pass"><b>pass</b></td>' in page  # its line not shown
    assert '<td class="timed-out"><b>timed out</b><br><small>stopped after 5 s</small>' in page
    assert '<td class=""><b></b></td>' in page  # ada's notebook column: blank
    assert "<th>ben\\x1b[2J</th>" in page and 'class="warning"' not in page


def test_a_sheet_graded_without_the_sandbox_says_so_at_its_top(tmp_path):
    csv_path, html_path = write_sheet(SHEET, tmp_path, sandboxed=False)
    assert rows(csv_path)[:2] == [
        [NO_SANDBOX_WARNING],
        ["student", "1.2", "1.10", NOTEBOOK, "passed"],
    ]
    page = html_path.read_text(encoding="utf-8")
    assert page.index(html.escape(NO_SANDBOX_WARNING)) < page.index("<table>")
