"""A grade sheet for a class: each student's exercises run sandboxed, and judged by the grader.

    python -m tools.grade FOLDER [--out DIR] [--timeout 120] [--call-timeout 10] [--no-sandbox]

FOLDER holds the class's filled-in student notebooks (`make student` writes the edition), as
whatever collected them left them: a subfolder per student (its name is the student's, every
.ipynb inside is theirs), or notebooks side by side (each file's name is a student's). Links are
not followed, and the class folder is only read: the sheet goes to DIR (default FOLDER/grades).

For every notebook, the grader reads the code cells of its "Exercises" section and, for each
`check(exercise_N_M, my_function)` line, which function answers which exercise. A fresh Python
process in a sandbox (tools/grade_worker.py; see `sandbox_command`) runs those cells with the
chapter's definitions imported, each cell in its own try, with the book's `check` made inert, and
then calls each function on inputs the grader sends it: the exercise's own cases and as many
drawn afresh for this grading, each call with its own time limit. It sends back only what the
functions returned, as plain data. The grader compares those values with the book's reference in
its own process (annotated.exercises.judge): pass, fail with the check's own line (what is wrong),
not done, error (the cell that defines the answer raised), or timed out. Nothing the student's
code prints counts. One student's notebook never costs another's row.

The sandbox (Linux, bubblewrap): the system, the Python environment and the book's package
read-only, one private writable scratch folder, nothing else of the file system (no home, no class
folder, no runs/); a user who is not root and holds no capabilities; its own network (nothing
reachable, the host's loopback included), process and IPC namespaces; an environment of a few
fixed variables; limits on memory, processes, CPU time, file size and what it may send back; every
process it started ends with it. Where bubblewrap cannot run, grading stops and says why;
`--no-sandbox` grades anyway (the students' code then runs with your rights) and the sheet says so
at its top.

Writes DIR/grades.csv (a row per student, a column per exercise: the result, then the line; a
cell that would start a spreadsheet formula is written as text) and DIR/grades.html.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import html
import importlib
import io
import json
import os
import platform
import re
import resource
import secrets
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

import annotated
from annotated.base.files import atomic_write
from annotated.exercises import Raised, Returned, TimedOut, fresh_cases, judge
from tools import grade_worker

TOOLS = Path(__file__).resolve().parent

CHECKED = re.compile(r"\bcheck\(\s*exercise_(\d+)_(\d+)\s*,\s*([A-Za-z_]\w*)")
CHAPTER = re.compile(r"from annotated\.exercises\.(ch\d\d_\w+) import")
TIMEOUT_S = 120  # a notebook: its cells and all its calls
CALL_TIMEOUT_S = 10  # one call of a student's function on one input
MEMORY_BYTES = 4 * 2**30  # address space (torch alone reserves about 0.7 GiB)
PROCESSES = 64  # processes and threads the sandbox may start
FILE_BYTES = 64 * 2**20  # the largest file it may write in its scratch folder
SENT_BYTES = 64 * 2**20  # what it may send back
NOBODY = 65534  # the user a root-run grader drops the students' code to
DONE = b'{"done": true}\n'  # the worker's last line: what lingers after it is not waited for
MISSING = "not in the student's notebooks"
NOTEBOOK = "notebook"  # the sheet's column for a notebook that could not be graded at all
NO_SANDBOX_WARNING = (
    "GRADED WITHOUT A SANDBOX (--no-sandbox): the students' code ran with the grader's rights, "
    "and could have changed files, this sheet's inputs or the network."
)


@dataclass
class Result:
    status: str  # pass, fail, not done, error, timed out
    line: str = ""


@dataclass(frozen=True)
class Limits:
    timeout: float = TIMEOUT_S
    call_timeout: float = CALL_TIMEOUT_S
    memory: int = MEMORY_BYTES
    sandbox: bool = True


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


def grade_notebook(path: Path, limits: Limits = Limits()) -> dict[str, Result]:
    """Exercise id ("1.2") -> its result, for every exercise the notebook checks."""
    try:
        notebook = json.loads(read_no_follow(path))
        if not isinstance(notebook, dict):
            raise ValueError("not a notebook (its JSON is not an object)")
        cells = exercise_cells(notebook)
    except (OSError, ValueError, TypeError, AttributeError) as error:
        return {
            NOTEBOOK: Result("error", f"{path.name} is not a notebook that can be read: {error}")
        }
    chapter, exercises, cell_of = plan(cells, secrets.randbits(62))
    if not exercises:
        return {NOTEBOOK: Result("error", f"{path.name} has no exercise checks of the book's")}
    job = {
        "chapter": chapter,
        "cells": cells,
        "call_timeout": limits.call_timeout,
        "calls": [
            {"id": e, "name": name, "cases": grade_worker.encode(cases)}
            for e, (_, name, cases) in exercises.items()
        ],
    }
    records, timed_out = run_worker(job, limits)
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
                "error", f"the cell raised {raised[cell_of[exercise_id]]}"
            )
        elif record is None:
            results[exercise_id] = (
                Result("timed out", f"stopped after {timeout:g} s")
                if timed_out
                else Result("error", "the notebook's process ended before this exercise ran")
            )
        elif "missing" in record:
            results[exercise_id] = Result("not done", f"no function named {name} was defined")
        else:
            results[exercise_id] = Result(*judged(exercise, cases, record.get("outcomes", [])))
    return results


def judged(exercise, cases: list, outcomes: list) -> tuple[str, str]:
    """judge() on the outcomes the worker sent; a malformed record is the student's error."""
    try:
        return judge(exercise, cases, [outcome(item) for item in outcomes[: len(cases)]])
    except Exception as error:  # noqa: BLE001 - what the student's process sent is untrusted
        return "error", f"what the notebook's process sent back could not be read ({error})"


def outcome(item: dict):
    """One call's record as annotated.exercises' Returned, Raised or TimedOut."""
    if not isinstance(item, dict):
        raise ValueError("an outcome that is not a record")
    if "value" in item:
        return Returned(grade_worker.decode(item["value"]))
    if "raised" in item:
        kind, message = item["raised"]
        return Raised(str(kind)[:80], str(message)[:200])
    if "timed_out" in item:
        return TimedOut(float(item["timed_out"]))
    raise ValueError("an outcome of no known kind")


def run_worker(job: dict, limits: Limits) -> tuple[list[dict], bool]:
    """Runs tools/grade_worker.py on the job (sandboxed unless limits.sandbox is False): the
    records it sent back, and whether it ran past limits.timeout."""
    with tempfile.TemporaryDirectory(prefix="grade-") as scratch:
        if os.geteuid() == 0 and limits.sandbox:
            os.chown(scratch, NOBODY, NOBODY)
        read_end, write_end = os.pipe()
        command = (
            sandbox_command(Path(scratch))
            if limits.sandbox
            else [sys.executable, "-I", "-u", str(TOOLS / "grade_worker.py")]
        ) + [str(write_end)]
        process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=scratch,
            env=worker_environment(scratch),
            pass_fds=(write_end,),
            start_new_session=True,
            preexec_fn=_limiter(limits),
        )
        os.close(write_end)
        records, timed_out = [], True
        try:
            records, timed_out = _collect(
                process, json.dumps(job).encode(), read_end, limits.timeout
            )
        finally:
            _end(process, grace=0 if timed_out else 5)
        return records, timed_out


def _collect(process, job: bytes, read_end: int, timeout: float) -> tuple[list[dict], bool]:
    """Sends the job, then reads the worker's lines until it ends, its time is up, or it has sent
    SENT_BYTES; never waits longer than `timeout` in all."""
    deadline = time.monotonic() + timeout
    try:
        process.stdin.write(job)
        process.stdin.close()
    except OSError:  # it ended before reading its job
        pass
    received, timed_out = bytearray(), False
    os.set_blocking(read_end, False)
    with os.fdopen(read_end, "rb", buffering=0) as channel:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            ready = _wait_readable(channel, min(left, 0.5))
            chunk = channel.read(1 << 16) if ready else None
            if chunk == b"":  # every writer has closed it: the worker ended
                break
            if chunk:
                received += chunk
                if len(received) > SENT_BYTES or received.endswith(DONE):
                    break
    return _records(bytes(received)), timed_out


def _wait_readable(channel, seconds: float) -> bool:
    return bool(select.select([channel], [], [], seconds)[0])


def _records(data: bytes) -> list[dict]:
    """The JSON lines the worker sent, those of a shape the grader reads: the student's code can
    write on the same channel, so a line that is not JSON or not of a known shape is skipped."""
    records = []
    for line in data.split(b"\n"):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if _known_shape(record):
            records.append(record)
    return records


def _known_shape(record) -> bool:
    if not isinstance(record, dict):
        return False
    if "cell" in record:
        return type(record["cell"]) is int and isinstance(record.get("raised"), str | None)
    if "exercise" in record:
        return isinstance(record["exercise"], str) and (
            isinstance(record.get("outcomes"), list) or isinstance(record.get("missing"), str)
        )
    return record == {"done": True}


def _end(process: subprocess.Popen, grace: float) -> None:
    """The worker's whole session gone: `grace` seconds to end by itself (it exits right after
    its last line, and so its CPU time is counted as the grader's children's), then killed (the
    sandbox's namespace takes everything it started with it)."""
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=grace)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _limiter(limits: Limits):
    """What runs in the child before the worker (or the sandbox) starts: the limits."""
    processes = _tasks_of(NOBODY if os.geteuid() == 0 and limits.sandbox else os.getuid())
    cpu = int(limits.timeout) + 5

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limits.memory, limits.memory))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
        resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_BYTES, FILE_BYTES))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_NPROC, (processes + PROCESSES,) * 2)

    return limit


def _tasks_of(uid: int) -> int:
    """How many processes and threads `uid` runs now (RLIMIT_NPROC counts them all)."""
    count = 0
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            text = status.read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        if fields.get("Uid", "").split()[:1] == [str(uid)]:
            count += int(fields.get("Threads", "1").strip() or 1)
    return count


def worker_environment(scratch: str) -> dict[str, str]:
    """The few variables the students' process gets: none of the grader's own."""
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": scratch,
        "TMPDIR": scratch,
        "LANG": "C.UTF-8",
        "PYTHONIOENCODING": "utf-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "MPLBACKEND": "Agg",
        "MPLCONFIGDIR": scratch,
    }


def readable_roots() -> list[Path]:
    """What the sandbox shows read-only besides the system: the Python environment (its prefixes
    and every site-packages on sys.path) and the book's package. Never the checkout's root, the
    home folder or a class folder."""
    roots = {Path(sys.prefix), Path(sys.base_prefix), Path(sys.exec_prefix)}
    roots.add(Path(os.path.realpath(sys.executable)).parent.parent)
    roots.update(
        Path(entry) for entry in sys.path if entry.endswith(("site-packages", "dist-packages"))
    )
    roots.add(Path(annotated.__file__).resolve().parent)
    system = [Path(p) for p in ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")]
    kept = sorted(
        root.resolve()
        for root in roots
        if root.is_dir() and not any(root.resolve().is_relative_to(s) for s in system)
    )
    return [root for root in kept if not any(root != o and root.is_relative_to(o) for o in kept)]


def environment_python() -> str:
    """This Python by its environment's real folder. The sandbox binds `readable_roots()`
    resolved, so a path through a link (`.venv` a link to another folder) does not exist inside
    it; the file's own link (bin/python) is kept, for Python to find its environment beside it."""
    executable = Path(sys.executable)
    return str(executable.parent.resolve() / executable.name)


def sandbox_command(scratch: Path) -> list[str]:
    """bubblewrap around the worker (see the module docstring for what it shows and allows)."""
    command = ["bwrap", "--die-with-parent", "--new-session", "--as-pid-1", "--unshare-pid"]
    command += ["--unshare-net"]
    command += ["--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try", "--clearenv"]
    for name, value in worker_environment("/scratch").items():
        command += ["--setenv", name, value]
    command += ["--ro-bind", "/usr", "/usr", "--proc", "/proc", "--dev", "/dev"]
    for top in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        path = Path("/", top)
        if path.is_symlink():
            command += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            command += ["--ro-bind", str(path), str(path)]
    made = set()
    for root in readable_roots():
        for parent in reversed(root.parents[:-1]):  # folders the sandbox must be able to enter
            if parent not in made:
                made.add(parent)
                command += ["--perms", "0755", "--dir", str(parent)]
        command += ["--ro-bind", str(root), str(root)]
    command += ["--perms", "0755", "--dir", "/grader"]
    command += ["--ro-bind", str(TOOLS / "grade_worker.py"), "/grader/grade_worker.py"]
    command += ["--bind", str(scratch), "/scratch", "--chdir", "/scratch"]
    python = [environment_python(), "-I", "-u", "/grader/grade_worker.py"]
    if os.geteuid() == 0:  # root: no user namespace, and the code runs as nobody
        drop = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
        drop += ["--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"]
        return command + ["--", *drop, *python]
    return command + ["--unshare-user", "--cap-drop", "ALL", "--", *python]


def sandbox_problem() -> str | None:
    """Why no sandbox can run here, with what to do; None when it can."""
    if platform.system() != "Linux":
        return (
            f"grade: no sandbox on {platform.system()} (bubblewrap needs Linux): grade on a Linux "
            "machine, or pass --no-sandbox to run the students' code with your rights"
        )
    missing = [tool for tool in ("bwrap", "setpriv") if shutil.which(tool) is None]
    if os.geteuid() != 0 and "setpriv" in missing:
        missing.remove("setpriv")
    if missing:
        return (
            f"grade: {' and '.join(missing)} not found: install Debian's bubblewrap "
            "(`sudo apt-get install bubblewrap`; make grade does it when run as root), or pass "
            "--no-sandbox to run the students' code with your rights"
        )
    with tempfile.TemporaryDirectory() as scratch:
        if os.geteuid() == 0:
            os.chown(scratch, NOBODY, NOBODY)
        probe = sandbox_command(Path(scratch))[:-3] + ["-c", "pass"]
        done = subprocess.run(probe, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        reason = (done.stderr.strip().splitlines() or ["no message"])[-1]
        return (
            f"grade: bubblewrap cannot make its sandbox here ({reason}): this kernel or container "
            "may forbid user namespaces; grade on a machine that allows them, or pass "
            "--no-sandbox to run the students' code with your rights"
        )
    return None


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


def grade(folder: Path, limits: Limits = Limits(), log=print) -> dict[str, dict[str, Result]]:
    sheet = {}
    for student, notebooks in submissions(folder).items():
        row: dict[str, Result] = {}
        for notebook in notebooks:
            log(f"grade: {printable(student)}: {printable(notebook.name)}")
            row |= grade_notebook(notebook, limits)
        sheet[student] = row
    return sheet


def printable(text: str) -> str:
    """A name from the class folder, its control characters (a newline, an escape) made visible."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def as_text(cell: str) -> str:
    """A spreadsheet cell that cannot start a formula: = + - @ (and tab, carriage return) get a
    leading apostrophe, which spreadsheets read as "this is text"."""
    return "'" + cell if cell[:1] in ("=", "+", "-", "@", "\t", "\r") else cell


def _exercise_key(exercise: str) -> tuple:
    return tuple(int(part) for part in exercise.split(".")) if exercise != NOTEBOOK else (999,)


def write_sheet(
    sheet: dict[str, dict[str, Result]], out: Path, sandboxed: bool = True
) -> tuple[Path, Path]:
    """grades.csv and grades.html in `out`; an exercise a student's notebooks lack is "not done".
    Without the sandbox, both say so at their top."""
    exercises = sorted({e for row in sheet.values() for e in row}, key=_exercise_key)
    rows = {
        printable(student): [
            row.get(e, Result("", "") if e == NOTEBOOK else Result("not done", MISSING))
            for e in exercises
        ]
        for student, row in sheet.items()
    }
    text = io.StringIO()
    writer = csv.writer(text)
    if not sandboxed:
        writer.writerow([NO_SANDBOX_WARNING])
    writer.writerow(["student", *exercises, "passed"])
    for student, results in rows.items():
        cells = [
            f"{r.status}: {r.line}" if r.line and r.status != "pass" else r.status for r in results
        ]
        passed = sum(r.status == "pass" for r in results)
        writer.writerow([as_text(cell) for cell in (student, *cells)] + [passed])
    out.mkdir(parents=True, exist_ok=True)
    with atomic_write(out / "grades.csv", "w", encoding="utf-8") as handle:
        handle.write(text.getvalue())
    with atomic_write(out / "grades.html", "w", encoding="utf-8") as handle:
        handle.write(_page(exercises, rows, sandboxed))
    return out / "grades.csv", out / "grades.html"


def _page(exercises: list[str], rows: dict[str, list[Result]], sandboxed: bool) -> str:
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
    sheet = grade(args.folder, limits)
    csv_path, html_path = write_sheet(sheet, args.out or args.folder / "grades", limits.sandbox)
    print(f"grade: {len(sheet)} students; wrote {csv_path} and {html_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
