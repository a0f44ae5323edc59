"""Run the whole book where it stands: every chapter notebook, executed afresh, compared with its
saved outputs, on whatever device this machine has.

`python -m tools.book execute` rewrites the notebooks; this tool never touches them. It copies
each chapter's notebook (notebooks/chNN_*.ipynb, in order) into an empty scratch folder of its own,
`<out>/scratch/<label>/`, executes it there with nbclient in a fresh kernel of the Python that runs
this tool (so the notebook's first cell finds the *installed* book, not the checkout's files), and
reports for each notebook:

* whether it ran to the end, or the first code cell that failed (numbered among the code cells
  from 1), with the error's name and message;
* how many seconds it took;
* how many checked outputs it compared with the saved notebook, and how many differ. A checked
  output is what nbval compares, narrowed to text: a code cell's stdout (its streams joined) and
  the text/plain of each execute_result or display_data, after tests/nbval_sanitize.cfg's
  replacements on both sides. Cells marked `# NBVAL_IGNORE_OUTPUT`, `# NBVAL_SKIP` or
  `# NBVAL_RAISES_EXCEPTION` are not compared, nor are charts and drawings (outputs that carry an
  image, SVG or a Vega chart), HTML without text, or stderr. A notebook that stopped is compared
  up to the cell before the one that failed.

A table line is printed as each notebook ends, then "N of M ran to the end"; `<out>/report.json`
(default `_build/run-book/report.json`) is rewritten after every notebook, so a run that is
stopped keeps what finished. The exit status is 0 when every notebook ran to the end, 1 otherwise,
2 for bad arguments.

    python -m tools.run_book                                   # every chapter
    python -m tools.run_book --chapters ch00_preface ch01_attention --out /tmp/rb
    python -m tools.run_book --profile ch07_multi30k=smoke --precision ch07_multi30k=bf16
    python -m tools.run_book --extra ch07_multi30k:smoke:fp32  # one more run, another label
    python -m tools.run_book --record benchmarks/results/gpu.json --key run-book

Each kernel's environment is this process's, with the charts' HTML form switched on (as
`python -m tools.book execute` runs the book, so that outputs compare) and with ANNOTATED_PROFILE
and ANNOTATED_PRECISION set to the run's (`--profile`, `--precision`, `--extra`) or removed, which
leaves the chapter's own default; everything else (ANNOTATED_DATA_DIR, ANNOTATED_DEVICE, ...)
passes through. By default chapter 8 runs its smoke profile, and on a CUDA machine chapter 7 runs
a second time as `ch07_multi30k-smoke-fp16` (float16, what a GPU without bfloat16 computes in).

On a GPU machine with no internet, the packages come as wheels, the book from its own wheel and
the data from a folder:

1. Where there is internet: `python -m build --wheel` (the book's wheel, in dist/), then
   `pip download -d wheels -c constraints.txt "$(ls dist/*.whl)[dev]" --extra-index-url
   https://download.pytorch.org/whl/cu128` (torch's CUDA build among them; add `--platform`,
   `--python-version` and `--only-binary=:all:` when the GPU machine's differ from this one's).
   `make class-data FOLDER=data-for-gpu` gathers Multi30k (chapter 8's sample is in the wheel).
2. Copy the checkout, wheels/, dist/ and the data folder to the GPU machine.
3. There: `python -m venv .venv && .venv/bin/pip install --no-index --find-links wheels
   "$(ls dist/*.whl)[dev]"` (not an editable install: the notebooks must find the book's wheel).
4. From the checkout: `ANNOTATED_DATA_DIR=$PWD/data-for-gpu .venv/bin/python -m tools.run_book`
   (or `make run-book RUN_BOOK_ARGS="--out /tmp/run-book"`); report.json names the GPU, the
   device the book chose, the book's version and the folder the kernels found it in
   (`book_path`: the wheel's, since `-m` puts the checkout on this tool's path, not theirs).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib.metadata
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import nbformat

from annotated.base.devices import PRECISION_ENV, PRECISIONS
from annotated.base.files import atomic_write
from annotated.base.machine import cpu_kind
from annotated.figures import HTML_ENV
from annotated.training.config import PROFILE_ENV
from benchmarks.common import read_json_object  # a record of benchmarks/results/ (--record)
from tools.book import CELL_TIMEOUT_S, as_printed, notebook_client
from tools.chapters import NOTEBOOK_PATTERN, NOTEBOOKS, cell_text, chapter_notebooks

TOOLS = Path(__file__).resolve().parent

CHECKOUT = TOOLS.parent
SANITIZE = CHECKOUT / "tests" / "nbval_sanitize.cfg"
DISTRIBUTION = "annotated-transformer-book"
DEFAULT_PROFILES = {"ch08_wmt": "smoke"}  # the WMT sample run takes 20 minutes on 2 CPU cores
CUDA_EXTRAS = ("ch07_multi30k:smoke:fp16",)  # added when torch sees a CUDA GPU
MARKERS = ("NBVAL_IGNORE_OUTPUT", "NBVAL_SKIP", "NBVAL_RAISES_EXCEPTION")
PICTURES = ("image/", "vega")  # a MIME type that starts with or holds one is a chart or drawing
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
EXCERPT = 200  # characters of a differing line kept in the report
MESSAGE = 300  # characters of an error message kept


@dataclass(frozen=True)
class Run:
    """One execution of one notebook: its label, and the profile and precision it runs under
    (None: the chapter's default, the variable removed from the kernel's environment)."""

    label: str
    notebook: Path
    profile: str | None
    precision: str | None


# --- the saved and the new outputs ------------------------------------------------------------


def sanitize_patterns(path: Path) -> list[tuple[re.Pattern, str]]:
    """The (regex, replacement) pairs of an nbval sanitize file: in each section a `regex:` line
    and the `replace:` line after it."""
    pairs: list[tuple[re.Pattern, str]] = []
    pending: str | None = None
    for line in path.read_text(encoding="utf-8").splitlines():
        key, colon, value = line.partition(":")
        if not colon or key not in ("regex", "replace"):
            continue
        value = value[1:] if value.startswith(" ") else value
        if key == "regex":
            pending = value
        elif pending is not None:
            pairs.append((re.compile(pending), value))
            pending = None
    return pairs


def markers(source: str) -> set[str]:
    """The nbval markers in a cell's leading comment lines."""
    found = set()
    for line in source.splitlines():
        line = line.strip()
        if not line:
            continue
        if not line.startswith("#"):
            break
        found.update(marker for marker in MARKERS if marker in line)
    return found


def checked_outputs(cell, patterns: list[tuple[re.Pattern, str]]) -> list[tuple[str, str]]:
    """A code cell's checked outputs as (kind, sanitized text): its stdout, all of it, first, then
    the text/plain of each result or display that is not a chart or drawing."""
    items = []
    stdout = "".join(
        cell_text(output.get("text", ""))
        for output in cell.get("outputs", [])
        if output.get("output_type") == "stream" and output.get("name") == "stdout"
    )
    if stdout:
        items.append(("stdout", as_printed(stdout)))
    for output in cell.get("outputs", []):
        if output.get("output_type") not in ("execute_result", "display_data"):
            continue
        data = output.get("data", {})
        picture = any(kind in mime for mime in data for kind in PICTURES)
        if "text/plain" in data and not picture:
            items.append(("text/plain", cell_text(data["text/plain"])))
    sanitized = []
    for kind, text in items:
        for pattern, replacement in patterns:
            text = pattern.sub(replacement, text)
        sanitized.append((kind, text))
    return sanitized


def _first_difference(saved: str, new: str) -> tuple[str, str]:
    """The first line where two texts differ, from each (at most EXCERPT characters)."""
    saved_lines, new_lines = saved.splitlines(), new.splitlines()
    for index in range(max(len(saved_lines), len(new_lines))):
        old = saved_lines[index] if index < len(saved_lines) else ""
        fresh = new_lines[index] if index < len(new_lines) else ""
        if old != fresh:
            return old[:EXCERPT], fresh[:EXCERPT]
    return saved[:EXCERPT], new[:EXCERPT]  # differing only in a last newline


def compare(saved_nb, new_nb, upto: int | None, patterns) -> tuple[int, list[dict]]:
    """How many checked outputs the code cells before cell index `upto` (all, if None) have, and
    those that differ: (checked, differences)."""
    checked, differences = 0, []
    code_number = 0
    for index, (saved, new) in enumerate(zip(saved_nb.cells, new_nb.cells, strict=True)):
        if saved.cell_type != "code":
            continue
        code_number += 1
        if upto is not None and index >= upto:
            break
        if markers(saved.source):
            continue
        old_items, new_items = checked_outputs(saved, patterns), checked_outputs(new, patterns)
        for position in range(max(len(old_items), len(new_items))):
            checked += 1
            old = old_items[position] if position < len(old_items) else ("nothing", "")
            fresh = new_items[position] if position < len(new_items) else ("nothing", "")
            if old != fresh:
                before, after = _first_difference(old[1], fresh[1])
                differences.append(
                    {
                        "code_cell": code_number,
                        "output": old[0] if old[0] != "nothing" else fresh[0],
                        "saved": before if old[0] != "nothing" else "(no such output)",
                        "new": after if fresh[0] != "nothing" else "(no such output)",
                    }
                )
    return checked, differences


# --- running one notebook ---------------------------------------------------------------------


def kernel_environment(run: Run) -> dict[str, str]:
    """This process's environment, the charts' HTML form on, the run's profile and precision."""
    env = dict(os.environ)
    env[HTML_ENV] = "1"
    for name, value in ((PROFILE_ENV, run.profile), (PRECISION_ENV, run.precision)):
        env.pop(name, None)
        if value:
            env[name] = value
    return env


def _one_line(text: str) -> str:
    text = " ".join(ANSI.sub("", text).split())
    return text if len(text) <= MESSAGE else text[: MESSAGE - 1] + "…"


def execute(run: Run, scratch: Path, timeout: int, patterns) -> dict:
    """Execute one notebook in its own scratch folder; whatever happens, a result."""

    started = time.perf_counter()
    result = _blank_result(run)
    try:
        copy = _fresh_copy(run, scratch)
        saved = nbformat.read(run.notebook, as_version=4)
        notebook = _without_outputs(copy)
        stopped_at = _run_cells(run, notebook, copy, timeout, result, started)
        checked, differences = compare(saved, notebook, stopped_at, patterns)
        result.update(checked=checked, differ=len(differences), differences=differences)
    except Exception as error:  # noqa: BLE001  (the copy or the comparison failed)
        result["ran_to_end"] = False
        result["error"] = result["error"] or _one_line(f"{type(error).__name__}: {error}")
        result["seconds"] = round(time.perf_counter() - started, 1)
    return result


def _blank_result(run: Run) -> dict:
    """A run's result before it ran: not to the end, nothing compared."""
    return {
        "label": run.label,
        "notebook": run.notebook.name,
        "profile": run.profile,
        "precision": run.precision,
        "ran_to_end": False,
        "failed_cell": None,
        "error": None,
        "seconds": 0.0,
        "checked": 0,
        "differ": 0,
        "differences": [],
    }


def _fresh_copy(run: Run, scratch: Path) -> Path:
    """The run's notebook copied into a scratch folder of its own, emptied first."""
    folder = scratch / run.label
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    copy = folder / run.notebook.name
    shutil.copyfile(run.notebook, copy)
    return copy


def _without_outputs(path: Path):
    """The notebook at `path` with its code cells' outputs cleared, and the cells nbval expects
    to raise tagged so that nbclient goes on after them."""
    notebook = nbformat.read(path, as_version=4)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
            if "NBVAL_RAISES_EXCEPTION" in markers(cell.source):
                tags = cell.metadata.setdefault("tags", [])
                tags.append("raises-exception")
    return notebook


def _run_cells(run: Run, notebook, copy: Path, timeout: int, result: dict, started: float):
    """Execute `notebook` in a fresh kernel beside its `copy`, and write the executed notebook
    there; notes in `result` whether it ran to the end, else the code cell that failed and its
    error, and the seconds since `started`. Returns the index of the cell it stopped at (0 when
    nothing ran), None when it ran to the end."""
    executing: list[int] = []  # the index of each code cell sent to the kernel
    client = notebook_client(
        notebook,
        copy.parent,
        timeout,
        on_cell_execute=lambda cell, cell_index: executing.append(cell_index),
    )
    stopped_at = None
    try:
        client.execute(env=kernel_environment(run))
        result["ran_to_end"] = True
    except Exception as error:  # noqa: BLE001  (a failing notebook must not stop the others)
        result["error"] = _error_of(error, notebook, executing)
        if executing:
            stopped_at = executing[-1]
            result["failed_cell"] = sum(
                cell.cell_type == "code" for cell in notebook.cells[: stopped_at + 1]
            )
        else:
            stopped_at = 0  # nothing ran: nothing to compare
    finally:
        result["seconds"] = round(time.perf_counter() - started, 1)
        with contextlib.suppress(Exception):
            nbformat.write(notebook, copy)  # the executed copy, for a look at what it did
    return stopped_at


def _error_of(error: Exception, notebook, executing: list[int]) -> str:
    """ "Name: message" of what stopped a notebook: a cell's own error as the cell shows it, else
    the exception (a timeout, a kernel that died or never started) with its first line."""
    from nbclient.exceptions import CellExecutionError

    if isinstance(error, CellExecutionError):
        outputs = notebook.cells[executing[-1]].get("outputs", []) if executing else []
        for output in outputs:
            if output.get("output_type") == "error":
                return _one_line(f"{output.get('ename', '')}: {output.get('evalue', '')}")
        return _one_line(f"{error.ename}: {error.evalue}")
    lines = [line for line in str(error).splitlines() if line.strip()]
    return _one_line(f"{type(error).__name__}: {lines[0] if lines else ''}")


# --- the machine and the report ---------------------------------------------------------------


def _cpu_model(named: str) -> str:
    """The CPU's model: `cpu_kind`'s where /proc/cpuinfo names it, else lscpu's (Linux on ARM:
    the cpuinfo of an ARM CPU has no "model name"), else the platform's (macOS, Windows)."""
    if named != "unknown":
        return named
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        listing = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        for line in listing.splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "Model name" and value.strip():
                return value.strip()
    return platform.processor() or platform.machine()


def machine() -> dict:
    """The machine: its CPU as every benchmark's record names it (annotated.base.machine's
    `cpu_kind`, with lscpu or the platform where /proc/cpuinfo has no model name), its GPUs, and
    torch's version."""
    import torch

    cpu = cpu_kind()
    cuda = None
    if torch.cuda.is_available():
        count = torch.cuda.device_count()
        cuda = {
            "name": torch.cuda.get_device_name(0),
            "names": [torch.cuda.get_device_name(index) for index in range(count)],
            "count": count,
            "cuda_version": torch.version.cuda,
        }
    return {
        "cpu": _cpu_model(cpu["model"]),
        "cpu_count": cpu["cores"],
        "instruction_sets": cpu["instruction sets"],
        "platform": platform.platform(),
        "torch": torch.__version__,
        "cuda": cuda,
        "mps_available": torch.backends.mps.is_available(),
    }


def kernel_book_path(folder: Path) -> str | None:
    """The folder of the book's package as a notebook's kernel finds it: from a Python started in
    `folder` with this process's environment. (This process, started from the checkout's root as
    `python -m tools.run_book`, imports the checkout's package; a kernel, started elsewhere, finds
    the installed book.)"""
    code = "import importlib.util as u; s = u.find_spec('annotated'); print(s.origin if s else '')"
    found = subprocess.run([sys.executable, "-c", code], cwd=folder, capture_output=True, text=True)
    origin = found.stdout.strip()
    return str(Path(origin).parent) if found.returncode == 0 and origin else None


def book_version() -> str | None:
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return None


def write_report(report: dict, out: Path, record: Path | None, key: str | None) -> None:
    with atomic_write(out / "report.json", "w", encoding="utf-8") as handle:
        json.dump(report, handle, indent=2, ensure_ascii=False)
        handle.write("\n")
    if record is not None:
        merged = read_json_object(record)
        merged[key] = report
        with atomic_write(record, "w", encoding="utf-8") as handle:
            json.dump(merged, handle, indent=2, ensure_ascii=False)
            handle.write("\n")


def result_text(result: dict) -> str:
    if result["ran_to_end"]:
        return "to the end"
    if result["failed_cell"] is None:
        return f"stopped before its first cell: {result['error']}"
    return f"stopped at code cell {result['failed_cell']}: {result['error']}"


def table_line(result: dict, width: int) -> str:
    return (
        f"{result['label']:<{width}}  {result['profile'] or 'default':<9} "
        f"{result['precision'] or 'default':<9} {result['seconds']:>8.1f} s  "
        f"checked {result['checked']:>3}, differ {result['differ']:>3}  {result_text(result)}"
    )


# --- the command line -------------------------------------------------------------------------


def _stem(name: str) -> str:
    return Path(name).name.removesuffix(".ipynb").removesuffix(".py")


def _pairs(parser, values: list[str], what: str, known: dict[str, Path]) -> dict[str, str]:
    pairs = {}
    for value in values:
        chapter, equals, setting = value.partition("=")
        chapter = _stem(chapter)
        if not equals:
            parser.error(f"--{what} {value!r}: write it as CHAPTER={what.upper()}")
        if chapter not in known:
            parser.error(f"--{what} {value!r}: no such chapter notebook (have {', '.join(known)})")
        if what == "precision" and setting and setting not in PRECISIONS:
            parser.error(f"--precision {value!r}: choose one of {', '.join(PRECISIONS)}")
        pairs[chapter] = setting
    return pairs


def plan(argv: list[str] | None) -> tuple[argparse.Namespace, list[Run]]:
    """The arguments and the runs they ask for; argparse's SystemExit(2) for bad ones."""
    parser = argument_parser()
    args = parser.parse_args(argv)
    _check_settings(parser, args)
    known = _chapter_notebooks(parser, args.notebooks)
    chosen = _chosen_chapters(parser, args.chapters, known)
    profiles = {name: value for name, value in DEFAULT_PROFILES.items() if name in known}
    profiles.update(_pairs(parser, args.profile, "profile", known))
    precisions = _pairs(parser, args.precision, "precision", known)

    runs = [
        Run(name, known[name], profiles.get(name) or None, precisions.get(name) or None)
        for name in chosen
    ]
    extras = args.extra if args.extra is not None else _default_extras(chosen)
    for extra in extras:
        runs.append(_extra_run(parser, extra, known, runs))
    return args, runs


def argument_parser() -> argparse.ArgumentParser:
    """The command line's flags."""
    parser = argparse.ArgumentParser(
        prog="python -m tools.run_book",
        description=__doc__.split("\n\n")[0],
        epilog="See the module docstring (tools/run_book.py) for running it on a GPU machine.",
    )
    parser.add_argument(
        "--chapters", nargs="+", metavar="CHAPTER", help="e.g. ch01_attention (default: all)"
    )
    parser.add_argument(
        "--profile",
        action="append",
        default=[],
        metavar="CHAPTER=PROFILE",
        help="ANNOTATED_PROFILE for that chapter's kernel (empty: the chapter's default); "
        "default ch08_wmt=smoke",
    )
    parser.add_argument(
        "--precision",
        action="append",
        default=[],
        metavar="CHAPTER=PRECISION",
        help=f"ANNOTATED_PRECISION for that chapter's kernel: {', '.join(PRECISIONS)}",
    )
    parser.add_argument(
        "--extra",
        action="append",
        default=None,
        metavar="CHAPTER:PROFILE:PRECISION",
        help="one more run of a chapter, labelled CHAPTER-PROFILE-PRECISION (an empty field: "
        f"the default); default on a CUDA machine: {', '.join(CUDA_EXTRAS)}",
    )
    parser.add_argument("--notebooks", type=Path, default=NOTEBOOKS, help="default: notebooks/")
    parser.add_argument(
        "--out",
        type=Path,
        default=CHECKOUT / "_build" / "run-book",
        help="default: _build/run-book",
    )
    parser.add_argument(
        "--timeout",
        type=int,
        default=CELL_TIMEOUT_S,
        help=f"seconds a cell may take (default {CELL_TIMEOUT_S})",
    )
    parser.add_argument("--record", type=Path, help="also merge the report into this JSON file")
    parser.add_argument("--key", help="... under this top-level key")
    return parser


def _check_settings(parser, args: argparse.Namespace) -> None:
    """Refuse a timeout that is not positive, --record without --key (or the reverse), and a
    record that does not hold a JSON object."""
    if args.timeout <= 0:
        parser.error("--timeout must be a positive number of seconds")
    if (args.record is None) != (args.key is None):
        parser.error("--record and --key go together")
    if args.record is not None:
        try:
            read_json_object(args.record)
        except ValueError as error:  # JSONDecodeError too
            parser.error(f"--record {args.record}: {error}")


def _chapter_notebooks(parser, folder: Path) -> dict[str, Path]:
    """The chapter notebooks in `folder` by name, in order; refused if there are none."""
    if not folder.is_dir():
        parser.error(f"--notebooks {folder}: no such folder")
    known = {path.stem: path for path in chapter_notebooks(folder)}
    if not known:
        parser.error(f"no chapter notebooks ({NOTEBOOK_PATTERN}) in {folder}")
    return known


def _chosen_chapters(parser, chapters: list[str] | None, known: dict[str, Path]) -> list[str]:
    """The chapters named (every known one if none is), in the book's order."""
    if not chapters:
        return list(known)
    wanted = {_stem(name) for name in chapters}
    unknown = sorted(wanted - set(known))
    if unknown:
        parser.error(f"no such chapter notebook: {', '.join(unknown)} (have {', '.join(known)})")
    return [name for name in known if name in wanted]


def _default_extras(chosen: list[str]) -> list[str]:
    """The extra runs made when --extra is not given: CUDA_EXTRAS of the chosen chapters, where
    torch sees a CUDA GPU."""
    import torch

    cuda = torch.cuda.is_available()
    return [extra for extra in CUDA_EXTRAS if cuda and extra.split(":")[0] in chosen]


def _extra_run(parser, extra: str, known: dict[str, Path], runs: list[Run]) -> Run:
    """The run that CHAPTER:PROFILE:PRECISION asks for, labelled by all three; refused if it
    repeats one of `runs`."""
    fields = extra.split(":")
    if len(fields) != 3:
        parser.error(f"--extra {extra!r}: write it as CHAPTER:PROFILE:PRECISION")
    chapter, profile, precision = _stem(fields[0]), fields[1], fields[2]
    if chapter not in known:
        parser.error(f"--extra {extra!r}: no such chapter notebook (have {', '.join(known)})")
    if precision and precision not in PRECISIONS:
        parser.error(f"--extra {extra!r}: choose a precision of {', '.join(PRECISIONS)}")
    label = f"{chapter}-{profile or 'default'}-{precision or 'default'}"
    if any(run.label == label for run in runs):
        parser.error(f"--extra {extra!r}: {label} runs already")
    return Run(label, known[chapter], profile or None, precision or None)


def main(argv: list[str] | None = None) -> int:
    try:
        args, runs = plan(argv)
    except SystemExit as stop:  # argparse: 2 for bad arguments, 0 for --help
        return stop.code if isinstance(stop.code, int) else 2

    from annotated.base.devices import training_device

    patterns = sanitize_patterns(SANITIZE) if SANITIZE.exists() else []
    device = str(training_device())
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    report = {
        "when": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "python": platform.python_version(),
        "python_executable": sys.executable,
        "book_version": book_version(),
        "book_path": kernel_book_path(out),
        "device": device,
        "notebooks": str(args.notebooks),
        "timeout_s": args.timeout,
        "complete": False,
        "results": [],
    }
    write_report(report, out, args.record, args.key)
    width = max(len(run.label) for run in runs)
    print(
        f"{'notebook':<{width}}  {'profile':<9} {'precision':<9} {'seconds':>10}  "
        f"{'outputs compared':<24} result",
        flush=True,
    )
    for run in runs:
        print(f"... {run.label}", file=sys.stderr, flush=True)
        result = execute(run, out / "scratch", args.timeout, patterns)
        result["device"] = device
        report["results"].append(result)
        write_report(report, out, args.record, args.key)
        print(table_line(result, width), flush=True)
    finished = sum(result["ran_to_end"] for result in report["results"])
    report["complete"] = True
    write_report(report, out, args.record, args.key)
    print(f"{finished} of {len(runs)} ran to the end (report: {out / 'report.json'})")
    return 0 if finished == len(runs) else 1


if __name__ == "__main__":
    sys.exit(main())
