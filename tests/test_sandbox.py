"""The sandbox `make grade` runs a student's code in (tools/sandbox.py): the bubblewrap command it
builds, and its probe. The sandbox at work, against a whole class and against dishonest students,
is tests/test_grade.py's and tests/test_grade_attacks.py's."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from needs import missing

from tools import sandbox
from tools.sandbox import GRADER, TOOLS, sandbox_command, sandbox_problem, worker_arguments

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


def imported_tools(path: Path) -> set[str]:
    """The modules of tools/ that the file imports (`from tools import x`, `from tools.x import`,
    `import tools.x`), by file name."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module == "tools":
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tools."):
            names.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            names.update(a.name.split(".")[1] for a in node.names if a.name.startswith("tools."))
    return {f"{name}.py" for name in names}


def test_the_sandbox_holds_every_module_of_tools_the_worker_imports(tmp_path):
    """Inside the sandbox the worker has only the files of tools/ bound for it: each module it
    imports, and each that those import, must be one of them (tools/__init__.py too)."""
    files = bound(sandbox_command(tmp_path, worker_arguments(GRADER, CHANNEL)))
    inside, wanted = {}, ["__init__.py", "grade_worker.py"]  # file name -> what is bound there
    while wanted:
        name = wanted.pop()
        if name not in inside:
            inside[name] = files.get(f"{GRADER}/tools/{name}")
            wanted += sorted(imported_tools(TOOLS / name))
    assert inside == {name: TOOLS / name for name in inside}, (
        f"the sandbox lacks {[name for name, path in inside.items() if path is None]}: "
        "add them to tools/sandbox.py's WORKER_FILES"
    )
    assert "wire.py" in inside  # the protocol, which the worker writes with


def test_the_probe_starts_the_workers_python_in_the_workers_sandbox(monkeypatch):
    """sandbox_problem tries the very sandbox the worker gets, and the same Python with the same
    flags, on a program of its own (`-c pass`): a probe cut from the worker's command by
    position would lose those flags, or keep part of the worker's program, when that changes."""
    ran = []

    def run(command, **options):
        ran.append(command)
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(sandbox.platform, "system", lambda: "Linux")
    monkeypatch.setattr(sandbox.shutil, "which", lambda tool: f"/usr/bin/{tool}")
    monkeypatch.setattr(sandbox.subprocess, "run", run)
    assert sandbox_problem() is None
    probe = ran[0]
    scratch = Path(probe[probe.index("--bind") + 1])
    worker = sandbox_command(scratch, worker_arguments(GRADER, CHANNEL))
    python = worker.index(sandbox.environment_python())
    assert probe[: python + 3] == worker[: python + 3], "not the worker's sandbox and Python"
    assert worker[python + 1 : python + 3] == ["-I", "-u"]
    assert probe[python + 3 :] == ["-c", "pass"]
