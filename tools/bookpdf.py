"""Print the whole book as one PDF, from the saved notebooks (nothing is re-executed).

    python -m tools.bookpdf       # `make pdf` -> _build/pdf/the-annotated-transformer.pdf

Three steps:

1. Sphinx's `singlehtml` builder, with the site's own settings (site/conf.py), makes the whole
   book one page in `_build/print/index.html`: the landing page, then every document its toctree
   lists in that order, the chapters `ch*` in file-name order (the site's navigation) and then the
   course page.
2. Headless Chromium (Debian's package, driven by Playwright: the browser tests/test_site.py
   uses) opens that page from disk with the network off, in a window as wide as the paper's text,
   and waits for the page's scripts: every chart box holds the SVG that vega drew, MathJax has
   typeset every equation, the fonts are loaded. Then, laid out for print:
   - every folded `<details>` (exercise answers, the exercises' solution code) is opened, since
     paper cannot be clicked: the PDF holds the whole book, answers included, each still under
     its "Answer" or "Show code cell source" line, so a reader can cover it;
   - each chapter's headings move up so its title is an `<h1>`, as on its own page (the single
     page nests the chapters in the landing page's last section);
   - a block of code under six lines is marked to stay on one page: print.css lets code break
     between its lines, with its frame, but keeps three lines at least on either side;
   - a table or a display equation (MathJax does not break lines) wider than the page is made
     smaller until it fits; anything else that sticks out past the right edge (a line of code
     that did not wrap, say) stops the build with its name, since Chromium would otherwise
     shrink every page of the book to fit it, or clip it.
3. `page.pdf()` prints it on A4 with `site/_static/print.css` (media print, also used when a reader
   prints a page of the site): no sidebars or buttons, code wrapped instead of clipped, charts
   and drawings scaled to the page's width, each chapter on a new page, page numbers in the
   footer. The file is written atomically, then the HTML site is built again so that its
   landing page links a copy of it (booksite's `book-pdf` directive; no PDF, no link).

Why Chromium and not a Sphinx PDF builder: the book's charts are Vega-Lite specs drawn by
JavaScript in the page, and its equations are typeset by MathJax in the page. Sphinx's `latex`
builder needs a TeX installation the book does not have (and would turn the charts into nothing),
and rinohtype or rst2pdf would be new dependencies that run no JavaScript either, so every chart
would be missing or need a second, static rendering path. Chromium is already what the book
installs for its browser tests (`make browser`); printing the page it already checks gives a PDF
that shows exactly what the site shows, with real, searchable text (SVG text stays text).
"""

from __future__ import annotations

import html
import os
import re
import sys
import time
from pathlib import Path

from tools import booksite

PRINT = booksite.BUILD / "print"  # the one-page HTML form of the book that Chromium prints
PDF = booksite.PDF
CHROMIUM = os.environ.get("ANNOTATED_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--host-resolver-rules=MAP * ~NOTFOUND",  # no name resolves: nothing can leave the machine
]
TITLE = "The Annotated Transformer"  # on every page's foot, beside its number
WAIT_MS = 180_000  # the most to wait for the page's charts and equations
# The page box: A4, with room at the foot for the page number.
MARGIN = {"top": "14mm", "bottom": "16mm", "left": "14mm", "right": "14mm"}
VIEWPORT = {"width": 688, "height": 1010}  # A4 less those margins, in CSS pixels (96 per inch)
FOOTER = (
    '<div style="width:100%; margin: 0 14mm; font-size:8px; color:#666; '
    'font-family: sans-serif; display:flex; justify-content:space-between">'
    "<span>{title}</span>"
    '<span><span class="pageNumber"></span> / <span class="totalPages"></span></span></div>'
)

# Every chart box drawn (or given up on: a box with text in it is a chart that failed to load).
_CHARTS_SETTLED = """() => Array.from(document.querySelectorAll('.annotated-chart'))
  .every(box => box.querySelector('svg') || box.textContent.trim())"""
_UNDRAWN = """() => Array.from(document.querySelectorAll('.annotated-chart'))
  .filter(box => !box.querySelector('svg')).map(box => box.id + ': ' + box.textContent.trim())"""
_MATHJAX = """async () => {
  if (document.querySelector('.math')) {
    await MathJax.startup.promise;
  }
  await document.fonts.ready;
  const raw = Array.from(document.querySelectorAll('span.math, div.math'))
    .filter(box => !box.querySelector('mjx-container'));
  return raw.length + document.querySelectorAll('mjx-merror').length;
}"""
_MATHJAX_STARTED = """() => !document.querySelector('.math')
  || !!(window.MathJax && MathJax.startup && MathJax.startup.promise)"""
# Paper cannot be clicked: every fold is opened. Then each document Sphinx put on the one page
# (a <span id="document-NAME"> and its section) has its headings renumbered so that its title is
# an <h1>, as on its own page; the PDF's outline is made from the headings.
_PREPARE = """() => {
  document.querySelectorAll('details').forEach(fold => { fold.open = true; });
  // Code breaks between its lines on paper, at least 3 of them on either side (print.css); a
  // block too short for that is marked to go to the next page whole, with its frame: Chromium
  // would rather split it than move it.
  for (const code of document.querySelectorAll('div.cell div.cell_input pre')) {
    if (code.textContent.trimEnd().split('\\n').length < 6) {
      code.closest('div.cell_input').classList.add('annotated-print-whole');
    }
  }
  const tags = 'h1, h2, h3, h4, h5, h6';
  for (const start of document.querySelectorAll('span[id^="document-"] + section')) {
    const title = start.querySelector(tags);
    const shift = title ? Number(title.tagName[1]) - 1 : 0;
    if (!shift) continue;
    for (const old of start.querySelectorAll(tags)) {
      const heading = document.createElement('h' + Math.max(1, Number(old.tagName[1]) - shift));
      for (const attribute of old.attributes) heading.setAttribute(attribute.name, attribute.value);
      heading.append(...old.childNodes);
      old.replaceWith(heading);
    }
  }
  return document.querySelectorAll('details:not([open])').length;
}"""
_NEXT_FRAMES = """() => new Promise(done =>
  requestAnimationFrame(() => requestAnimationFrame(() => done(true))))"""
# Laid out for print at the paper's width, a table or an equation (which MathJax does not break)
# that still sticks out past the right edge is zoomed out until it fits. Returns whatever else
# sticks out, a line of code for one, which must wrap instead (print.css). MathJax's hidden copy
# of each equation for screen readers is no box on the page.
_FIT = """() => {
  const limit = document.documentElement.clientWidth + 1;
  const wide = () => {
    const found = [];
    for (const el of document.querySelectorAll('.bd-article *')) {
      if (el.closest('mjx-assistive-mml') || found.some(outer => outer.contains(el))) continue;
      const box = el.getBoundingClientRect();
      if (box.width && box.right > limit) found.push(el);
    }
    return found;
  };
  for (let round = 0; round < 5; round++) {  // a table's columns reflow when it is zoomed
    const found = wide();
    if (!found.length) break;
    for (const el of found) {
      const target = el.closest('table, mjx-container');
      if (!target) continue;
      const left = target.getBoundingClientRect().left, right = el.getBoundingClientRect().right;
      const scale = (Number(target.dataset.printScale) || 1) * (limit - 2 - left) / (right - left);
      target.dataset.printScale = String(Math.floor(1000 * scale) / 1000);
      target.style.fontSize = `${100 * Number(target.dataset.printScale)}%`;
    }
  }
  const boxes = new Set(wide().map(el => el.closest('pre, table, figure, p, li, div') || el));
  return Array.from(boxes, el => `${el.tagName.toLowerCase()} in `
    + `#${(el.closest('section') || {}).id}: ${el.textContent.trim().slice(0, 60)}`);
}"""


def chromium_missing() -> str | None:
    """Why the PDF cannot be printed here, or None when Chromium and Playwright are there."""
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        return (
            f"no Chromium at {CHROMIUM}: run `make browser`, which installs Debian's chromium "
            "package with apt-get when it runs as root (the PDF is printed with it), "
            "or point ANNOTATED_CHROMIUM at a Chromium binary"
        )
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is missing: run `make setup` (the docs extra)"
    return None


def page_count(data: bytes) -> int:
    """The pages of a PDF that Chromium wrote (each page is an object of /Type /Page)."""
    return len(re.findall(rb"/Type\s*/Page\b", data))


def _ready(page) -> None:
    """Wait for the page's scripts: every chart drawn, every equation typeset, fonts loaded."""
    page.wait_for_function(_CHARTS_SETTLED, timeout=WAIT_MS)
    undrawn = page.evaluate(_UNDRAWN)
    if undrawn:
        raise RuntimeError(f"{len(undrawn)} charts were not drawn: {undrawn[:3]}")
    page.wait_for_function(_MATHJAX_STARTED, timeout=WAIT_MS)
    left = page.evaluate(_MATHJAX)
    if left:
        raise RuntimeError(f"{left} equations were left untypeset or have TeX errors")


def print_pdf(index: Path) -> bytes:
    """The PDF of the one-page book at `index`, as Chromium prints it with the network off."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_FLAGS, headless=True
        )
        try:
            # The window is as wide as the paper's text, so that what lays itself out to the
            # window's width (the theme, a chart's panels) does so to the page's.
            context = browser.new_context(offline=True, viewport=VIEWPORT)
            page = context.new_page()
            page.set_default_timeout(WAIT_MS)
            page.goto(index.resolve().as_uri(), wait_until="load")
            _ready(page)
            page.emulate_media(media="print")
            closed = page.evaluate(_PREPARE)
            if closed:
                raise RuntimeError(f"{closed} folds of the page could not be opened")
            # A fold opened by a script is laid out at the next frame: printed before it, the
            # fold's content (the exercises' solutions, the install cell) is missing from the PDF.
            page.evaluate(_NEXT_FRAMES)
            wide = page.evaluate(_FIT)
            if wide:
                raise RuntimeError(f"{len(wide)} boxes stick out past the page: {wide[:5]}")
            return page.pdf(
                format="A4",
                print_background=True,
                margin=MARGIN,
                display_header_footer=True,
                header_template="<span></span>",
                footer_template=FOOTER.format(title=html.escape(TITLE)),
            )
        finally:
            browser.close()


def main(argv: list[str] | None = None) -> int:
    import argparse

    from annotated.base.files import atomic_write

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--verbose", action="store_true", help="show every Sphinx message")
    parser.add_argument(
        "--no-site",
        action="store_true",
        help="leave _build/html as it is (the next `make site` links the PDF)",
    )
    args = parser.parse_args(argv)
    missing = chromium_missing()
    if missing:
        raise SystemExit(f"make pdf: {missing}")
    started = time.perf_counter()
    index = booksite.build(PRINT, quiet=not args.verbose, builder="singlehtml")
    data = print_pdf(index)
    with atomic_write(PDF) as handle:
        handle.write(data)
    if not args.no_site:
        booksite.build(quiet=not args.verbose)  # the landing page now links the PDF
    print(
        f"pdf: {PDF.relative_to(booksite.ROOT)} ({page_count(data)} pages, "
        f"{len(data) / 2**20:.1f} MiB) in {time.perf_counter() - started:.0f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
