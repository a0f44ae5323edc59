"""tools/book.py: the first cell it writes into every chapter notebook, and the outputs it keeps.

The first cell is checked where it is written (once, in tools/book.py, never in the .py files)
and run as a kernel would run it: finding the book, finding it at another version, and failing
to install it. tests/test_package.py runs it where the book is not installed yet. (The command-line
tools' tests, which stood here, are each in its module's file: tests/test_translate.py,
tests/test_train.py.)
"""

import os
import re
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import jupytext
import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
from tools import book
from tools.chapters import chapter_sources

# Every test here is slow-marked (some start processes): `make unit` leaves them to `make test`.
pytestmark = pytest.mark.slow


# ---------------------------------------------------------------- tools/book.py: the first cell


def test_every_notebook_that_runs_code_opens_with_the_first_cell_its_py_holds():
    cell = book.first_cell().source
    name, version = book.release()
    assert name == "annotated-transformer-book"
    assert f'name="{name}", version="{version}"' in cell
    assert max(len(line) for line in cell.splitlines()) <= 100
    for source in chapter_sources():
        text = source.read_text(encoding="utf-8")
        # The .py holds it as sync wrote it (a notebook-only cell), so the two stay twins.
        assert book.with_first_cell(text) == text, f"{source.name}: run `make notebooks`"
        notebook = nbformat.read(book.notebook_for(source), as_version=4)
        code = [c.source for c in notebook.cells if c.cell_type == "code"]
        if not code:
            continue  # the lab notebook runs nothing, so it installs nothing
        assert notebook.cells[0].cell_type == "markdown", source.name  # the title, then the cell
        assert notebook.cells[1].source == cell, f"{source.name}: run `make notebooks`"
        assert code.count(cell) == 1


def test_sync_writes_the_first_cell_once_keeps_its_output_and_twice_is_stable(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(book, "NOTEBOOKS", tmp_path)
    source = book.PACKAGE / "ch10_conclusion.py"
    target = tmp_path / "ch10_conclusion.ipynb"
    book.sync(source)
    notebook = nbformat.read(target, as_version=4)
    assert [c.source for c in notebook.cells].count(book.first_cell().source) == 1
    notebook.cells[1].outputs = [nbformat.v4.new_output("stream", text="The book's code: ...\n")]
    book.write_atomically(notebook, target)
    book.sync(source)
    once = target.read_bytes()
    book.sync(source)
    assert target.read_bytes() == once
    again = nbformat.read(target, as_version=4)
    assert [c.source for c in again.cells].count(book.first_cell().source) == 1
    assert again.cells[1].outputs[0].text == "The book's code: ...\n"


def test_sync_keeps_the_slideshow_marks_and_the_outputs_of_the_cells_they_mark(
    tmp_path, monkeypatch
):
    """A chapter's `# %%` line may carry Jupyter's slideshow mark (the slide decks read it):
    sync writes it into the notebook, keeps a marked cell's outputs, and refuses a made-up mark."""
    monkeypatch.setattr(book, "NOTEBOOKS", tmp_path)
    source = tmp_path / "ch10_conclusion.py"
    text = (book.PACKAGE / source.name).read_text(encoding="utf-8")
    text = re.sub(r" slideshow=\{[^}]*\}", "", text)  # the chapter's own marks out: ours in
    code = '# %% tags=["active-ipynb"]\n# from annotated.ch08_wmt'
    assert code in text
    marked = text.replace(
        "# %% [markdown]\n# ## What the book built",
        '# %% [markdown] slideshow={"slide_type": "slide"}\n# ## What the book built',
    ).replace(code, code.replace("]\n", '] slideshow={"slide_type": "-"}\n'))
    source.write_text(marked, encoding="utf-8")
    saved = book.ROOT / "notebooks" / "ch10_conclusion.ipynb"  # with its outputs
    shutil.copy(saved, tmp_path / saved.name)
    book.sync(source)
    notebook = nbformat.read(tmp_path / "ch10_conclusion.ipynb", as_version=4)
    marks = [(c.cell_type, c.metadata.get("slideshow")) for c in notebook.cells]
    assert ("markdown", {"slide_type": "slide"}) in marks
    (table,) = [c for c in notebook.cells if c.metadata.get("slideshow") == {"slide_type": "-"}]
    assert table.outputs and "text/html" in table.outputs[0].data
    assert sum(1 for _, mark in marks if mark) == 2  # the unmarked cells stay unmarked
    source.write_text(marked.replace('"slide_type": "slide"', '"slide_type": "title"'))
    with pytest.raises(SystemExit, match="'title', which is none of"):
        book.sync(source)


def test_the_first_cell_is_part_of_the_code_a_notebook_was_executed_from(monkeypatch):
    # A new release changes the cell, so every notebook must be executed again.
    source = book.PACKAGE / "ch10_conclusion.py"
    before = book.source_digest(source)
    monkeypatch.setattr(book, "release", lambda: ("annotated-transformer-book", "99.0.0"))
    assert "99.0.0" in book.notebook_code(source)
    assert book.source_digest(source) != before


def run_first_cell(tmp_path: Path, version: str, name: str = "annotated-transformer-book", **kw):
    """The first cell, for `name` at `version`, run by this environment's python, from tmp_path.
    kw: `before` (code run first, as earlier cells of a kernel would) and `env`."""
    cell = book.FIRST_CELL.substitute(name=name, version=version)
    if "calls" in kw.get("before", ""):  # the test looks at pip's command instead of running it
        cell = cell.replace("\nfind_or_install_the_book()", "")
        cell += "\ntry:\n    find_or_install_the_book()\nexcept RuntimeError:\n    print(calls)\n"
    return subprocess.run(
        [sys.executable, "-c", kw.get("before", "") + cell],
        cwd=tmp_path,
        env=kw.get("env"),
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_first_cell_finds_the_installed_book_and_says_so_in_one_line(tmp_path):
    version = metadata.version("annotated-transformer-book")
    result = run_first_cell(tmp_path, version)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"The book's code: annotated-transformer-book {version}.\n"


def test_the_first_cell_uses_a_book_at_another_version_and_says_which(tmp_path):
    version = metadata.version("annotated-transformer-book")
    result = run_first_cell(tmp_path, "0.0.1")
    assert result.returncode == 0, result.stderr
    assert result.stdout == (
        f"The book's code: annotated-transformer-book {version} "
        "(this notebook was executed with 0.0.1).\n"
    )


def test_the_first_cell_without_anything_to_install_from_says_what_to_run_and_raises(tmp_path):
    # A name no index has, and pip pointed at nothing: what a reader offline would see.
    name = "annotated-transformer-book-never-published"
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_NO_INDEX="1")
    result = run_first_cell(tmp_path, "0.1.0", name, env=env)
    assert result.returncode == 1
    assert "No matching distribution found" in result.stdout  # pip's own words, on failure only
    assert result.stdout.splitlines()[-2:] == [
        f"Could not install the book's code, {name}==0.1.0 (pip's words above): that release "
        "may not be on the package index yet, or this machine is offline.",
        "Work in a clone of the book instead (`make lab` there opens the chapters), or install "
        "a clone here (`pip install -e path/to/clone`) and restart the kernel.",
    ]
    assert result.stderr.rstrip().endswith(f"RuntimeError: {name} is not installed")
    assert "During handling" not in result.stderr


def test_the_first_cell_pins_what_the_kernel_imported_and_leaves_out_the_lock(tmp_path):
    before = (
        "import subprocess\nimport numpy\ncalls = []\n"
        "def pip(args, **kw):\n"
        "    calls.append((args, open(args[args.index('-c') + 1]).read().splitlines()))\n"
        "    return subprocess.CompletedProcess(args, 1, '', 'not this time')\n"
        "subprocess.run = pip\n"
    )
    result = run_first_cell(tmp_path, "0.1.0", "annotated-transformer-book-x", before=before)
    assert result.returncode == 0, result.stderr
    ((args, pins),) = eval(result.stdout.splitlines()[-1])
    assert args[:5] == [
        sys.executable,
        "-m",
        "pip",
        "install",
        "annotated-transformer-book-x==0.1.0",
    ]
    assert not any("constraints.txt" in arg for arg in args)
    assert f"numpy=={metadata.version('numpy')}" in pins  # imported: pip must keep it
    assert not [pin for pin in pins if pin.lower().startswith(("torch==", "pandas=="))]


def test_the_first_cell_is_written_into_a_chapter_once_and_replaced_when_it_changes(monkeypatch):
    """sync puts FIRST_CELL under the title's cell, as comments (importing runs nothing); a new
    release replaces it in place; a chapter with no code cell gets none."""
    chapter = "# %% [markdown]\n# # Title\n\n# %%\nx = 1\n"
    once = book.with_first_cell(chapter)
    assert once.startswith("# %% [markdown]\n# # Title\n\n" + book.FIRST_CELL_TAGS)
    assert once.endswith("\n\n# %%\nx = 1\n") and book.with_first_cell(once) == once
    namespace: dict = {}
    exec(compile(once, "chapter.py", "exec"), namespace)  # as `import` runs it
    assert "find_or_install_the_book" not in namespace and namespace["x"] == 1
    cells = jupytext.reads(once, fmt="py:percent").cells
    assert cells[1].source == book.first_cell().source
    monkeypatch.setattr(book, "release", lambda: ("annotated-transformer-book", "9.9.9"))
    again = book.with_first_cell(once)
    assert again.count("find_or_install_the_book(name=") == 1 and 'version="9.9.9"' in again
    prose_only = "# %% [markdown]\n# # Title\n\n# %% [markdown]\n# More.\n"
    assert book.with_first_cell(prose_only) == prose_only


def test_settle_streams_keeps_what_a_terminal_shows_of_a_progress_bar():
    stream = lambda name, text: nbformat.v4.new_output("stream", name=name, text=text)  # noqa: E731
    cell = nbformat.v4.new_code_cell("train()")
    cell.outputs = [
        stream("stdout", "plan: 3 steps\n"),
        stream("stderr", "\r  0%|     | 0/3"),
        stream("stderr", "\r 33%|█    | 1/3"),
        stream("stderr", "\r100%|█████| 3/3"),
        stream("stderr", "\n"),
        stream("stdout", "done\n"),
        nbformat.v4.new_output("execute_result", data={"text/plain": "1"}, execution_count=1),
        stream("stdout", "after\n"),
    ]
    notebook = nbformat.v4.new_notebook(cells=[cell, nbformat.v4.new_markdown_cell("text")])
    book.settle_streams(notebook)
    assert [(o.output_type, o.get("name"), o.get("text")) for o in cell.outputs] == [
        ("stream", "stdout", "plan: 3 steps\n"),
        ("stream", "stderr", "100%|█████| 3/3\n"),
        ("stream", "stdout", "done\n"),
        ("execute_result", None, None),
        ("stream", "stdout", "after\n"),
    ]
