"""The whole book as one PDF (`make pdf`, tools/bookpdf.py), read back with pypdf.

The PDF is built once for this module, as `make pdf` builds it: Sphinx's singlehtml builder makes
the book one page, headless Chromium prints it, and the HTML site is built again to link it.
Then the text pypdf extracts from it must show the book: every chapter starting a page, in reading
order; every chart's title (charts are drawn by JavaScript, so a title proves the chart was drawn
before printing); every line of code whole, the longest included (print.css wraps code; without
that a long line's end is clipped at its box and missing from the text); and type at the size
print.css sets (had anything stuck out past the page, Chromium would have shrunk every page to
fit it). Looked at as pictures (pdftoppm), no page shows a code cell's frame with no code in it.
The landing page links the PDF while it exists, and only then. Without Chromium (Debian's
`chromium` package, which `make browser` installs) the tests are skipped, and without pdftoppm
(Debian's `poppler-utils`, which it installs too) the pictures' test is.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
import unicodedata
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
import needs  # tests/needs.py
from browsing import run_site_script

from tools import bookpdf, booksite
from tools.chapters import cell_source, notebook_cells

CHAPTERS = booksite.chapter_pages()
# The most text an A4 page of this book can hold, whitespace runs counted as one character: a
# page of nothing but code at print.css's 11 px is about 100 characters by 62 lines. The densest
# page of the book measured about 4,300 (prose at 14 px holds fewer). So the chapters' markdown
# and code need at least (their characters / 6,000) pages; the book measured about 4 times that,
# since outputs, charts and drawings take the most room.
MOST_CHARACTERS_A_PAGE = 6_000
# And the least: the sparsest stretch of the book (a chapter of charts) averaged about 1,000
# characters a page, the whole book 2,000. A PDF with far more pages than the text needs at 500
# a page has lost its layout (code wrapping a word a line, say).
FEWEST_CHARACTERS_A_PAGE = 500
# print.css sets the prose at 14 CSS pixels, 10.5 points on paper. If any box stuck out past the
# page, Chromium shrinks every page to fit it, and the prose comes out smaller.
PROSE_POINTS = 14 * 0.75
# The pages as pictures (poppler-utils' pdftoppm, which `make browser` installs): gray, at 40 dots
# an inch, an A4 page is about 331 by 468 pixels and a line of code about 6 pixels tall.
PDFTOPPM = shutil.which("pdftoppm")
PICTURE_DPI = 40
# book.css's code-cell frame, in pdftoppm's gray: its ground #f3f6fa is 245, the rule down its left
# side #2b6cb0 is 96 (darker than 150 however it falls on the pixels), and the page around it white.
FRAME_GROUND = 245
FRAME_RULE = 150
WHITE = 252
# Code on the frame's ground: anything darker than this inside the frame's edges.
INK = 225
QUOTES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"'})


def normal(text: str) -> str:
    """Text as compared here: ligatures undone (NFKC: "ﬁ" -> "fi"), typographic quotes made
    plain, and no whitespace at all (a wrapped line breaks wherever the page's edge falls)."""
    return re.sub(r"\s+", "", unicodedata.normalize("NFKC", text).translate(QUOTES))


def chart_titles(chapter) -> list[str]:
    """The title of every chart saved in the chapter's notebook (its Vega-Lite spec's `title`)."""
    titles = []
    for cell in notebook_cells(chapter.notebook):
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            for name, spec in data.items():
                if name.startswith("application/vnd.vegalite.") and spec.get("title"):
                    title = spec["title"]
                    title = title.get("text", "") if isinstance(title, dict) else title
                    titles.append(" ".join(title) if isinstance(title, list) else str(title))
    return titles


def shown_code_cells() -> list[str]:
    """The code of every code cell the book shows (a removed cell or input is not printed)."""
    sources = []
    for chapter in CHAPTERS:
        for cell in notebook_cells(chapter.notebook):
            tags = set(cell.get("metadata", {}).get("tags", []))
            if cell["cell_type"] == "code" and not tags & {"remove-cell", "remove-input"}:
                sources.append(cell_source(cell))
    return sources


def shown_code_lines() -> list[str]:
    """Every line of every code cell the book shows."""
    return [line for source in shown_code_cells() for line in source.splitlines()]


def source_characters() -> int:
    """The chapters' markdown and code, whitespace runs counted as one character."""
    return sum(
        len(re.sub(r"\s+", " ", cell_source(cell)))
        for chapter in CHAPTERS
        for cell in notebook_cells(chapter.notebook)
        if cell["cell_type"] in {"markdown", "code"}
    )


# --- the PDF, built once ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def book() -> dict:
    """`make pdf`'s run: its report line, and the PDF's pages as pypdf reads them."""
    missing = bookpdf.chromium_missing()
    if missing:
        needs.missing(f"{missing}; `make test` runs `make browser` first")
    from pypdf import PdfReader

    report = run_site_script("bookpdf", "make pdf")
    reader = PdfReader(bookpdf.PDF)
    pages, sizes = [], Counter()
    for page in reader.pages:

        def visit(text, cm, tm, font, size):
            sizes[round(abs(size * tm[0] * cm[0]), 1)] += len(text.strip())

        pages.append(page.extract_text(visitor_text=visit))
    return {"report": report.strip(), "pages": pages, "sizes": sizes}


def chapter_starts(pages: list[str]) -> list[int]:
    """The page each chapter starts on: the first page whose text begins with its title."""
    starts = []
    for chapter in CHAPTERS:
        title = normal(chapter.title)
        found = [number for number, text in enumerate(pages) if normal(text).startswith(title)]
        assert found, f"no page starts with {chapter.title!r}"
        starts.append(found[0])
    return starts


# --- the pages as pictures ---------------------------------------------------------------------


def read_pgm(path: Path) -> np.ndarray:
    """A binary gray picture (PGM, as pdftoppm -gray writes it): rows of bytes, top row first."""
    data = path.read_bytes()
    head = re.match(rb"P5\s+(\d+)\s+(\d+)\s+255\s", data)
    assert head, f"{path.name} is no 8-bit PGM"
    width, height = int(head[1]), int(head[2])
    return np.frombuffer(data, np.uint8, width * height, head.end()).reshape(height, width)


def page_pictures(pdf: Path, folder: Path) -> list[np.ndarray]:
    """Every page of `pdf` as a gray picture, first page first."""
    command = [PDFTOPPM, "-r", str(PICTURE_DPI), "-gray", str(pdf), str(folder / "page")]
    subprocess.run(command, check=True, capture_output=True, timeout=600)
    # pdftoppm pads the page numbers to one width: page-001.pgm ... page-232.pgm
    return [read_pgm(path) for path in sorted(folder.glob("page-*.pgm"))]


def runs(flags: np.ndarray) -> list[tuple[int, int]]:
    """(first, last) index of each run of True in a row of flags."""
    edges = np.flatnonzero(np.diff(np.concatenate(([0], flags.astype(np.int8), [0]))))
    return [(int(first), int(end) - 1) for first, end in zip(edges[::2], edges[1::2], strict=True)]


def code_frames(picture: np.ndarray) -> list[tuple[int, int, int, int]]:
    """The inside of every code-cell frame on a page: (top, bottom, left, right), inclusive.

    A frame is found by its rule: a column of dark pixels, white just to their left (the page, or a
    folded cell's box) and the frame's ground just to their right (the code is indented past it),
    in the left third of the page. Its inside runs right to the first column that is white in
    most of its rows: an output box, a table or a chart on white ground has no such rule, and a
    blue line in a chart has no ground beside it.
    """
    third = picture.shape[1] // 3
    dark = picture[:, 2:third] < FRAME_RULE
    # white the two columns left of it: a glyph at the left edge of a tinted table row (a row
    # index's stroke) has the row's tint just left of it, a frame's rule the page
    white = (picture[:, : third - 2] >= WHITE) & (picture[:, 1 : third - 1] >= WHITE)
    ground = np.abs(picture[:, 5 : third + 3].astype(np.int16) - FRAME_GROUND) <= 3
    rule = dark & white & ground  # rule[y, x]: the rule at column x + 2
    frames = []
    for top, bottom in runs(rule.any(axis=1)):
        if bottom - top < 2:
            continue
        x = 2 + int(np.bincount(rule[top : bottom + 1].nonzero()[1]).argmax())
        band = picture[top : bottom + 1, x + 3 :]
        outside = (band >= WHITE).mean(axis=0) > 0.8
        right = x + 3 + (int(outside.argmax()) if outside.any() else outside.size)
        if right - x > picture.shape[1] // 2:  # as wide as the text, nearly
            frames.append((top, bottom, x + 3, right - 3))
    return frames


def empty_code_frames(pictures: list[np.ndarray]) -> tuple[int, list[str]]:
    """How many code frames the pages show, and where one has no ink inside its edges."""
    found, empty = 0, []
    for number, picture in enumerate(pictures, 1):
        for top, bottom, left, right in code_frames(picture):
            found += 1
            if not (picture[top + 1 : bottom, left : right + 1] < INK).any():
                tall = (bottom - top + 1) / picture.shape[0]
                empty.append(f"page {number} ({tall:.0%} of it)")
    return found, empty


# --- tests -------------------------------------------------------------------------------------


def test_the_pdf_has_a_page_count_its_text_can_fill(book):
    pages = book["pages"]
    least = max(len(CHAPTERS) + 2, source_characters() // MOST_CHARACTERS_A_PAGE)
    most = source_characters() // FEWEST_CHARACTERS_A_PAGE
    assert least <= len(pages) <= most, f"{len(pages)} pages, outside [{least}, {most}]"
    assert f"({len(pages)} pages, " in book["report"], book["report"]
    assert bookpdf.page_count(bookpdf.PDF.read_bytes()) == len(pages)
    # Every page's foot carries its number and the total.
    unnumbered = [n + 1 for n, text in enumerate(pages) if f"{n + 1} / {len(pages)}" not in text]
    assert not unnumbered, f"pages without their number: {unnumbered[:10]}"


def test_every_chapter_starts_a_page_in_reading_order(book):
    """Each chapter's title heads a page of its own, after the landing page, in file-name order."""
    starts = chapter_starts(book["pages"])
    assert starts[0] > 0, "the landing page comes first"
    assert starts == sorted(set(starts)), f"chapters out of order: {starts}"


def test_every_chart_is_drawn_in_its_chapter(book):
    """Vega draws a chart's title as SVG text, which stays text in the PDF: a title found proves
    the chart was drawn before the page was printed."""
    pages = book["pages"]
    starts = chapter_starts(pages) + [len(pages)]
    charts = 0
    for index, chapter in enumerate(CHAPTERS):
        text = normal(" ".join(pages[starts[index] : starts[index + 1]]))
        for title in chart_titles(chapter):
            charts += 1
            assert normal(title) in text, f"{chapter.stem}: no chart titled {title!r}"
    assert charts >= 10, f"only {charts} charts found in the notebooks"


def test_no_line_of_code_is_cut(book):
    """Every line of code the book shows is in the PDF whole, the longest first among them.

    The code is formatted at 100 characters, which fit on a line of A4 at print.css's size;
    a longer line wraps inside its box. Without print.css's wrapping such a line runs past its
    box and is clipped there, and its end is missing from the PDF's text: with a 130-character
    line put in a chapter and the wrapping taken out, this test failed.
    """
    lines = sorted({line for line in shown_code_lines() if line.strip()}, key=len, reverse=True)
    text = normal(" ".join(book["pages"]))
    cut = [line for line in lines if normal(line) not in text]
    assert not cut, f"{len(cut)} of {len(lines)} lines cut, the longest: {cut[:3]}"
    assert len(lines) > 1000 and len(lines[0]) >= 80, f"too little code found: {lines[:1]}"


def test_nothing_made_chromium_shrink_the_pages(book):
    """The prose is printed at print.css's size: nothing stuck out past the page's right edge
    (Chromium would have shrunk every page to fit it, the longest code line included)."""
    size, _ = book["sizes"].most_common(1)[0]
    assert size == pytest.approx(PROSE_POINTS, abs=0.1), f"prose at {size} pt: {book['sizes']}"


def test_the_landing_page_links_the_pdf_only_while_it_exists(book):
    site = booksite.HTML
    link = f'href="{bookpdf.PDF.name}"'
    assert link in (site / "index.html").read_text(encoding="utf-8")
    assert (site / bookpdf.PDF.name).read_bytes() == bookpdf.PDF.read_bytes()
    # Without the PDF a site build shows no link (and no stale copy); with it, the link is back.
    kept = bookpdf.PDF.with_name(bookpdf.PDF.name + ".kept")
    shutil.move(bookpdf.PDF, kept)
    try:
        run_site_script("booksite", "the site's build")
        assert link not in (site / "index.html").read_text(encoding="utf-8")
        assert not (site / bookpdf.PDF.name).exists()
    finally:
        shutil.move(kept, bookpdf.PDF)  # the PDF back, with its old time
        run_site_script("booksite", "the site's build")
    assert link in (site / "index.html").read_text(encoding="utf-8")
    assert (site / bookpdf.PDF.name).exists()


def test_no_code_frame_is_left_empty(book, tmp_path):
    """Every piece of a code cell's frame (book.css's tinted box with its rule) holds code.

    The theme lays a cell's frame (div.cell_input) and the code in it out as flexboxes and keeps
    the code whole: when it did not fit on the rest of a page, Chromium moved it to the next one
    and painted the frame's first piece down to the page's foot, empty (58 such pieces in a build
    of 239 pages, from 1% to 84% of a page tall; print.css now makes them blocks that break with
    their code). Each page is looked at as a picture: the frames are found by their rule and
    ground, and a piece with nothing darker than its ground inside is reported.
    """
    if PDFTOPPM is None:
        needs.missing(
            "no pdftoppm to look at the pages: run `make browser`, which installs Debian's "
            "poppler-utils package with apt-get when it runs as root"
        )
    started = time.perf_counter()
    pictures = page_pictures(bookpdf.PDF, tmp_path)
    assert len(pictures) == len(book["pages"]), f"{len(pictures)} pictures"
    found, empty = empty_code_frames(pictures)
    seconds = time.perf_counter() - started
    # Each cell shown is one frame at least (more when it breaks across pages): fewer found means
    # that the frames look different now and this test would find none of them empty.
    cells = sum(1 for source in shown_code_cells() if source.strip())
    assert found >= cells, f"{found} code frames found on {len(pictures)} pages, for {cells} cells"
    assert not empty, f"{len(empty)} of {found} code frames are empty ({seconds:.0f} s): {empty}"
