"""A grade sheet for a class: each student's exercises run on their own, and one table of who solved what.

    python tools/grade.py FOLDER [--out DIR] [--timeout 120]      # make grade FOLDER=...

FOLDER holds the class's filled-in student notebooks (`make student` writes the edition), as
whatever collected them left them: a subfolder per student (its name is the student's, every
.ipynb inside is theirs), or notebooks side by side (each file's name is a student's). For every
notebook, the code cells of its "Exercises" section run in a fresh Python process, in a scratch
folder, with the chapter's own definitions imported (`from annotated.chNN_... import *`, so the
chapter's training cells do not run), the network refused and a time limit. Each `check(...)`
line the book's checker prints is the exercise's result: pass, fail (with the line: what is
wrong), not done. A cell that raises costs only the exercises it checks ("error", with the
exception); a notebook that runs past the limit is stopped, and its exercises not reported yet are
"timed out". One student's notebook never costs another's row.

Writes DIR/grades.csv (a row per student, a column per exercise: the result, then the line) and
DIR/grades.html (the same as a table to read); DIR defaults to FOLDER/grades.
"""

from __future__ import annotations

import argparse
import csv
import html
import io
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from annotated.files import atomic_write  # noqa: E402

LINE = re.compile(r"^(?P<mark>[✓✗…]) exercise (?P<id>\d+\.\d+)\b.*$", re.MULTILINE)
CHECKED = re.compile(r"\bcheck\(\s*exercise_(\d+)_(\d+)\b")
CHAPTER = re.compile(r"from annotated\.exercises\.(ch\d\d_\w+) import")
CELL_ERROR = "\x1egrade: cell {} raised "
RESULT = {"✓": "pass", "✗": "fail", "…": "not done"}
TIMEOUT_S = 120

# Runs first in the student's process: no network (a socket may not connect anywhere but this
# machine's loopback), then the chapter's definitions, then each cell on its own.
PRELUDE = """
import socket as _socket
def _refuse(*args, **kwargs):
    raise OSError("grading runs without the network")
_socket.socket.connect = _refuse
_socket.create_connection = _refuse
{chapter_import}
"""
CELL = """
try:
    exec(compile({source!r}, "cell {number}", "exec"))
except BaseException as _error:
    print({marker!r} + type(_error).__name__ + ": " + str(_error).splitlines()[0][:200]
          if str(_error) else {marker!r} + type(_error).__name__, flush=True)
"""


@dataclass
class Result:
    status: str  # pass, fail, not done, error, timed out
    line: str = ""


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


def script_for(cells: list[str]) -> str:
    """The program that runs the cells, each in its own try, after the prelude."""
    found = CHAPTER.search("\n".join(cells))
    chapter = f"from annotated.{found[1]} import *" if found else ""
    body = [PRELUDE.format(chapter_import=chapter)]
    for number, source in enumerate(cells, start=1):
        body.append(CELL.format(source=source, number=number, marker=CELL_ERROR.format(number)))
    return "\n".join(body)


def grade_notebook(path: Path, timeout: float) -> dict[str, Result]:
    """Exercise id ("1.2") -> its result, for every exercise the notebook checks."""
    try:
        cells = exercise_cells(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError) as error:
        return {"?": Result("error", f"{path.name} is not a notebook that can be read: {error}")}
    checked = {
        number: [f"{a}.{b}" for a, b in CHECKED.findall(c)] for number, c in enumerate(cells, 1)
    }
    env = os.environ | {"PYTHONIOENCODING": "utf-8", "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
    for proxy in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        env.pop(proxy, None)
    with tempfile.TemporaryDirectory() as scratch:
        try:
            done = subprocess.run(
                [sys.executable, "-u", "-c", script_for(cells)],
                cwd=scratch,
                env=env,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
            out, timed_out = done.stdout, False
        except subprocess.TimeoutExpired as expired:
            out = (
                expired.stdout.decode()
                if isinstance(expired.stdout, bytes)
                else expired.stdout or ""
            )
            timed_out = True
    return results_from(out, checked, timed_out, timeout)


def results_from(out: str, checked: dict[int, list[str]], timed_out: bool, timeout: float):
    results: dict[str, Result] = {}
    for match in LINE.finditer(out):
        results.setdefault(match["id"], Result(RESULT[match["mark"]], match[0].strip()))
    for number, ids in checked.items():
        marker = CELL_ERROR.format(number)
        # split("\n"), not splitlines(): that also splits at the marker's \x1e
        raised = [line[len(marker) :] for line in out.split("\n") if line.startswith(marker)]
        for exercise in ids:
            if exercise in results:
                continue
            if raised:
                results[exercise] = Result("error", f"the cell raised {raised[0]}")
            elif timed_out:
                results[exercise] = Result("timed out", f"stopped after {timeout:g} s")
            else:
                results[exercise] = Result("not done", "its check printed nothing")
    return results


def submissions(folder: Path) -> dict[str, list[Path]]:
    """Student -> their notebooks: a subfolder per student, or one notebook per student."""
    found: dict[str, list[Path]] = {}
    for entry in sorted(folder.iterdir()):
        if entry.is_dir() and entry.name != "grades":
            notebooks = sorted(
                p for p in entry.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts
            )
            if notebooks:
                found[entry.name] = notebooks
        elif entry.suffix == ".ipynb":
            found[entry.stem] = [entry]
    return found


def grade(folder: Path, timeout: float = TIMEOUT_S, log=print) -> dict[str, dict[str, Result]]:
    sheet = {}
    for student, notebooks in submissions(folder).items():
        row: dict[str, Result] = {}
        for notebook in notebooks:
            log(f"grade: {student}: {notebook.name}")
            row |= grade_notebook(notebook, timeout)
        sheet[student] = row
    return sheet


def _exercise_key(exercise: str) -> tuple:
    return tuple(int(part) for part in exercise.split(".")) if exercise != "?" else (999,)


def write_sheet(sheet: dict[str, dict[str, Result]], out: Path) -> tuple[Path, Path]:
    """grades.csv and grades.html in `out`; an exercise a student's notebooks lack is "not done"."""
    exercises = sorted({e for row in sheet.values() for e in row}, key=_exercise_key)
    rows = {
        student: [
            row.get(e, Result("not done", "not in the student's notebooks")) for e in exercises
        ]
        for student, row in sheet.items()
    }
    text = io.StringIO()
    writer = csv.writer(text)
    writer.writerow(["student", *exercises, "passed"])
    for student, results in rows.items():
        cells = [
            f"{r.status}: {r.line}" if r.line and r.status != "pass" else r.status for r in results
        ]
        writer.writerow([student, *cells, sum(r.status == "pass" for r in results)])
    out.mkdir(parents=True, exist_ok=True)
    with atomic_write(
        out / "grades.csv",
        "w",
        encoding="utf-8",
    ) as handle:
        handle.write(text.getvalue())
    with atomic_write(out / "grades.html", "w", encoding="utf-8") as handle:
        handle.write(_page(exercises, rows))
    return out / "grades.csv", out / "grades.html"


def _page(exercises: list[str], rows: dict[str, list[Result]]) -> str:
    head = "".join(f"<th>{html.escape(e)}</th>" for e in exercises)
    body = []
    for student, results in rows.items():
        cells = "".join(
            f'<td class="{r.status.replace(" ", "-")}"><b>{r.status}</b>'
            + (f"<br><small>{html.escape(r.line)}</small>" if r.line and r.status != "pass" else "")
            + "</td>"
            for r in results
        )
        passed = sum(r.status == "pass" for r in results)
        body.append(f"<tr><th>{html.escape(student)}</th>{cells}<td>{passed}</td></tr>")
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Exercise grades</title>
<style>
body {{ font-family: sans-serif; margin: 1rem; }}
table {{ border-collapse: collapse; }}
th, td {{ border: 1px solid #999; padding: 0.3rem 0.5rem; vertical-align: top; text-align: left; }}
td small {{ display: block; max-width: 28rem; }}
.pass {{ background: #d8f0d8; }} .fail, .error, .timed-out {{ background: #f6dcdc; }}
.not-done {{ background: #eeeeee; }}
</style></head><body>
<h1>Exercise grades</h1>
<p>Each student's exercise cells, run on their own by <code>make grade</code>: pass, fail (with the
check's line), not done, error (a cell raised) or timed out.</p>
<table><thead><tr><th>student</th>{head}<th>passed</th></tr></thead>
<tbody>{"".join(body)}</tbody></table>
</body></html>
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tools/grade.py", description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="the class's notebooks")
    parser.add_argument("--out", type=Path, help="where grades.csv and grades.html go")
    parser.add_argument("--timeout", type=float, default=TIMEOUT_S, help="seconds per notebook")
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
    sheet = grade(args.folder, args.timeout)
    csv_path, html_path = write_sheet(sheet, args.out or args.folder / "grades")
    print(f"grade: {len(sheet)} students; wrote {csv_path} and {html_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
