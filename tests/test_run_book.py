"""tools/run_book.py: tiny notebooks with saved outputs, run as the tool runs the book's chapters.

Each notebook here starts a kernel of its own (a second or two), so each test runs a few only.
"""

import json
import sys
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

# Every test here is slow-marked (notebooks executed in kernels): `make unit` leaves
# them to `make test`.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
from tools import run_book


def stdout(text):
    return new_output("stream", name="stdout", text=text)


def result(text, **more):
    return new_output("execute_result", data={"text/plain": text, **more}, execution_count=1)


def write(folder: Path, name: str, *cells) -> Path:
    """A notebook of `cells`: (source, saved outputs) for a code cell, a str for markdown."""
    notebook = new_notebook()
    for cell in cells:
        if isinstance(cell, str):
            notebook.cells.append(new_markdown_cell(cell))
        else:
            source, outputs = cell
            notebook.cells.append(new_code_cell(source, outputs=outputs))
    path = folder / name
    nbformat.write(notebook, path)
    return path


def report_of(out: Path) -> dict:
    return json.loads((out / "report.json").read_text())


def by_label(report: dict) -> dict:
    return {entry["label"]: entry for entry in report["results"]}


def test_runs_each_notebook_and_compares_its_checked_outputs(tmp_path, capsys):
    book = tmp_path / "nb"
    book.mkdir()
    write(
        book,
        "ch01_same.ipynb",
        "# A chapter whose saved outputs are what it prints",
        ("print('hello')\nprint('world')", [stdout("hello\n"), stdout("world\n")]),
        ("6 * 7", [result("42")]),
        # A drawing: its saved picture and text are another's, and neither is compared.
        (
            "from IPython.display import SVG\nSVG('<svg xmlns=\"http://www.w3.org/2000/svg\"/>')",
            [result("<an old drawing>", **{"image/svg+xml": "<svg>old</svg>"})],
        ),
        ("import sys\nprint('to stderr', file=sys.stderr)", []),  # stderr: not compared
    )
    write(
        book,
        "ch02_differs.ipynb",
        ("print('same')", [stdout("same\n")]),
        ("print('one')\nprint('hullo')", [stdout("one\nhello\n")]),
        ("'text'", [result("'text'")]),
    )
    write(
        book,
        "ch03_raises.ipynb",
        "Markdown cells are not counted among code cells.",
        ("print('before')", [stdout("before\n")]),
        "More prose.",
        ("raise ValueError('\\x1b[31mboom\\x1b[0m at last')", []),
        ("print('never runs')", [stdout("a saved output, never compared\n")]),
    )
    write(
        book,
        "ch04_ignored.ipynb",
        ("# NBVAL_IGNORE_OUTPUT\nimport random\nprint(random.random())", [stdout("0.5\n")]),
        ("# NBVAL_SKIP\nprint('skipped')", [stdout("something else\n")]),
        ("print('checked')", [stdout("checked\n")]),
    )
    write(
        book,
        "ch05_sanitized.ipynb",
        ("class Thing:\n    pass\n\nThing()", [result("<__main__.Thing at 0x7f00deadbeef>")]),
    )
    write(book, "notes.ipynb", ("raise SystemExit('not a chapter')", []))
    out = tmp_path / "out"

    code = run_book.main(["--notebooks", str(book), "--out", str(out), "--timeout", "60"])

    assert code == 1  # one notebook stopped
    report = report_of(out)
    results = by_label(report)
    assert list(results) == [
        "ch01_same",
        "ch02_differs",
        "ch03_raises",
        "ch04_ignored",
        "ch05_sanitized",
    ]
    assert report["complete"] is True
    assert report["python"] == ".".join(map(str, sys.version_info[:3]))
    assert report["machine"]["cpu_count"] >= 1
    assert {"torch", "cuda", "mps_available", "cpu"} <= set(report["machine"])
    assert report["book_version"] == run_book.book_version()

    same = results["ch01_same"]
    assert same["ran_to_end"] and same["failed_cell"] is None and same["error"] is None
    assert (same["checked"], same["differ"], same["differences"]) == (2, 0, [])
    assert same["profile"] is None and same["precision"] is None
    assert same["device"] == report["device"] and same["seconds"] > 0

    differs = results["ch02_differs"]
    assert differs["ran_to_end"] and (differs["checked"], differs["differ"]) == (3, 1)
    assert differs["differences"] == [
        {"code_cell": 2, "output": "stdout", "saved": "hello", "new": "hullo"}
    ]

    raises = results["ch03_raises"]
    assert not raises["ran_to_end"]
    assert raises["failed_cell"] == 2
    assert raises["error"] == "ValueError: boom at last"  # one line, its colours taken out
    assert (raises["checked"], raises["differ"]) == (1, 0)  # only the cell before it

    ignored = results["ch04_ignored"]
    assert ignored["ran_to_end"] and (ignored["checked"], ignored["differ"]) == (1, 0)

    sanitized = results["ch05_sanitized"]
    assert sanitized["ran_to_end"] and (sanitized["checked"], sanitized["differ"]) == (1, 0)

    # Each notebook ran in a scratch folder of its own, where its executed copy stays.
    executed = nbformat.read(out / "scratch" / "ch01_same" / "ch01_same.ipynb", as_version=4)
    assert executed.cells[1].outputs[0]["text"] == "hello\nworld\n"
    assert not (out / "scratch" / "notes").exists()

    printed = capsys.readouterr().out
    assert "stopped at code cell 2: ValueError: boom at last" in printed
    assert "checked   3, differ   1" in printed
    assert printed.count("to the end") == 5  # four table lines and the summary
    assert "4 of 5 ran to the end" in printed


ENVIRONMENT = """\
import os, sys
print(os.environ.get("ANNOTATED_PROFILE"), os.environ.get("ANNOTATED_PRECISION"))
print(os.environ.get("ANNOTATED_CHART_HTML"), os.environ.get("ANNOTATED_DATA_DIR"))
print(os.getcwd())
print(sys.executable)"""


def test_each_kernel_gets_its_profile_and_precision_and_nothing_else_changes(tmp_path, monkeypatch):
    book = tmp_path / "nb"
    book.mkdir()
    for name in ("ch01_env", "ch02_env"):
        write(book, f"{name}.ipynb", (ENVIRONMENT, []))
    monkeypatch.setenv("ANNOTATED_PROFILE", "from-the-shell")  # removed: the chapter's default
    monkeypatch.setenv("ANNOTATED_DATA_DIR", str(tmp_path / "data"))  # passes through
    monkeypatch.delenv("ANNOTATED_CHART_HTML", raising=False)
    out = tmp_path / "out"

    code = run_book.main(
        [
            "--notebooks",
            str(book),
            "--out",
            str(out),
            "--chapters",
            "ch01_env.ipynb",
            "ch02_env",
            "--profile",
            "ch01_env=smoke",
            "--precision",
            "ch01_env=fp32",
            "--extra",
            "ch02_env:tiny:bf16",
        ]
    )

    assert code == 0
    results = by_label(report_of(out))
    assert list(results) == ["ch01_env", "ch02_env", "ch02_env-tiny-bf16"]

    def printed(label):
        scratch = out / "scratch" / label
        notebook = nbformat.read(scratch / f"{results[label]['notebook']}", as_version=4)
        lines = notebook.cells[0].outputs[0]["text"].splitlines()
        assert lines[1] == f"1 {tmp_path / 'data'}"
        assert Path(lines[2]).resolve() == scratch.resolve()
        assert lines[3] == sys.executable
        return lines[0]

    assert printed("ch01_env") == "smoke fp32"
    assert printed("ch02_env") == "None None"
    assert printed("ch02_env-tiny-bf16") == "tiny bf16"
    assert (results["ch01_env"]["profile"], results["ch01_env"]["precision"]) == ("smoke", "fp32")
    assert results["ch02_env-tiny-bf16"]["notebook"] == "ch02_env.ipynb"


def test_a_hanging_cell_is_stopped_and_the_next_notebook_still_runs(tmp_path, capsys):
    book = tmp_path / "nb"
    book.mkdir()
    write(
        book,
        "ch01_hangs.ipynb",
        ("print('start')", [stdout("start\n")]),
        ("import time", []),
        ("time.sleep(120)", []),
    )
    write(book, "ch02_crashes.ipynb", ("import os\nos._exit(1)", []))
    write(book, "ch03_after.ipynb", ("print('still here')", [stdout("still here\n")]))
    out = tmp_path / "out"

    code = run_book.main(["--notebooks", str(book), "--out", str(out), "--timeout", "2"])

    assert code == 1
    results = by_label(report_of(out))
    hangs = results["ch01_hangs"]
    assert not hangs["ran_to_end"] and hangs["failed_cell"] == 3
    assert hangs["error"].startswith("CellTimeoutError: ")
    assert hangs["checked"] == 1 and hangs["seconds"] < 60
    crashes = results["ch02_crashes"]
    assert not crashes["ran_to_end"] and crashes["failed_cell"] == 1
    assert crashes["error"].startswith("DeadKernelError")
    after = results["ch03_after"]
    assert after["ran_to_end"] and (after["checked"], after["differ"]) == (1, 0)
    assert "1 of 3 ran to the end" in capsys.readouterr().out


def test_record_merges_the_report_under_its_key(tmp_path):
    book = tmp_path / "nb"
    book.mkdir()
    write(book, "ch01_one.ipynb", ("print(1)", [stdout("1\n")]))
    record = tmp_path / "record.json"
    record.write_text(json.dumps({"other": {"kept": True}, "run-book": "replaced"}))
    out = tmp_path / "out"

    code = run_book.main(
        ["--notebooks", str(book), "--out", str(out), "--record", str(record), "--key", "run-book"]
    )

    assert code == 0
    merged = json.loads(record.read_text())
    assert merged["other"] == {"kept": True}
    assert merged["run-book"] == report_of(out)
    assert merged["run-book"]["results"][0]["label"] == "ch01_one"
    assert not list(tmp_path.glob("record.json.*.tmp"))  # written atomically, nothing left over


@pytest.mark.parametrize(
    "arguments",
    [
        ["--chapters", "ch01_one", "ch09_nowhere"],
        ["--profile", "ch07_nowhere=smoke"],
        ["--precision", "ch01_one=fp8"],
        ["--extra", "ch01_one:smoke"],
        ["--record", "only-a-record.json"],
    ],
)
def test_bad_arguments_are_refused_with_exit_status_2(tmp_path, capsys, arguments):
    book = tmp_path / "nb"
    book.mkdir()
    write(book, "ch01_one.ipynb", ("print(1)", [stdout("1\n")]))
    out = tmp_path / "out"

    assert run_book.main(["--notebooks", str(book), "--out", str(out), *arguments]) == 2

    assert not out.exists()  # refused before anything ran
    error = capsys.readouterr().err
    assert "error:" in error
    if arguments[0] == "--chapters":
        assert "no such chapter notebook: ch09_nowhere" in error


def test_sanitize_patterns_and_markers_read_as_nbval_reads_them():
    patterns = run_book.sanitize_patterns(ROOT / "tests" / "nbval_sanitize.cfg")
    assert len(patterns) >= 3
    cell = new_code_cell(
        "x",
        outputs=[
            stdout("<object at 0x7fab12>\n100%|##| 5/5 [00:01<00:00, 4.2it/s]\n"),
            stdout("loading\rloaded\n"),
            stdout("a word, then 12\x08\x083 words\n"),
        ],
    )
    assert run_book.checked_outputs(cell, patterns) == [
        (
            "stdout",
            "<object at 0xADDRESS>\n100%|##| 5/5 [TIME]\nloaded\na word, then 3 words\n",
        )
    ]
    assert run_book.markers("\n# NBVAL_IGNORE_OUTPUT\n# more\nx = 1") == {"NBVAL_IGNORE_OUTPUT"}
    assert run_book.markers("x = 1\n# NBVAL_SKIP") == set()


def test_the_cpu_is_named_where_proc_cpuinfo_has_no_model_name(monkeypatch):
    """On Linux on ARM /proc/cpuinfo names no model: lscpu's "Model name" names it, and without
    lscpu the platform's processor or architecture does; a named model is kept as it is."""
    import types

    listing = "Architecture:  aarch64\nVendor ID:     ARM\nModel name:    Neoverse-V2\n"
    monkeypatch.setattr(
        run_book.subprocess, "run", lambda *a, **k: types.SimpleNamespace(stdout=listing)
    )
    assert run_book._cpu_model("unknown") == "Neoverse-V2"
    assert run_book._cpu_model("AMD EPYC") == "AMD EPYC"

    def no_lscpu(*a, **k):
        raise FileNotFoundError("lscpu")

    monkeypatch.setattr(run_book.subprocess, "run", no_lscpu)
    monkeypatch.setattr(run_book.platform, "processor", lambda: "")
    monkeypatch.setattr(run_book.platform, "machine", lambda: "arm64")
    assert run_book._cpu_model("unknown") == "arm64"
