"""Build the book's HTML site from the saved, executed notebooks, and the Sphinx extension it uses.

    python -m tools.booksite           # -> _build/html/index.html (the notebooks are not re-run)

The site is made for reading offline: every script, style, font and the MathJax and vega code
it needs is copied into `_build/html`, and nothing is loaded from another host
(`tests/test_site.py` opens every page in Chromium with the network refused to check that).

Sphinx wants all its pages under one source folder, and the chapters live in `notebooks/`, so the
build first stages a source folder in `_build/site/`:

    _build/site/src/          index.md (from site/), and a copy of every notebooks/chNN_*.ipynb
    _build/site/static/       annotated-vega.js, the bundle every chart loads (annotated/figures/__init__.py),
                              and try/: the "Try the model" page's scripts (site/try/) and its model
                              as one script, model-data.js (`try_page_files`)
    _build/site/extra/        downloads/<chapter>.ipynb and .py, copied to _build/html/downloads/,
                              and slides/: every chapter's slide deck with its assets
                              (tools/bookslides.py), copied to _build/html/slides/
    _build/site/doctrees/     Sphinx's cache, so a second build only re-reads what changed

Chapters are found by globbing `notebooks/chNN_*.ipynb` in name order (tools/chapters.py), so a
new chapter appears in the navigation, on the landing page and in the browser test without any
change here.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
import shutil
import sys
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

from tools.chapters import NOTEBOOKS, PACKAGE, ROOT, cell_source, chapter_notebooks, notebook_cells

SITE = ROOT / "site"  # what Sphinx reads besides the notebooks: conf.py, the pages, the styles
BUILD = ROOT / "_build"
HTML = BUILD / "html"
STAGE = BUILD / "site"
SOURCE = STAGE / "src"
STATIC = STAGE / "static"
EXTRA = STAGE / "extra"
DOCTREES = STAGE / "doctrees"
DOWNLOADS = "downloads"  # folder of _build/html that holds the .ipynb and .py of every chapter
SLIDES = "slides"  # folder of _build/html with every chapter's slide deck (tools/bookslides.py)
# The whole book as one PDF (`make pdf`, tools/bookpdf.py). A site built while it exists holds a
# copy beside index.html, and the landing page links it; without it there is no link.
PDF = BUILD / "pdf" / "the-annotated-transformer.pdf"
# The book's public GitHub repository is this key of pyproject.toml's [project.urls], and is written
# nowhere else: the site's launch links (`repository`) and the README's badges (tools/publish.py)
# are made from it, and stay out while it is unset.
PYPROJECT = ROOT / "pyproject.toml"
REPOSITORY_KEY = "Repository"
# The "Try the model" page's scripts, and the model they run: the book's shipped model, which
# annotated/export/browser_model.py writes (annotated/training/shipped.py reads it into PyTorch).
TRY = SITE / "try"
TRY_SCRIPTS = ("tokenizer.js", "subwords.js", "transformer.js", "page.js")
SHIPPED_DIR = PACKAGE / "model"


@dataclass(frozen=True)
class Chapter:
    """One chapter of the book, as the site shows it."""

    stem: str  # ch01_attention: the page is ch01_attention.html
    notebook: Path  # notebooks/ch01_attention.ipynb
    module: Path | None  # annotated/ch01_attention.py, its source (None if it has none)
    title: str  # the notebook's first heading: "Chapter 1 — Attention"
    paper: str  # "section 3.2 (...)" from the chapter's "*Paper: ...*" line, or ""


def _first_markdown(notebook: Path) -> str:
    cells = notebook_cells(notebook)
    return next((cell_source(c) for c in cells if c.get("cell_type") == "markdown"), "")


def chapter_page(notebook: Path) -> Chapter:
    """The chapter whose notebook is `notebook`, as the site shows it."""
    text = _first_markdown(notebook)
    heading = re.search(r"^#\s+(.+?)\s*$", text, re.M)
    paper = re.search(r"^\*Paper:\s*(.+?)\.?\*\s*$", text, re.M | re.S)
    module = PACKAGE / f"{notebook.stem}.py"
    return Chapter(
        stem=notebook.stem,
        notebook=notebook,
        module=module if module.exists() else None,
        title=heading.group(1) if heading else notebook.stem,
        paper=" ".join(paper.group(1).split()) if paper else "",
    )


# How fast a student reads a chapter, for the course page's "read" column: prose at 200 words a
# minute (careful reading of technical text), code at 100 (each line is read and understood), the
# total rounded up to 5 minutes. Words are runs of non-space characters in the notebook's cells.
PROSE_WORDS_A_MINUTE = 200
CODE_WORDS_A_MINUTE = 100


def reading_minutes(notebook: Path) -> int:
    """How long the chapter takes to read, from its word count (see PROSE_WORDS_A_MINUTE)."""
    minutes = 0.0
    for cell in notebook_cells(notebook):
        words = len(cell_source(cell).split())
        if cell.get("cell_type") == "markdown":
            minutes += words / PROSE_WORDS_A_MINUTE
        elif cell.get("cell_type") == "code":
            minutes += words / CODE_WORDS_A_MINUTE
    return 5 * max(1, math.ceil(minutes / 5))


def chapter_pages() -> list[Chapter]:
    """Every chapter's page, from its notebook, in reading (file name) order."""
    return [chapter_page(path) for path in chapter_notebooks(NOTEBOOKS)]


# --- staging -----------------------------------------------------------------------------------


def _write_if_changed(target: Path, data: bytes) -> None:
    """Write only when the bytes differ, so Sphinx (which re-reads newer files) skips the rest."""
    if target.exists() and target.read_bytes() == data:
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    target.chmod(0o644)


def _mirror(folder: Path, wanted: dict[str, bytes]) -> None:
    """Make `folder` hold exactly the files in `wanted` (name -> bytes), so removed chapters go."""
    folder.mkdir(parents=True, exist_ok=True)
    for path in folder.iterdir():
        if path.name not in wanted:
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    for name, data in wanted.items():
        _write_if_changed(folder / name, data)


def try_page_files() -> dict[str, bytes]:
    """The scripts of the "Try the model" page (site/try.md), and model-data.js: the exported
    model (annotated/model/model.json and model.bin, `make try-model`) as one script, the weights in
    base64, so that the page also loads it opened from disk, where a script may not fetch a file."""
    files = {name: (TRY / name).read_bytes() for name in TRY_SCRIPTS}
    manifest = json.loads((SHIPPED_DIR / "model.json").read_text(encoding="utf-8"))
    weights = (SHIPPED_DIR / "model.bin").read_bytes()
    if hashlib.sha256(weights).hexdigest() != manifest["bin_sha256"]:
        raise SystemExit(
            "annotated/model/model.bin is not the file model.json describes: run `make try-model`"
        )
    data = {"manifest": manifest, "weights": base64.b64encode(weights).decode("ascii")}
    files["model-data.js"] = (
        "// Written by tools/booksite.py from annotated/model/model.json and model.bin.\n"
        f"window.AnnotatedTryData = {json.dumps(data, ensure_ascii=False, separators=(',', ':'))};\n"
    ).encode()
    return files


def page_source(notebook: Path) -> bytes:
    """The notebook as the site renders it: each chart output keeps only its HTML form.

    A chart output also carries its Vega-Lite spec, for JupyterLab and VS Code; myst-nb cannot
    draw that type and would warn about it on every chart. A chart saved without its HTML form
    (the notebook was run outside `make book`) would show as a line of text, so it is an error.
    """
    content = json.loads(notebook.read_text(encoding="utf-8"))
    for index, cell in enumerate(content.get("cells", [])):
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            specs = [name for name in data if name.startswith("application/vnd.vegalite.")]
            if specs and "text/html" not in data:
                raise SystemExit(
                    f"{notebook.relative_to(ROOT)}, cell {index}: a chart without its HTML form "
                    "(the notebook was executed outside the book's tools): run `make execute`"
                )
            for name in specs:
                del data[name]
    return (json.dumps(content, indent=1, ensure_ascii=False) + "\n").encode("utf-8")


def _bundle_key() -> str:
    """What the vega bundle depends on: vl-convert's release, Vega-Lite's version, our wrapper."""
    import hashlib
    from importlib.metadata import version

    import altair

    from annotated.figures import vega_snippet

    wrapper = hashlib.sha256(vega_snippet().encode()).hexdigest()[:12]
    vega = f"vl-convert-python {version('vl-convert-python')}, Vega-Lite {altair.SCHEMA_VERSION}"
    return f"{vega}, wrapper {wrapper}"


def stage() -> list[Chapter]:
    """Lay out _build/site/ for Sphinx (see the module docstring) and return the chapters."""
    found = chapter_pages()
    if not found:
        raise SystemExit(f"no chapter notebooks in {NOTEBOOKS}: run `make notebooks` first")
    pages = {c.notebook.name: page_source(c.notebook) for c in found}
    extra_pages = {name: (SITE / name).read_bytes() for name in ("index.md", "course.md", "try.md")}
    _mirror(SOURCE, extra_pages | pages)
    downloads = {c.notebook.name: c.notebook.read_bytes() for c in found}
    downloads |= {c.module.name: c.module.read_bytes() for c in found if c.module}
    _mirror(EXTRA / DOWNLOADS, downloads)
    from tools import bookslides  # the decks, beside the pages that link them

    bookslides.build(EXTRA / SLIDES)

    _mirror(STATIC / "try", try_page_files())

    # The bundle takes a few seconds to make and only changes with vl-convert or Vega-Lite.
    from annotated.figures import BUNDLE_NAME, write_vega_bundle

    key, stamp = _bundle_key(), STAGE / (BUNDLE_NAME + ".version")
    if not (STATIC / BUNDLE_NAME).exists() or not stamp.exists() or stamp.read_text() != key:
        write_vega_bundle(STATIC).chmod(0o644)
        stamp.write_text(key)
    return found


def build(
    html: Path = HTML,
    quiet: bool = True,
    builder: str = "html",
    settings: dict[str, str] | None = None,
) -> Path:
    """Stage the sources and run Sphinx; return the path of index.html. Raise if Sphinx fails.

    `builder="singlehtml"` makes the whole book one page (tools/bookpdf.py prints it), with a
    cache of its own beside the site's. `settings` override site/conf.py's (sphinx-build -D),
    in a build with a cache of its own, as does a site built into another folder than _build/html
    (a test's).
    """
    from sphinx.cmd.build import build_main

    stage()
    doctrees = DOCTREES if builder == "html" else STAGE / f"doctrees-{builder}"
    if settings or (builder == "html" and html != HTML):
        doctrees = html.parent / f"{html.name}-doctrees"
    args = ["-b", builder, "-c", str(SITE), "-d", str(doctrees), "-W", "--keep-going"]
    for name, value in (settings or {}).items():
        args += ["-D", f"{name}={value}"]
    if quiet:
        args.append("-q")
    status = build_main([*args, str(SOURCE), str(html)])
    if status != 0:
        raise RuntimeError(f"sphinx-build failed with status {status} (its messages are above)")
    return html / "index.html"


# --- the Sphinx extension (loaded by site/conf.py) -----------------------------------------------


def _relative(docname: str, target: str) -> str:
    return "../" * docname.count("/") + target


def _download_links(docname: str, chapter: Chapter, lead: str = "Download this chapter: "):
    """A paragraph of links to the chapter's notebook and Python source."""
    from docutils import nodes

    paragraph = nodes.paragraph(classes=["chapter-downloads"])
    if lead:
        paragraph += nodes.Text(lead)
    files = [(chapter.notebook.name, "notebook")]
    if chapter.module:
        files.append((chapter.module.name, "Python source"))
    for index, (name, label) in enumerate(files):
        if index:
            paragraph += nodes.Text(" · ")
        link = nodes.reference("", "", refuri=_relative(docname, f"{DOWNLOADS}/{name}"))
        link["classes"].append("download")
        link["reftitle"] = f"{name}: the {label} of {chapter.title}"
        suffix = name.rsplit(".", 1)[-1]
        link += nodes.Text(f"{label} (.{suffix})" if lead else f".{suffix}")
        paragraph += link
    paragraph += nodes.Text(" · ")
    paragraph += _slides_link(docname, chapter, "Slides" if lead else "slides")
    return paragraph


def _slides_link(docname: str, chapter: Chapter, text: str):
    """A link to the chapter's slide deck (reveal.js; "s" opens the speaker's notes)."""
    from docutils import nodes

    link = nodes.reference("", text, refuri=_relative(docname, f"{SLIDES}/{chapter.stem}.html"))
    link["classes"].append("slides")
    link["reftitle"] = f"{chapter.title}: the lecture's slides (press s for the speaker's notes)"
    return link


GITHUB = re.compile(r"https://github\.com/(?P<owner>[\w.-]+)/(?P<name>[\w.-]+?)/?")
LAUNCH_BRANCH = "main"  # the branch whose notebooks Colab and Binder open


def owner_and_name(repository: str) -> tuple[str, str]:
    """("OWNER", "NAME") of https://github.com/OWNER/NAME; a ValueError saying what to write
    for any other address."""
    found = GITHUB.fullmatch(repository)
    if found is None:
        raise ValueError(
            f"the book's repository must be a GitHub address like https://github.com/OWNER/NAME, "
            f"got {repository!r}: correct {REPOSITORY_KEY} in pyproject.toml's [project.urls] "
            "(or remove it: no links to the repository are made)"
        )
    return found["owner"], found["name"]


def repository(pyproject: Path | None = None) -> str:
    """The book's public GitHub address, pyproject.toml's [project.urls] Repository, as written
    there (`owner_and_name` checks it); "" while it is unset."""
    text = (pyproject or PYPROJECT).read_text(encoding="utf-8")
    return tomllib.loads(text)["project"].get("urls", {}).get(REPOSITORY_KEY, "")


def launch_links(repository: str, notebook: str) -> list[tuple[str, str]]:
    """(label, address) of the services that run `notebooks/<notebook>` from the book's public
    repository: Colab opens the notebook itself, Binder builds the repository's binder/ folder
    (torch's CPU build, then the book and its packages) and opens the notebook in JupyterLab."""
    owner, name = owner_and_name(repository)
    path = f"notebooks/{notebook}"
    return [
        (
            "Open in Colab",
            f"https://colab.research.google.com/github/{owner}/{name}/blob/{LAUNCH_BRANCH}/{path}",
        ),
        (
            "Binder",
            f"https://mybinder.org/v2/gh/{owner}/{name}/{LAUNCH_BRANCH}"
            f"?labpath={path.replace('/', '%2F')}",
        ),
    ]


def _launch_paragraph(repository: str, chapter: Chapter):
    """ "Run this chapter: Open in Colab · Binder", for a chapter page."""
    from docutils import nodes

    paragraph = nodes.paragraph(classes=["chapter-downloads", "chapter-launch"])
    paragraph += nodes.Text("Run this chapter: ")
    for index, (label, address) in enumerate(launch_links(repository, chapter.notebook.name)):
        if index:
            paragraph += nodes.Text(" · ")
        link = nodes.reference("", label, refuri=address)
        link["reftitle"] = f"{label}: {chapter.title}, from {repository}"
        paragraph += link
    return paragraph


def _check_repository(app, config) -> None:
    """A malformed address stops the build at once, with what to write instead; a good one also
    puts the theme's link to the repository in every page's header."""
    if not config.book_repository:
        return
    from sphinx.errors import ConfigError

    try:
        owner_and_name(config.book_repository)
    except ValueError as error:
        raise ConfigError(str(error)) from None
    config.html_theme_options = {
        **config.html_theme_options,
        "repository_url": config.book_repository,
        "repository_branch": LAUNCH_BRANCH,
        "use_repository_button": True,
    }


def _add_download_links(app, doctree) -> None:
    """Put the download links under the title of every chapter page, and the links that run it
    in Colab and Binder when pyproject.toml names the book's public repository."""
    from docutils import nodes

    docname = app.env.docname
    chapter = {c.stem: c for c in chapter_pages()}.get(docname)
    if chapter is None:
        return
    section = next(iter(doctree.findall(nodes.section)), None)
    if section is None or not section.children or not isinstance(section[0], nodes.title):
        return
    section.insert(1, _download_links(docname, chapter))
    if app.config.book_repository:
        section.insert(2, _launch_paragraph(app.config.book_repository, chapter))


def _chapter_map_directive():
    from docutils import nodes
    from sphinx import addnodes
    from sphinx.util.docutils import SphinxDirective

    class ChapterMap(SphinxDirective):
        """A table of every chapter: its title (linked), the paper's sections, its downloads."""

        has_content = False

        def run(self):
            found = chapter_pages()
            for chapter in found:
                self.env.note_dependency(str(chapter.notebook))
            table = nodes.table(classes=["chapter-map"])
            group = nodes.tgroup(cols=3)
            table += group
            for width in (30, 55, 15):
                group += nodes.colspec(colwidth=width)
            head = nodes.thead()
            group += head
            head += self._row([nodes.Text(text) for text in ("Chapter", "Paper", "Download")])
            body = nodes.tbody()
            group += body
            for chapter in found:
                link = addnodes.pending_xref(
                    "",
                    refdomain="std",
                    reftype="doc",
                    reftarget=chapter.stem,
                    refdoc=self.env.docname,
                    refexplicit=True,
                    refwarn=True,
                )
                link += nodes.inline(chapter.title, chapter.title)
                downloads = _download_links(self.env.docname, chapter, lead="")
                body += self._row([link, nodes.Text(chapter.paper or "—"), downloads])
            return [table]

        @staticmethod
        def _row(cells):
            row = nodes.row()
            for content in cells:
                entry = nodes.entry()
                if isinstance(content, nodes.paragraph):
                    entry += content
                else:
                    paragraph = nodes.paragraph()
                    paragraph += content
                    entry += paragraph
                row += entry
            return row

    return ChapterMap


def _slide_decks_directive():
    from docutils import nodes
    from sphinx.util.docutils import SphinxDirective

    class SlideDecks(SphinxDirective):
        """A list of every chapter's slide deck, linked (the course page's)."""

        has_content = False

        def run(self):
            found = chapter_pages()
            for chapter in found:
                self.env.note_dependency(str(chapter.notebook))
            items = nodes.bullet_list(classes=["slide-decks"])
            for chapter in found:
                paragraph = nodes.paragraph()
                paragraph += _slides_link(self.env.docname, chapter, chapter.title)
                items += nodes.list_item("", paragraph)
            return [items]

    return SlideDecks


def _prune_mathjax(app, exception) -> None:
    """Drop the MathJax builds that no page loads (they are half of the site's size).

    sphinx-mathjax-offline copies MathJax's whole folder, a dozen combined builds among it. A page
    loads only `mathjax_path` (tex-chtml.js), which fetches what else it needs (fonts, TeX
    extensions, the accessibility menu's code) from the subfolders, which are kept.
    """
    entry = Path(app.outdir) / "_static" / app.config.mathjax_path
    if exception is not None or not entry.exists():
        return
    for path in entry.parent.glob("*.js"):
        if path != entry:
            path.unlink()


def _book_pdf_directive():
    from docutils import nodes
    from sphinx.util.docutils import SphinxDirective

    class BookPdf(SphinxDirective):
        """A link to the whole book as a PDF, only while `make pdf`'s file exists (no dead link)."""

        has_content = False

        def run(self):
            self.env.note_dependency(str(PDF))  # marks the page for _pages_that_link_the_pdf
            if not PDF.is_file():
                return []
            paragraph = nodes.paragraph(classes=["book-pdf"])
            paragraph += nodes.Text("To read offline or print, there is ")
            link = nodes.reference("", "", refuri=_relative(self.env.docname, PDF.name))
            link["classes"].append("download")
            link += nodes.Text("the whole book as a PDF")
            paragraph += link
            size = PDF.stat().st_size / 2**20
            paragraph += nodes.Text(f" ({size:.1f} MiB): every chapter, its charts and equations.")
            return [paragraph]

    return BookPdf


def _pages_that_link_the_pdf(app, env, added, changed, removed) -> list[str]:
    """Pages with a `book-pdf` directive are read again on every build: a PDF made, removed or
    put back (a restored copy keeps its old time) is no change Sphinx would notice otherwise."""
    linked = [doc for doc, files in env.dependencies.items() if str(PDF) in map(str, files)]
    return [doc for doc in linked if doc not in removed]


def _copy_pdf(app, exception) -> None:
    """Put `make pdf`'s file beside index.html, or take away a copy whose original is gone."""
    if exception is not None or app.builder.name != "html":
        return
    target = Path(app.outdir) / PDF.name
    if PDF.is_file():
        shutil.copy2(PDF, target)
    else:
        target.unlink(missing_ok=True)


def setup(app):
    # The book's public repository, from pyproject.toml (`repository`), as a setting: a change
    # of address makes Sphinx read every page again, and a test build may override it with -D.
    app.add_config_value("book_repository", repository(), "env", types=[str])
    app.connect("config-inited", _check_repository)
    app.add_directive("chapter-map", _chapter_map_directive())
    app.add_directive("book-pdf", _book_pdf_directive())
    app.add_directive("slide-decks", _slide_decks_directive())
    app.connect("env-get-outdated", _pages_that_link_the_pdf)
    app.connect("build-finished", _copy_pdf)
    app.connect("doctree-read", _add_download_links)
    app.connect("build-finished", _prune_mathjax, priority=900)  # after the MathJax copy
    return {"parallel_read_safe": True, "parallel_write_safe": True}


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--verbose", action="store_true", help="show every Sphinx message")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    index = build(quiet=not args.verbose)
    size = sum(path.stat().st_size for path in HTML.rglob("*") if path.is_file())
    print(
        f"site: {index.relative_to(ROOT)} ({len(chapter_pages())} chapters, "
        f"{size / 2**20:.1f} MiB) in {time.perf_counter() - started:.0f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
