"""The student's side of `make grade`: runs one notebook's exercise cells and calls the student's
functions on the inputs the grader sent, inside the sandbox (tools/sandbox.py builds it).

Nothing here decides a grade. The grader writes a job on this process's standard input (the
chapter, the cells, and for each exercise the function's name and the inputs); this process runs
each cell in its own try, with the book's `check` made silent and inert (a student's `check` lines
decide nothing and cost no time), then calls each function on each input under a time limit, and
writes what came back on the file descriptor the grader names (its one argument), one record per
cell and per exercise. What the student's code prints goes nowhere. The grader compares the
values with the book's reference on its own side (annotated.exercises.judge). The job, the
records and how values travel are tools/wire.py's, which the grader reads with.
"""

from __future__ import annotations

import copy
import os
import signal
import sys
from typing import Any

from tools import wire


class CallTimeout(BaseException):
    """Raised in a student's function that ran past its time limit."""


def _alarm(signum, frame):
    raise CallTimeout


def _silent_check(exercise, answer):
    """The book's `check`, made inert: under grading the grader judges, not the notebook."""
    return True


def run_cells(job: dict, emit) -> dict:
    """Each cell in its own try, in one namespace; emits what each cell did."""
    import annotated.exercises

    annotated.exercises.check = _silent_check
    namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": __builtins__}
    if job.get("chapter"):
        exec(f"from annotated.{job['chapter']} import *", namespace)
    for number, source in enumerate(job["cells"], start=1):
        try:
            exec(compile(source, f"cell {number}", "exec"), namespace)
            emit(wire.cell_record(number, None))
        except BaseException as error:  # noqa: BLE001 - SystemExit too: the cell, not the run, ends
            emit(wire.cell_record(number, _one_line(error)))
        namespace["check"] = _silent_check  # a cell's own `from ... import check` undone
    return namespace


def _one_line(error: BaseException) -> str:
    text = str(error).splitlines()[0][:200] if str(error) else ""
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def call_answers(job: dict, namespace: dict, emit) -> None:
    """Each exercise's function on each input, each call under the job's time limit."""
    signal.signal(signal.SIGALRM, _alarm)
    for call in job["calls"]:
        answer = namespace.get(call["name"])
        if not callable(answer):
            emit(wire.missing_record(call["id"], call["name"]))
            continue
        outcomes = []
        for args, kwargs in wire.call_cases(call):
            outcome = _call_one(answer, args, kwargs, job["call_timeout"])
            outcomes.append(outcome)
            if "value" not in outcome:
                break
        emit(wire.answer_record(call["id"], outcomes))


def _call_one(answer, args: tuple, kwargs: dict, seconds: float) -> dict:
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        value = answer(*copy.deepcopy(args), **copy.deepcopy(kwargs))
        return wire.returned(value)
    except CallTimeout:
        return wire.timed_out(seconds)
    except BaseException as error:  # noqa: BLE001 - SystemExit too: one input's result
        message = str(error).splitlines()[0][:200] if str(error) else ""
        return wire.raised(type(error).__name__, message)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def main() -> None:
    job = wire.read_job(sys.stdin.read())
    descriptor = int(sys.argv[1])  # the results channel the grader passed
    channel = os.fdopen(os.dup(descriptor), "w", encoding="utf-8")
    os.close(descriptor)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # nothing the student prints goes anywhere
        os.dup2(devnull, fd)

    def emit(record: dict) -> None:
        channel.write(wire.line(record))
        channel.flush()

    namespace = run_cells(job, emit)
    call_answers(job, namespace, emit)
    emit(wire.DONE_RECORD)
    channel.close()
    os._exit(0)  # no student's atexit hook or thread keeps the process alive


if __name__ == "__main__":
    main()
