"""Keep the chapters (annotated/chNN_*.py) and their executed notebooks (notebooks/) in step.

The .py file is the single source of truth. This tool never reads a notebook's cells back
into the .py; it only writes notebooks from the .py files:

    python -m tools.book sync            # .py -> .ipynb, keeping the outputs of unchanged cells
    python -m tools.book execute         # re-execute only notebooks whose sources changed
    python -m tools.book execute --all   # re-execute every notebook
    python -m tools.book status          # say which notebooks are stale, exit 1 if any
    python -m tools.book reach           # for each module, the notebooks a change to it makes stale

A notebook records, in its metadata, a digest of the code it was executed from: the chapter's code
cells and the code (not the comments, markdown or docstrings) of every `annotated` module the
chapter imports, transitively. "Stale" means that digest no longer matches: `jupytext --sync`
would decide by file times instead, which a git checkout scrambles. Prose edits only need `sync`.

Every chapter notebook that runs code opens, under its title, with one cell (FIRST_CELL, written
here and nowhere else, which `sync` copies into each chapter's .py as a notebook-only cell): it
finds the book's code installed, or installs the release this notebook was executed with, so a
notebook downloaded from the site or opened in Colab runs on its own. Importing a chapter as a
module never runs it.
"""

from __future__ import annotations

import argparse
import ast
import functools
import hashlib
import os
import re
import string
import sys
import time
import tomllib
from pathlib import Path

import jupytext
import nbformat
from jupytext.combine import combine_inputs_with_outputs

from annotated.base.files import REPO_ROOT, atomic_write
from annotated.figures import HTML_ENV
from tools.chapters import (
    chapter_sources,
    imported_modules,
    is_chapter_source,
    module_name,
    package_modules,
    slide_type,
)

ROOT = REPO_ROOT
PACKAGE = ROOT / "annotated"
NOTEBOOKS = ROOT / "notebooks"
KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
SITE_TAGS = ("hide-input",)  # cell tags kept in the notebooks, for the site
CELL_TIMEOUT_S = 3 * 3600  # the longest cell is a full training run in a later chapter

# The first code cell of every chapter notebook (and of the student edition's). It finds the
# book's distribution, or pip-installs the release named here, from pyproject.toml: without the
# lock file, and with every distribution the kernel has already imported pinned at its installed
# version, so pip adds packages but replaces none of those. pip's output is shown only when it
# fails; then the cell says what to run instead and raises, which stops a "run all" there. A book
# found at another version (an older install, or a checkout ahead of its last release) is used as
# it is, never replaced, and the line says which version it is.
FIRST_CELL = string.Template(
    """\
# Run this cell first: it finds the book's code, or installs the release this notebook ran with.
def find_or_install_the_book(name="$name", version="$version"):
    import subprocess, sys, tempfile
    from importlib import invalidate_caches, metadata

    try:
        found = metadata.version(name)
    except metadata.PackageNotFoundError:
        # Pins what this kernel has imported already (numpy...): pip must not replace any of it.
        imported = metadata.packages_distributions()
        kept = {d for module, ds in imported.items() if module in sys.modules for d in ds}
        with tempfile.TemporaryDirectory() as folder:
            pins = f"{folder}/imported.txt"
            with open(pins, "w") as file:
                file.writelines(f"{d}=={metadata.version(d)}\\n" for d in sorted(kept))
            pip = [sys.executable, "-m", "pip", "install", f"{name}=={version}", "-c", pins]
            result = subprocess.run(pip, capture_output=True, text=True)
        if result.returncode != 0:
            print(result.stdout + result.stderr)
            print(f"Could not install the book's code, {name}=={version} (pip's words above):"
                  " that release may not be on the package index yet, or this machine is offline.")
            print("Work in a clone of the book instead (`make lab` there opens the chapters), or"
                  " install a clone here (`pip install -e path/to/clone`) and restart the kernel.")
            raise RuntimeError(f"{name} is not installed") from None
        invalidate_caches()
        found = metadata.version(name)
    note = "" if found == version else f" (this notebook was executed with {version})"
    print(f"The book's code: {name} {found}{note}.")


find_or_install_the_book()"""
)


def release() -> tuple[str, str]:
    """The book's distribution name and version, from pyproject.toml."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return project["name"], project["version"]


def first_cell() -> nbformat.NotebookNode:
    """The notebook-only cell that opens every chapter notebook: find the book, or install it."""
    name, version = release()
    # Folded on the site (its one line of output shows); Jupyter and Colab show it as it is.
    return nbformat.v4.new_code_cell(
        FIRST_CELL.substitute(name=name, version=version), metadata={"tags": ["hide-input"]}
    )


# How FIRST_CELL sits in a chapter's .py: a notebook-only cell (its lines are comments to Python,
# so importing the chapter never runs it), the second cell, under the title's.
FIRST_CELL_TAGS = '# %% tags=["active-ipynb", "hide-input"]\n'
FIRST_CELL_START = FIRST_CELL_TAGS + "# " + FIRST_CELL.template.splitlines()[0]


def with_first_cell(text: str) -> str:
    """A chapter's .py text with today's FIRST_CELL as its second cell (in place of an older one);
    a chapter with no code cell is returned as it is."""
    lines = first_cell().source.splitlines()
    block = FIRST_CELL_TAGS + "\n".join(f"# {line}" if line else "#" for line in lines) + "\n\n"
    start = text.find(FIRST_CELL_START)
    if start >= 0:  # replace the cell, up to the next one
        end = text.find("\n# %%", start)
        return text[:start] + block + (text[end + 1 :] if end >= 0 else "")
    cells = [found.start() for found in re.finditer(r"^# %%", text, re.MULTILINE)]
    if len(cells) < 2 or all(text.startswith("# %% [markdown]", i) for i in cells):
        return text
    return text[: cells[1]] + block + text[cells[1] :]


def write_first_cell(source: Path) -> bool:
    """Put today's FIRST_CELL in the chapter's .py (the one source of its notebook); True if the
    file changed."""
    text = source.read_text(encoding="utf-8")
    wanted = with_first_cell(text)
    if wanted != text:
        with atomic_write(source, "w", encoding="utf-8") as handle:
            handle.write(wanted)
    return wanted != text


def read_chapter(source: Path) -> nbformat.NotebookNode:
    """A chapter's notebook as the book writes it: the .py's cells, FIRST_CELL among them (as it
    is today, even before `sync` has written it into the .py)."""
    return jupytext.reads(with_first_cell(source.read_text(encoding="utf-8")), fmt="py:percent")


def notebook_for(source: Path) -> Path:
    return NOTEBOOKS / (source.stem + ".ipynb")


def _imported_modules(
    source: Path, as_notebook: bool = False, modules: dict[str, Path] | None = None
) -> set[Path]:
    """The `annotated` modules that a source file imports (`modules`: the package's, by name):
    as Python imports it, or, with `as_notebook`, as a chapter's notebook runs it (its
    notebook-only cells too).

    Imports inside functions count (the exercise checks import their diagnoses only when an answer
    is wrong). Importing `annotated.figures.ch01_attention` runs the package `annotated.figures`
    first, so both count.
    """
    modules = package_modules(PACKAGE) if modules is None else modules
    code = (
        notebook_code(source).replace("\n\0", "\n")
        if as_notebook
        else source.read_text(encoding="utf-8")
    )
    found = set()
    for name in imported_modules(code, modules):
        parts = name.split(".")
        found.update(".".join(parts[:end]) for end in range(1, len(parts) + 1))
    return {modules[name] for name in found if name in modules}


def dependencies(source: Path) -> list[Path]:
    """The source itself and every `annotated` module it needs, transitively.

    A chapter given as `source` is read as its notebook runs it; a chapter it imports, as Python
    imports it: the notebook-only cells of that chapter (its charts, its exercises) are not run by
    the import, so they are not dependencies of the importer.
    """
    modules = package_modules(PACKAGE)
    seen: dict[str, Path] = {}
    todo = [(source, is_chapter_source(source, PACKAGE))]
    while todo:
        path, as_notebook = todo.pop()
        name = module_name(path, PACKAGE)
        if name in seen:
            continue
        seen[name] = path
        todo.extend((found, False) for found in _imported_modules(path, as_notebook, modules))
    return [seen[name] for name in sorted(seen)]


def made_stale_by() -> dict[str, list[str]]:
    """For each module of the package, the chapter notebooks a code change to it makes stale."""
    reached = {name: [] for name in package_modules(PACKAGE)}
    for source in chapter_sources(PACKAGE):
        for path in dependencies(source):
            reached[module_name(path, PACKAGE)].append(source.stem)
    return reached


def chapter_numbers(stems: list[str]) -> str:
    """Chapter stems as their numbers, runs of three or more folded: "0-6, 8" ("none" for none)."""
    numbers = sorted(int(stem[2:4]) for stem in stems)
    runs: list[list[int]] = []
    for number in numbers:
        if runs and number == runs[-1][-1] + 1:
            runs[-1].append(number)
        else:
            runs.append([number])
    words = [f"{run[0]}-{run[-1]}" if len(run) > 2 else ", ".join(map(str, run)) for run in runs]
    return ", ".join(words) or "none"


def stale_table() -> str:
    """The Markdown table of `made_stale_by`, as CONTRIBUTING.md shows it (a test compares)."""
    lines = ["| a code change to | makes stale the notebooks of chapters |", "|---|---|"]
    modules = package_modules(PACKAGE)
    for name, stems in made_stale_by().items():
        shown = modules[name].relative_to(PACKAGE.parent).as_posix()
        lines.append(f"| `{shown}` | {chapter_numbers(stems)} |")
    return "\n".join(lines)


def code_of(path: Path) -> str:
    """What a module does, without its prose: its syntax tree with comments and docstrings left out.

    A chapter's markdown cells are comments to Python, so rewording them, or a docstring, changes
    nothing here, and the chapters that import it are not re-executed for it.
    """
    return _code_without_prose(path.read_text(encoding="utf-8"))


@functools.lru_cache(maxsize=1024)
def _code_without_prose(text: str) -> str:
    """`code_of` for a module's text, kept per text: every chapter's digest reads the modules it
    shares with the others again."""
    tree = ast.parse(text)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree)


def notebook_code(source: Path) -> str:
    """The code cells of a chapter's notebook, the notebook-only ones (and FIRST_CELL) included."""
    return _notebook_code(with_first_cell(source.read_text(encoding="utf-8")))


@functools.lru_cache(maxsize=256)
def _notebook_code(text: str) -> str:
    """`notebook_code` for a chapter's text with today's first cell in it, kept per text (jupytext
    reads a chapter in a tenth of a second, and a digest of every chapter reads each again). The
    first cell is put in before, not in here: it names the release, which may change."""
    cells = jupytext.reads(text, fmt="py:percent").cells
    return "\n\0".join(cell.source for cell in cells if cell.cell_type == "code")


def source_digest(source: Path) -> str:
    """A digest of the code a chapter's notebook runs: its code cells, and the code it imports."""
    digest = hashlib.sha256()
    digest.update(notebook_code(source).encode() + b"\0")
    for path in dependencies(source):
        if path != source:
            name = module_name(path, PACKAGE)
            digest.update(name.encode() + b"\0" + code_of(path).encode() + b"\0")
    return digest.hexdigest()


def _stable_cell_ids(notebook: nbformat.NotebookNode) -> None:
    """Give cells ids derived from their content, so regenerating a notebook does not churn ids."""
    used: set[str] = set()
    for cell in notebook.cells:
        base = hashlib.sha1(cell.source.encode()).hexdigest()[:8]
        cell_id, n = base, 1
        while cell_id in used:
            cell_id, n = f"{base}-{n}", n + 1
        used.add(cell_id)
        cell["id"] = cell_id


def _normalise(notebook: nbformat.NotebookNode, digest: str | None) -> None:
    """Reduce metadata to what the book needs, so tool upgrades do not rewrite every file."""
    executed = notebook.metadata.get("annotated", {}).get("executed_from")
    notebook.metadata = nbformat.from_dict(
        {"kernelspec": KERNELSPEC, "language_info": {"name": "python"}}
    )
    if digest or executed:
        notebook.metadata["annotated"] = {"executed_from": digest or executed}
    for cell in notebook.cells:
        # Only the tags the site reads (hide-input folds an exercise's solution) survive, and the
        # slideshow mark the slide decks read.
        tags = [tag for tag in cell.metadata.get("tags", []) if tag in SITE_TAGS]
        kept = {"tags": tags} if tags else {}
        if mark := slide_type(cell):
            kept["slideshow"] = {"slide_type": mark}
        cell.metadata = nbformat.from_dict(kept)
    _stable_cell_ids(notebook)
    notebook.nbformat, notebook.nbformat_minor = 4, 5


# A progress bar redraws its line with a carriage return every few seconds, and each redraw is an
# output of its own: a slow machine saved some fifty of them for one copy-task training. Jupyter
# shows only the last state, and so does nbval, which compares streams after the same folding.
_REDRAWN = re.compile(r"^.*\r(?=[^\n])", re.MULTILINE)
_ERASED = re.compile(r"[^\n\x08]\x08")


def as_printed(text: str) -> str:
    """A stream as a terminal leaves it (and as nbval compares it): a backspace erases the
    character before it, and a line rewritten after a carriage return keeps only its last form."""
    while (erased := _ERASED.sub("", text)) != text:
        text = erased
    return _REDRAWN.sub("", text)


def settle_streams(notebook: nbformat.NotebookNode) -> None:
    """Fold each run of adjacent outputs of one stream into one output, as a terminal shows it:
    a line rewritten after a carriage return keeps only its last form."""
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        outputs = []
        for output in cell.outputs:
            last = outputs[-1] if outputs else None
            if (
                output.output_type == "stream"
                and last is not None
                and last.output_type == "stream"
                and last.name == output.name
            ):
                last.text += output.text
            else:
                outputs.append(output)
        for output in outputs:
            if output.output_type == "stream":
                output.text = as_printed(output.text)
        cell.outputs = outputs


def write_atomically(notebook: nbformat.NotebookNode, path: Path) -> None:
    with atomic_write(path, "w", encoding="utf-8") as handle:
        nbformat.write(notebook, handle)


def sync(source: Path) -> nbformat.NotebookNode:
    """Write the notebook's cells from the .py (and FIRST_CELL), keeping the outputs of the cells
    whose source is unchanged."""
    write_first_cell(source)
    fresh = read_chapter(source)
    target = notebook_for(source)
    if target.exists():
        old = nbformat.read(target, as_version=4)
        fresh = combine_inputs_with_outputs(fresh, old)
        fresh.metadata["annotated"] = old.metadata.get("annotated", {})
    _normalise(fresh, None)
    write_atomically(fresh, target)
    return fresh


def is_stale(source: Path) -> bool:
    target = notebook_for(source)
    if not target.exists():
        return True
    notebook = nbformat.read(target, as_version=4)
    recorded = notebook.metadata.get("annotated", {}).get("executed_from")
    return recorded != source_digest(source)


def notebook_client(notebook: nbformat.NotebookNode, folder: Path, timeout: int, **options):
    """An nbclient client that runs `notebook` in a fresh "python3" kernel (this Python's) with
    `folder` as its working directory; `options` go to nbclient (on_cell_execute, ...)."""
    from nbclient import NotebookClient

    return NotebookClient(
        notebook,
        timeout=timeout,
        kernel_name=KERNELSPEC["name"],
        resources={"metadata": {"path": str(folder)}},
        record_timing=False,
        **options,
    )


def execute(source: Path) -> float:
    """Run every cell of a chapter's notebook in a fresh kernel and save it with its outputs."""
    notebook = sync(source)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    # Charts emit their offline HTML form too when the book is executed
    # (see annotated/figures/__init__.py).
    os.environ[HTML_ENV] = "1"
    started = time.perf_counter()
    notebook_client(notebook, NOTEBOOKS, CELL_TIMEOUT_S).execute()
    settle_streams(notebook)
    _normalise(notebook, source_digest(source))
    write_atomically(notebook, notebook_for(source))
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("command", choices=["sync", "execute", "status", "reach"])
    parser.add_argument(
        "chapters", nargs="*", help="chapter names (e.g. ch01_attention); default all"
    )
    parser.add_argument("--all", action="store_true", help="with execute: also run up-to-date ones")
    args = parser.parse_args(argv)

    sources = chapter_sources(PACKAGE)
    if args.chapters:
        wanted = {
            name.removesuffix(".py").removesuffix(".ipynb").split("/")[-1] for name in args.chapters
        }
        unknown = wanted - {s.stem for s in sources}
        if unknown:
            parser.error(f"no such chapter: {', '.join(sorted(unknown))} (see annotated/ch*.py)")
        sources = [s for s in sources if s.stem in wanted]

    if args.command == "sync":
        for source in sources:
            sync(source)
            print(f"synced   {notebook_for(source).relative_to(ROOT)}")
        return 0
    if args.command == "reach":
        print(stale_table())
        return 0
    if args.command == "status":
        stale = [s for s in sources if is_stale(s)]
        for source in sources:
            state = "stale" if source in stale else "fresh"
            print(f"{state}    {notebook_for(source).relative_to(ROOT)}")
        return 1 if stale else 0
    for source in sources:
        if args.all or is_stale(source):
            print(f"executing {notebook_for(source).relative_to(ROOT)} ...", flush=True)
            seconds = execute(source)
            print(
                f"executed  {notebook_for(source).relative_to(ROOT)} in {seconds:.0f} s", flush=True
            )
        else:
            sync(source)
            print(f"fresh     {notebook_for(source).relative_to(ROOT)} (outputs kept)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
