"""The sandbox `make grade` runs a student's code in (tools/sandbox.py): the bubblewrap command it
builds, and its probe. The sandbox at work, against a whole class and against dishonest students,
is tests/test_grade.py's and tests/test_grade_attacks.py's."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from needs import missing

from tools.sandbox import GRADER, sandbox_command, sandbox_problem, worker_arguments

CHANNEL = 3  # a file descriptor, as the grader passes the worker its channel


def through_a_link(tmp_path: Path, monkeypatch) -> Path:
    """This Python as a process started through a linked environment sees itself (`.venv` a link
    to another folder, as a shared or relocated environment is): its executable and prefixes
    spelled through `tmp_path/env`, a link to the environment's real folder. Returns the link."""
    executable = Path(sys.executable)
    if not executable.is_relative_to(sys.prefix):
        pytest.skip(f"{executable} lies outside its environment {sys.prefix}")
    link = tmp_path / "env"
    link.symlink_to(Path(sys.prefix).resolve(), target_is_directory=True)
    monkeypatch.setattr(sys, "executable", str(link / executable.relative_to(sys.prefix)))
    monkeypatch.setattr(sys, "prefix", str(link))
    monkeypatch.setattr(sys, "exec_prefix", str(link))
    return link


def bound(command: list[str]) -> dict[str, Path]:
    """What the command binds read-only: the path inside the sandbox -> the folder or file."""
    return {
        command[i + 2]: Path(command[i + 1])
        for i, word in enumerate(command)
        if word == "--ro-bind"
    }


def test_the_sandbox_runs_a_linked_environments_python_where_it_binds_it(tmp_path, monkeypatch):
    """bubblewrap binds each readable folder by its real path, so the Python it starts must be
    named by that path too: a path through the link does not exist inside the sandbox."""
    through_a_link(tmp_path, monkeypatch)
    command = sandbox_command(tmp_path / "scratch", worker_arguments(GRADER, CHANNEL))
    folders = [Path(inside) for inside in bound(command)]
    python = Path(command[command.index("-I") - 1])
    assert any(python.is_relative_to(folder) for folder in folders), (
        f"the sandbox starts {python}, which none of its folders {folders} holds"
    )
    assert python.exists()


@pytest.mark.slow
def test_a_linked_environment_can_make_its_sandbox(tmp_path, monkeypatch):
    if shutil.which("bwrap") is None:
        missing("needs bubblewrap, make grade's sandbox (make sandbox installs Debian's)")
    through_a_link(tmp_path, monkeypatch)
    assert sandbox_problem() is None  # its probe starts the Python in the sandbox
