"""What the book's tools, the site's build and the tests share about the chapters: where each
chapter's source and notebook are, in reading order; the text of a saved notebook's cells; Jupyter's
slide marks and their check; and the package's import graph (which of its modules each imports).

    chapter_sources()          annotated/chNN_*.py, the chapters' single source
    chapter_notebooks()        notebooks/chNN_*.ipynb, executed from them
    notebook_cells(notebook)   a saved notebook's cells, as JSON; cell_text(), cell_source()
    slide_type(cell)           a cell's slide mark, one of SLIDE_TYPES (any other stops)
    package_modules()          every module of the package by its dotted name (module_name)
    imported_modules(code, m)  the modules of `m` that a piece of code imports
    import_graph()             each module of the package and the modules it imports

It needs only Python's standard library: `python -m tools.publish` imports it (through
tools/booksite.py) with a bare python3, and the tests read the graph without importing the book.
"""

from __future__ import annotations

import ast
import functools
import json
from collections.abc import Collection, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the checkout
PACKAGE = ROOT / "annotated"
NOTEBOOKS = ROOT / "notebooks"
SOURCE_PATTERN = "ch[0-9][0-9]_*.py"  # ch07_multi30k.py is a chapter; checkpoints.py is not
NOTEBOOK_PATTERN = "ch[0-9][0-9]_*.ipynb"
# Jupyter's slideshow mark, kept in the notebooks for the chapters' slide decks
# (tools/bookslides.py): `# %% [markdown] slideshow={"slide_type": "slide"}` in a chapter's .py.
# "-" continues a slide.
SLIDE_TYPES = ("slide", "subslide", "fragment", "-", "skip", "notes")


# --- the chapters ----------------------------------------------------------------------------


def chapter_sources(package: Path = PACKAGE) -> list[Path]:
    """Every chapter's source (annotated/chNN_*.py), in reading order."""
    return sorted(package.glob(SOURCE_PATTERN))


def is_chapter_source(path: Path, package: Path = PACKAGE) -> bool:
    """Whether `path` is a chapter's source: chNN_topic.py at the package's top."""
    return path.parent == package and path.match(SOURCE_PATTERN)


def chapter_notebooks(folder: Path = NOTEBOOKS) -> list[Path]:
    """Every chapter's notebook in `folder` (notebooks/chNN_*.ipynb), in reading order."""
    return sorted(folder.glob(NOTEBOOK_PATTERN))


# --- a saved notebook's cells -------------------------------------------------------------------


def cell_text(value) -> str:
    """A text as a notebook saves it (a cell's source, a stream's text, an output's data): one
    string, or a list of lines that join into it."""
    return "".join(value) if isinstance(value, list) else str(value)


def cell_source(cell: Mapping) -> str:
    """A cell's source as one string."""
    return cell_text(cell.get("source", ""))


def notebook_cells(notebook: Path) -> list[dict]:
    """A saved notebook's cells, read as plain JSON (no Jupyter package needed)."""
    return json.loads(notebook.read_text(encoding="utf-8")).get("cells", [])


def slide_type(cell: Mapping) -> str | None:
    """The cell's slideshow mark (one of SLIDE_TYPES), None for an unmarked cell; a mark Jupyter
    does not know stops with what to write instead."""
    mark = cell.get("metadata", {}).get("slideshow", {}).get("slide_type")
    if mark is not None and mark not in SLIDE_TYPES:
        raise SystemExit(
            f"a cell is marked slide_type={mark!r}, which is none of {SLIDE_TYPES}: "
            f"correct its `# %%` line ({cell_source(cell)[:60]!r})"
        )
    return mark


# --- the package's modules and their imports ----------------------------------------------------


def module_name(path: Path, package: Path = PACKAGE) -> str:
    """The dotted name of a file of the package: `annotated.figures.ch01_attention`; a
    subpackage's `__init__.py` is the subpackage's name."""
    relative = path.relative_to(package.parent).with_suffix("")
    parts = relative.parts[:-1] if relative.name == "__init__" else relative.parts
    return ".".join(parts)


def package_modules(package: Path = PACKAGE) -> dict[str, Path]:
    """Every module of the package, chapters and subpackages included, by its dotted name, in
    name order."""
    found = {module_name(path, package): path for path in package.rglob("*.py")}
    return dict(sorted(found.items()))


@functools.lru_cache(maxsize=1024)
def imported_names(code: str) -> frozenset[str]:
    """The dotted names the code's absolute imports name, wherever an import is written: at the
    top, inside a function (run later) or under `TYPE_CHECKING`. `import a.b` names a.b, and
    `from a.b import c` names a.b.c (a module of a.b, or something defined in it). Kept per text:
    the staleness checks read the same modules once per chapter."""
    names = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return frozenset(names)


def imported_modules(code: str, modules: Collection[str]) -> set[str]:
    """The modules among `modules` (dotted names) that the code imports: for each name it
    imports, the longest dotted start of it that is one of them (`from a.b import c` imports
    a.b.c when that is a module, else a.b)."""
    found = set()
    for name in imported_names(code):
        while name and name not in modules:
            name = name.rpartition(".")[0]
        if name:
            found.add(name)
    return found


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Each module of the package and the package's modules it imports (`imported_modules`). A
    module's import of itself, or of a package it lies inside, is left out: Python imports that
    package before the module anyway, so it is no edge of the module's own (a package that imports
    its own module is one)."""
    modules = package_modules(package)
    graph = {}
    for name, path in modules.items():
        found = imported_modules(path.read_text(encoding="utf-8"), modules)
        graph[name] = {m for m in found if m != name and not name.startswith(f"{m}.")}
    return graph
