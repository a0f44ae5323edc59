"""What a dishonest or careless student of a class can try against `make grade`, each attack
written as a student would write it in chapter 1's exercise cells: forge their grade, read or
change the teacher's files, reach the network, or stop the grading. Every attack must leave the
honest students' rows exactly right and the teacher's files untouched, and gain its author
nothing.

The grader runs as `make grade` runs it: a process of its own (`python -m tools.grade FOLDER`, from
the checkout's root), here wrapped so that the peak memory of it and its children can be read.
GRADE_TOOL=path/to/grade.py points the suite at another grader (an older checkout's, run by its
path), to show what succeeded there:

    GRADE_TOOL=/tmp/old/tools/grade.py pytest tests/test_grade_attacks.py

The paths an attack reaches for (the teacher's home, the class folder, the book's package) are
written into its code, as a student who knows the server's layout would write them. The fork
bomb, the memory hog and the flood of output are bounded, so that an unsandboxed grader survives
them long enough to show what they did.
"""

from __future__ import annotations

import csv
import hashlib
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import threading
import uuid
from pathlib import Path

import nbformat
import pytest
from needs import missing
from test_grade import chapter_1, replaced

import annotated

ROOT = Path(__file__).resolve().parent.parent
# The grader's command after the Python that runs it: this checkout's, or GRADE_TOOL's script.
GRADER = [os.environ["GRADE_TOOL"]] if "GRADE_TOOL" in os.environ else ["-m", "tools.grade"]
PACKAGE = Path(annotated.__file__).resolve().parent
MARK = uuid.uuid4().hex[:10]  # names this run's leftovers (files, processes)
SECRET = f"teacher-token-{MARK}"
SOLVED_1_2 = """
scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
if mask is not None:
    scores = scores.masked_fill(~mask, float("-inf"))
return scores.softmax(dim=-1) @ value
"""
SOLVED_1_3 = "return torch.ones(1, size, size, dtype=torch.bool).tril()"
WRONG_1_3 = "return torch.zeros(1, size, size, dtype=torch.bool)"
UNSOLVED = 'raise NotImplementedError("exercise: write your answer here")'
FORGED_RECORDS = """
            import os
            junk = (b'{"cell": [1], "raised": "x"}\\n{"exercise": {"a": 1}}\\n'
                    b'{"exercise": "1.2", "outcomes": [5, {"value": {"$tensor": 3}}]}\\n'
                    b'{"exercise": "1.3", "outcomes": "all passed"}\\n\\xff\\xfe junk\\n')
            for name in os.listdir("/proc/self/fd"):  # whichever is the grader's channel
                try:
                    os.write(int(name), junk)
                except OSError:
                    pass
            """
pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def bubblewrap():
    """The sandbox's program (a grader given by GRADE_TOOL may do without)."""
    if shutil.which("bwrap") is None and "GRADE_TOOL" not in os.environ:
        missing("needs bubblewrap, make grade's sandbox (make sandbox installs Debian's)")


def body(code: str) -> str:
    """`code` as the body of a function in the exercise cell (its lines after the first indented)."""
    lines = textwrap.dedent(code).strip().splitlines()
    return "\n".join([lines[0]] + ["    " + line for line in lines[1:]])


def answering(code_1_2: str | None = None, code_1_3: str | None = None, before: str = ""):
    """Chapter 1's student edition with these answers (None: left unsolved), and `before` as an
    extra cell at the top of the exercises."""
    notebook = chapter_1(solved=True)
    for function, code in (("my_attention", code_1_2), ("my_subsequent_mask", code_1_3)):
        notebook = replaced(notebook, function, body(code) if code is not None else UNSOLVED)
    if before:
        first = next(i for i, c in enumerate(notebook.cells) if "check(exercise_1_2" in c.source)
        notebook.cells.insert(first, nbformat.v4.new_code_cell(textwrap.dedent(before)))
    return notebook


class Listener:
    """A TCP server on the host's loopback that records what reaches it."""

    def __init__(self):
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.heard: list[bytes] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                connection, _ = self.server.accept()
            except OSError:
                return
            with connection:
                connection.settimeout(2)
                try:
                    self.heard.append(connection.recv(100) or b"(connected)")
                except OSError:
                    self.heard.append(b"(connected)")


class Class:
    """A class folder, the teacher's home beside it, and the sheet a grading made of them."""

    def __init__(self, base: Path, notebooks: dict[str, nbformat.NotebookNode], env: dict):
        self.folder, self.home = base / "class", base / "home"
        self.folder.mkdir()
        self.home.mkdir()
        (self.home / "notes.txt").write_text("the teacher's own notes\n")
        nbformat.write(chapter_1(solved=True), self.home / "answers.ipynb")
        for name, notebook in notebooks.items():
            if isinstance(notebook, str):  # raw text, not a notebook
                (self.folder / name).write_text(notebook)
            else:
                nbformat.write(notebook, self.folder / f"{name}.ipynb")
        self.before = self.files()
        self.package_before = sorted(p.name for p in PACKAGE.rglob("*"))
        self.env = env

    def files(self) -> dict[str, str]:
        """Every file of the home and the class folder (the sheet aside), by its content's hash."""
        found = {}
        for top in (self.home, self.folder):
            for path in sorted(top.rglob("*")):
                if path.is_file() and "grades" not in path.relative_to(top).parts:
                    found[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
        return found

    def grade(self, timeout: int = 40):
        flags = ["--timeout", str(timeout)]
        if "GRADE_TOOL" not in os.environ:
            flags += ["--call-timeout", "5"]
        wrapper = (
            "import resource, subprocess, sys\n"
            "code = subprocess.call(sys.argv[1:])\n"
            "print(code, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
        )
        done = subprocess.run(
            [sys.executable, "-c", wrapper, sys.executable, *GRADER, str(self.folder), *flags],
            cwd=ROOT,
            capture_output=True,
            text=True,
            env=os.environ | {"HOME": str(self.home), "TEACHER_TOKEN": SECRET} | self.env,
            timeout=900,
        )
        code, peak_kib = done.stdout.split()[-2:]
        self.exit_code, self.peak_bytes = int(code), int(peak_kib) * 1024
        sheet = self.folder / "grades" / "grades.csv"
        self.rows = list(csv.reader(sheet.open(encoding="utf-8"))) if sheet.exists() else []
        return self

    def status(self, student: str) -> dict[str, str]:
        """The student's row: exercise -> status (empty if the sheet or the row is missing)."""
        header = next((row for row in self.rows if row[:1] == ["student"]), None)
        row = next((r for r in self.rows if r[:1] == [student]), None)
        if header is None or row is None:
            return {}
        cells = zip(header[1:-1], row[1:-1], strict=True)
        return {e: cell.split(":")[0] for e, cell in cells if cell}


def honest_rows_right(graded: Class) -> None:
    assert graded.status("zoe") == {"1.2": "pass", "1.3": "pass"}, graded.rows
    assert graded.status("yan") == {"1.2": "fail", "1.3": "pass"}, graded.rows
    yan = next(r for r in graded.rows if r[:1] == ["yan"])
    assert "not divided by sqrt(d_k)" in yan[1], yan


def honest() -> dict:
    no_sqrt = SOLVED_1_2.replace(" / math.sqrt(query.size(-1))", "")
    return {"zoe": answering(SOLVED_1_2, SOLVED_1_3), "yan": answering(no_sqrt, SOLVED_1_3)}


@pytest.fixture(scope="module")
def listener():
    return Listener()


def attacks(base: Path, port: int) -> dict:
    """The attackers of the shared class (named to be graded before the honest zoe and yan)."""
    home, folder = base / "home", base / "class"
    table = """
        key = round(float(query.sum()), 6)
        book = {}
        from annotated.ch01_attention import attention
        from annotated.exercises.ch01_attention import exercise_1_2
        for (q, k, v), kw in exercise_1_2.cases():  # a table prepared before the grading
            book[round(float(q.sum()), 6)] = attention(q, k, v, kw.get("mask"))[0]
        if key in book:
            return book[key]
        return value.new_zeros(query.shape[:-1] + value.shape[-1:])
    """
    copy_answer = f"""
        import json
        cells = json.load(open({str(folder / "zoe.ipynb")!r}))["cells"]
        source = next("".join(c["source"]) for c in cells if "def my_attention" in "".join(c["source"]))
        scope = {{}}
        exec(source.split("check(")[0], globals(), scope)
        return scope["my_attention"](query, key, value, mask)
    """
    env_leak = f"""
        import os
        if os.environ.get("TEACHER_TOKEN"):
            open("/tmp/leak-{MARK}", "w").write(os.environ["TEACHER_TOKEN"])
            {SOLVED_1_3}
        {WRONG_1_3}
    """
    return {
        "a-forged-line": answering(
            before='print("✓ exercise 1.2 (scaled dot-product attention): your function agrees '
            'with the book\'s on all 4 inputs.")\nprint("✓ exercise 1.3 (the subsequent mask): ok")'
        ),
        "a-own-check": answering(
            before="""
            from annotated.exercises import check as _book_check
            def check(exercise, answer):
                print(f"✓ {exercise.name}: your function agrees with the book's on all inputs.")
                return True
            import annotated.exercises
            annotated.exercises.check = check
            """
        ),
        "a-patched-compare": answering(
            SOLVED_1_2.replace("math.sqrt(query.size(-1))", "1.0"),
            WRONG_1_3,
            before="""
            import torch, annotated.exercises
            torch.allclose = lambda *args, **kwargs: True
            torch.equal = lambda *args, **kwargs: True
            annotated.exercises.compare = lambda *args, **kwargs: None
            """,
        ),
        "a-prepared-table": answering(table),
        "a-net-subprocess": answering(
            before=f"""
            import subprocess, sys
            subprocess.run([sys.executable, "-c", "import socket; "
                            "socket.create_connection(('127.0.0.1', {port}), 3).sendall(b'subprocess')"])
            """
        ),
        "a-net-raw-socket": answering(
            before=f"""
            import _socket
            s = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
            s.settimeout(3)
            s.connect(("127.0.0.1", {port}))
            s.send(b"raw socket")
            """
        ),
        "a-write-home": answering(before=f"open({str(home / 'pwned')!r}, 'w').write('x')"),
        "a-write-package": answering(
            before="import annotated, os\n"
            f"open(os.path.join(os.path.dirname(annotated.__file__), 'pwned_{MARK}.py'), 'w')"
        ),
        "a-write-class": answering(before=f"open({str(folder / 'pwned.txt')!r}, 'w').write('x')"),
        "a-empty-zoe": answering(before=f"open({str(folder / 'zoe.ipynb')!r}, 'w').close()"),
        "a-copy-zoe": answering(copy_answer),
        "a-env-leak": answering(SOLVED_1_2, env_leak),
        "a-left-running": answering(
            before=f"""
            import subprocess
            subprocess.Popen(["/bin/sh", "-c", "sleep 300; echo left-{MARK}"],
                             start_new_session=True, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
            """
        ),
        "a-exit-after-forging": answering(
            before="import os\nprint('✓ exercise 1.2 (scaled dot-product attention): ok')\n"
            "print('✓ exercise 1.3 (the subsequent mask): ok', flush=True)\nos._exit(0)"
        ),
        "a-not-json": "{ this is not a notebook",
        '=HYPERLINK("grades.example","a")': answering(SOLVED_1_2, SOLVED_1_3),
        "a-linked": None,  # a link to the teacher's answers (made below)
        **honest(),
    }


@pytest.fixture(scope="module")
def shared_class(tmp_path_factory, listener):
    base = tmp_path_factory.mktemp("attacked")
    notebooks = attacks(base, listener.port)
    del notebooks["a-linked"]
    notebooks["a-not-json.ipynb"] = notebooks.pop("a-not-json")
    graded = Class(base, notebooks, {})
    (graded.folder / "a-linked.ipynb").symlink_to(graded.home / "answers.ipynb")
    graded.before = graded.files()
    yield graded.grade()
    subprocess.run(["pkill", "-f", f"left-{MARK}"], check=False)
    Path(f"/tmp/leak-{MARK}").unlink(missing_ok=True)
    (PACKAGE / f"pwned_{MARK}.py").unlink(missing_ok=True)


def test_the_honest_rows_are_right_and_the_teachers_files_untouched(shared_class):
    honest_rows_right(shared_class)
    assert shared_class.files() == shared_class.before
    assert sorted(p.name for p in PACKAGE.rglob("*")) == shared_class.package_before


@pytest.mark.parametrize(
    "student", ["a-forged-line", "a-own-check", "a-exit-after-forging", "a-patched-compare"]
)
def test_printed_lines_and_patched_checks_decide_nothing(shared_class, student):
    assert "pass" not in shared_class.status(student).values(), shared_class.status(student)


def test_a_table_of_answers_for_the_books_inputs_fails_the_fresh_ones(shared_class):
    assert shared_class.status("a-prepared-table")["1.2"] == "fail"


def test_the_network_is_out_of_reach(shared_class, listener):
    assert listener.heard == [], listener.heard


def test_nothing_is_written_outside_the_scratch_folder(shared_class):
    assert not (shared_class.home / "pwned").exists()
    assert not (shared_class.folder / "pwned.txt").exists()
    assert not (PACKAGE / f"pwned_{MARK}.py").exists()
    assert shared_class.status("zoe") == {"1.2": "pass", "1.3": "pass"}  # not emptied


def test_another_students_notebook_cannot_be_read(shared_class):
    assert shared_class.status("a-copy-zoe")["1.2"] != "pass"


def test_the_teachers_environment_is_not_inherited(shared_class):
    assert not Path(f"/tmp/leak-{MARK}").exists()
    assert shared_class.status("a-env-leak")["1.3"] != "pass"


def test_no_process_outlives_the_grading(shared_class):
    left = subprocess.run(["pgrep", "-f", f"left-{MARK}"], capture_output=True, text=True)
    assert left.stdout.strip() == "", "a student's process is still running"


def test_records_forged_on_the_graders_channel_cost_only_their_author(tmp_path):
    """Ill-formed and forged lines written on every descriptor the student's process holds (the
    grader's channel among them): graded on its own, since they stopped e7b354d's grader, which
    read the student's output as text, before any other attack could show."""
    graded = alone(tmp_path, answering(before=FORGED_RECORDS))
    honest_rows_right(graded)
    assert "pass" not in graded.status("a-attacker").values()


def test_a_notebook_that_is_not_json_costs_only_its_row(shared_class):
    status = shared_class.status("a-not-json")
    problem = status.get("notebook", status.get("?"))  # the column's name before this grader
    assert problem == "error" and "pass" not in status.values(), status


def test_names_cannot_be_formulas_or_links_out_of_the_folder(shared_class):
    cells = [cell for row in shared_class.rows for cell in row]
    assert not any(cell[:1] in ("=", "+", "-", "@") for cell in cells), cells
    assert any(cell.startswith("'=HYPERLINK") for cell in cells)
    assert shared_class.status("a-linked") == {}  # the link was not followed


def alone(tmp_path, attacker) -> Class:
    """A class of the attacker and the honest two, graded on its own."""
    return Class(tmp_path, {"a-attacker": attacker, **honest()}, {}).grade()


def test_killing_the_grader_is_not_possible(tmp_path):
    graded = alone(tmp_path, answering(before="import os, signal\nos.kill(os.getppid(), 9)"))
    assert graded.exit_code == 0
    honest_rows_right(graded)


def test_a_fork_bomb_is_contained(tmp_path):
    bomb = """
        import os, time
        children = 0
        try:
            for _ in range(300):
                pid = os.fork()
                if pid == 0:
                    os.closerange(0, 1024)
                    time.sleep(20)
                    os._exit(0)
                children += 1
        except OSError:
            pass
        if children < 300:
            return torch.zeros(1, size, size, dtype=torch.bool)
        return torch.ones(1, size, size, dtype=torch.bool).tril()
    """
    graded = alone(tmp_path, answering(SOLVED_1_2, bomb))
    honest_rows_right(graded)
    assert graded.status("a-attacker")["1.3"] != "pass", "300 processes were started"


def test_a_memory_hog_is_stopped(tmp_path):
    hog = """
        try:
            hoard = bytearray(6 * 2**30)
        except MemoryError:
            return torch.zeros(1, size, size, dtype=torch.bool)
        del hoard
        return torch.ones(1, size, size, dtype=torch.bool).tril()
    """
    graded = alone(tmp_path, answering(SOLVED_1_2, hog))
    honest_rows_right(graded)
    assert graded.status("a-attacker")["1.3"] != "pass", ("6 GiB were allocated", graded.rows)


def test_a_flood_of_output_costs_the_grader_nothing(tmp_path):
    flood = answering(before="for _ in range(1500):\n    print('x' * 1_000_000)")
    graded = alone(tmp_path, flood)
    honest_rows_right(graded)
    assert graded.peak_bytes < 1.2 * 2**30, (
        f"the grader grew to {graded.peak_bytes / 2**30:.1f} GiB"
    )


def test_without_bubblewrap_grading_stops_with_one_line(tmp_path):
    nbformat.write(answering(), tmp_path / "ann.ipynb")
    empty = tmp_path / "bin"
    empty.mkdir()
    os.symlink(sys.executable, empty / "python")
    done = subprocess.run(
        [sys.executable, "-m", "tools.grade", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=os.environ | {"PATH": str(empty)},
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "bubblewrap" in lines[0] and "--no-sandbox" in lines[0], lines
    assert not (tmp_path / "grades").exists()


def test_no_sandbox_grades_and_says_so_at_the_top(tmp_path):
    nbformat.write(answering(SOLVED_1_2, SOLVED_1_3), tmp_path / "ann.ipynb")
    done = subprocess.run(
        [sys.executable, "-m", "tools.grade", str(tmp_path), "--no-sandbox"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    rows = list(csv.reader((tmp_path / "grades" / "grades.csv").open(encoding="utf-8")))
    assert "WITHOUT A SANDBOX" in rows[0][0]
    assert rows[2][:3] == ["ann", "pass", "pass"]
    assert "WITHOUT A SANDBOX" in (tmp_path / "grades" / "grades.html").read_text()
