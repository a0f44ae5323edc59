"""The book's commands, as tests run them: `python -m module` as a process of its own
(`run_module`), or a command's `main` in this process with its standard streams as bytes (`cli`).
A process each would import torch and the chapters many times over: most tests call `main`, and
start a process only for what only a process shows (its exit status, a reader that closes the
pipe early, output with nothing in it but the command's)."""

import io
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_module(module: str, *args: str, stdin: bytes = b"", env: dict | None = None):
    """`python -m module args...` from the project folder, its output captured as bytes."""
    command = [sys.executable, "-m", module, *args]
    return subprocess.run(command, input=stdin, capture_output=True, cwd=ROOT, timeout=600, env=env)


def cli(main, *args: str, stdin: bytes = b"") -> subprocess.CompletedProcess:
    """`main(args)` in this process as `python -m` would run it, its standard streams bytes: the
    exit status is what main returns, or what SystemExit carries (argparse's errors exit 2). An
    exception that escapes main escapes here too, and fails the test as a traceback would."""
    streams = [io.TextIOWrapper(io.BytesIO(data), encoding="utf-8") for data in (stdin, b"", b"")]
    saved = sys.stdin, sys.stdout, sys.stderr
    sys.stdin, sys.stdout, sys.stderr = streams
    try:
        status = main(list(args))
    except SystemExit as exit:
        status = exit.code if isinstance(exit.code, int) else 1
    finally:
        sys.stdin, sys.stdout, sys.stderr = saved
        for stream in streams[1:]:
            stream.flush()
    out, err = (stream.buffer.getvalue() for stream in streams[1:])
    return subprocess.CompletedProcess(["main", *args], status, out, err)
