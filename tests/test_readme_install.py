"""The README's way in without make, in a clone: the checkout's tracked files copied, a fresh
`.venv` there, torch (this environment's, seen through a `.pth` file, for the README's
`pip install torch==...`), then the README's own `pip install -c constraints.txt -e ".[lab]"` as
written. JupyterLab answers, and chapter 1 runs to its last cell in that environment's kernel from
the clone's notebooks/, with nothing to install from.

It shares tests/test_package.py's helpers (pip, the torch link, the notebook driver) but builds no
wheel, so it runs in make test's Python lane, which ends minutes before the reader's lane (where
tests/test_package.py runs). Everything here needs the package registry pip is configured with:
where it cannot be reached, the test is skipped with that reason (tests/needs.py).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from checkout import copy_tracked
from needs import missing
from test_package import (
    DRIVER,
    FIRST_LINE,
    NAME,
    ROOT,
    _executed_to_the_end,
    _pip_settings,
    _see_this_torch,
    _unreachable,
    code_cells,
    pip,
    printed,
)

WITHOUT_MAKE = "# or, without make"


def readme_without_make() -> list[str]:
    """The commands the README gives a reader without make (in "Start here", after the line
    that says so), each without its comment."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = text[text.index(WITHOUT_MAKE) :].split("```")[0].splitlines()[1:]
    return [command for line in block if (command := re.sub(r"\s+#.*", "", line).strip())]


def _clone(folder: Path) -> None:
    """What a clone of this checkout holds: its tracked files, as they stand, copied to `folder`
    (tests/checkout.py: the checkout is ours even where another user owns it, as in CI)."""
    copy_tracked(folder)


def _activated(venv: Path, home: Path) -> dict[str, str]:
    """What `source .venv/bin/activate` gives a new shell: the environment's scripts first on the
    path, nothing of this checkout's, and an empty home folder."""
    path = [str(venv / "bin")] + [
        p for p in os.environ["PATH"].split(os.pathsep) if p and not p.startswith(str(ROOT))
    ]
    kept = ("LANG", "LC_ALL", "TMPDIR", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
    env = {k: os.environ[k] for k in kept if k in os.environ}
    env.update(PATH=os.pathsep.join(path), VIRTUAL_ENV=str(venv), HOME=str(home))
    return env


# The last cell added to chapter 1 for this test: which Python ran the notebook, and which book.
WHO_RAN_IT = "import sys\n\nimport annotated\n\nprint(sys.executable)\nprint(annotated.__file__)"


@pytest.mark.slow
def test_the_readmes_way_without_make_installs_the_book_and_runs_chapter_1(tmp_path):
    """A clone, a fresh `.venv` in it, torch, then the README's own pip line, run as written:
    JupyterLab is there, and chapter 1 runs to its end in the kernel of that environment. The
    torch step takes this environment's torch (the CPU build here and in CI) instead of
    downloading it again."""
    make_venv, activate, torch_line, install, lab = readme_without_make()
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    torch_pin = re.search(r"^TORCH\s*\?=\s*(\S+)", makefile, re.M).group(1)
    assert make_venv == "python -m venv .venv" and activate == "source .venv/bin/activate"
    assert shlex.split(torch_line) == ["pip", "install", torch_pin], "the Makefile's torch"
    assert shlex.split(install)[:4] == ["pip", "install", "-c", "constraints.txt"], install
    assert lab == "jupyter lab notebooks"
    if reason := _unreachable(tmp_path / "probe"):
        missing(reason)
    clone, home = tmp_path / "clone", tmp_path / "home"
    home.mkdir()
    _clone(clone)
    venv = clone / ".venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    _see_this_torch(python, tmp_path / "torch-only")
    env = _activated(venv, home)
    installed = subprocess.run(
        [str(python), "-m", *shlex.split(install)],
        cwd=clone,
        env=env | _pip_settings(),
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]
    shown = pip(python, "show", NAME, env=env)
    fields = dict(line.split(": ", 1) for line in shown.stdout.splitlines() if ": " in line)
    assert Path(fields["Editable project location"]) == clone, shown.stdout
    torch = pip(python, "show", "torch", env=env).stdout
    assert f"Location: {tmp_path / 'torch-only'}" in torch, "torch was installed again"
    jupyter = subprocess.run(
        [str(venv / "bin" / "jupyter"), "lab", "--version"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert jupyter.returncode == 0, jupyter.stderr[-3000:]
    # Chapter 1 where `jupyter lab notebooks` opens it, with nothing to install from: the first
    # cell must find the book installed, not fetch it.
    chapter = clone / "notebooks" / "ch01_attention.ipynb"
    notebook = nbformat.read(chapter, as_version=4)
    notebook.cells.append(nbformat.v4.new_code_cell(WHO_RAN_IT))
    nbformat.write(notebook, chapter)
    (tmp_path / "execute.py").write_text(DRIVER)
    done = tmp_path / "executed.ipynb"
    offline = env | {"PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1"}
    ran = subprocess.run(
        [str(python), str(tmp_path / "execute.py"), chapter.name, str(done)],
        cwd=chapter.parent,
        env=offline,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    executed = nbformat.read(done, as_version=4)
    cells = code_cells(executed)
    assert printed(cells[0]) == FIRST_LINE
    _executed_to_the_end(executed)
    assert printed(cells[-1]).split() == [str(python), str(clone / "annotated" / "__init__.py")]
