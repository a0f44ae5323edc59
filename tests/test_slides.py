"""The chapters' slide decks, as a teacher opens them: from disk, offline, at 1280 x 720, in Chromium.

The decks are built afresh into an empty folder, as `make slides` builds them (tools/bookslides.py),
from the chapters' marked cells and the notebooks' saved outputs. Then every deck is opened from
disk (file://) in a browser context that is offline, with every request that is not file://
aborted and recorded, and every slide is shown in turn, its fragments too. On every slide:

- nothing sticks out of reveal.js's slide box and nothing scrolls (the slide, a box in it, the page);
- no text is smaller than the site's body size (16 px) once reveal.js has scaled the slide to the
  window: each text's computed size, times the scale of the drawing it is in, times reveal.js's;
- no request leaves the machine, and the console stays free of errors.

Each deck holds the chapter's argument in 6 to 40 slides (3 or more for chapters 10 and 11, which
are short); the arrow keys move between slides; the "s" key opens the speaker's window, which
shows the slide's notes. The checks are functions of what the page reports, so that the tests
at the end can show each one fail on a planted defect: a printed output too long for its slide,
text too small, a picture loaded from another host. Without Chromium the browser tests are
skipped with the reason (failed where $ANNOTATED_REQUIRE_ALL is set: tests/needs.py).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from needs import missing

ROOT = Path(__file__).resolve().parent.parent
from tools import bookslides
from tools.chapters import chapter_notebooks

CHAPTERS = [path.stem for path in chapter_notebooks()]
SHORT = {"ch10_conclusion", "ch11_lab_notebook"}  # short chapters: three slides will do
SCREEN = {"width": 1280, "height": 720}
WAIT_MS = 30_000

# Ready: the charts drawn, reveal.js started (site/slides/deck.js), MathJax done typesetting.
_READY = """() => document.documentElement.dataset.deckReady === '1' && window.MathJax
  && MathJax.startup && MathJax.startup.promise ? MathJax.startup.promise.then(() => true) : false"""

# Every slide in reveal.js's order, as [h, v] indices.
_SLIDES = """() => Reveal.getSlides().map(slide => {
  const i = Reveal.getIndices(slide);
  return [i.h, i.v || 0];
})"""

# The slide shown now, all its fragments shown, measured against its box and the body size.
_MEASURE = """([h, v, least]) => {
  Reveal.slide(h, v);
  const slide = Reveal.getCurrentSlide();
  slide.querySelectorAll('.fragment').forEach(part => part.classList.add('visible'));
  const scale = Reveal.getScale();
  const box = document.querySelector('.reveal .slides').getBoundingClientRect();
  const left = node => node.closest('aside.notes, mjx-assistive-mml');
  // MathJax draws a stretched bracket by clipping a long run of one glyph: not a scroll box.
  const drawnMath = node => node.closest('mjx-container');
  const name = el => (el.tagName.toLowerCase() + (el.className && el.className.baseVal === undefined
    ? '.' + String(el.className).trim().split(/\\s+/).join('.') : '')).slice(0, 60);
  const outside = [], scrolling = [], small = [];
  for (const el of [slide, ...slide.querySelectorAll('*')]) {
    if (left(el) || !el.getClientRects().length) continue;
    const r = el.getBoundingClientRect();
    const parentOut = el !== slide && outside.some(o => o.el.contains(el));
    if (!parentOut && (r.left < box.left - 1 || r.right > box.right + 1
        || r.top < box.top - 1 || r.bottom > box.bottom + 1)) {
      outside.push({el: el, text: `${name(el)} at ${Math.round(r.left - box.left)}..` +
        `${Math.round(r.right - box.left)} x ${Math.round(r.top - box.top)}..` +
        `${Math.round(r.bottom - box.top)} px`});
    }
    if (!drawnMath(el) && (el.scrollHeight > el.clientHeight + 1 || el.scrollWidth > el.clientWidth + 1)) {
      const style = getComputedStyle(el);
      const clips = [style.overflowX, style.overflowY].some(o => o !== 'visible');
      if (clips || el === slide) scrolling.push(`${name(el)} (${el.scrollWidth} x ` +
        `${el.scrollHeight} in ${el.clientWidth} x ${el.clientHeight})`);
    }
  }
  const page = document.scrollingElement;
  if (page.scrollHeight > innerHeight + 1 || page.scrollWidth > innerWidth + 1) {
    scrolling.push(`the page (${page.scrollWidth} x ${page.scrollHeight})`);
  }
  const walker = document.createTreeWalker(slide, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const el = node.parentElement;
    if (!node.textContent.trim() || left(el) || !el.getClientRects().length) continue;
    const style = getComputedStyle(el);
    if (style.visibility === 'hidden' || style.display === 'none') continue;
    const inSvg = el instanceof SVGElement && el.tagName !== 'svg';
    const m = inSvg ? el.getCTM() : null;  // a rotated label's size is the matrix's scale
    const drawn = m ? Math.hypot(m.a, m.b) : 1;
    const px = parseFloat(style.fontSize) * drawn * scale;
    if (px < least - 0.05) small.push(`${JSON.stringify(node.textContent.trim().slice(0, 40))} ${px.toFixed(1)} px`);
  }
  return {title: (slide.querySelector('h1, h2') || {}).textContent || '', scale: scale,
          outside: outside.map(o => o.text).slice(0, 5), scrolling: scrolling.slice(0, 5),
          small: small.slice(0, 8), fragments: slide.querySelectorAll('.fragment').length};
}"""


# --- the decks, and a deck opened ----------------------------------------------------------------


@pytest.fixture(scope="module")
def decks(tmp_path_factory) -> Path:
    """Every chapter's deck, built afresh into an empty folder by `python -m tools.bookslides --out`."""
    if not (bookslides.REVEAL / "dist" / "reveal.js").is_file():
        missing(
            "reveal.js is not installed in tools/revealjs/node_modules: `make slides` (which "
            "`make test` runs) installs it with `npm ci` from the pinned package-lock.json"
        )
    out = tmp_path_factory.mktemp("slides")
    result = subprocess.run(
        [sys.executable, "-m", "tools.bookslides", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, f"the decks' build failed:\n{result.stdout}\n{result.stderr}"
    return out


class DeckReport:
    """What a deck did while it was open: requests that were not file://, errors, popups."""

    def __init__(self, context, page):
        self.foreign: list[str] = []
        self.errors: list[str] = []
        context.route("**/*", self._route)
        context.on("request", self._request)
        page.on("console", self._console)
        page.on("pageerror", lambda error: self.errors.append(f"uncaught: {error}"))

    @staticmethod
    def is_local(url: str) -> bool:
        return urlsplit(url).scheme in {"file", "data", "blob", "about"}

    def _route(self, route) -> None:
        if self.is_local(route.request.url):
            route.continue_()
        else:
            self._request(route.request)
            route.abort("blockedbyclient")

    def _request(self, request) -> None:
        if not self.is_local(request.url) and request.url not in self.foreign:
            self.foreign.append(request.url)

    def _console(self, message) -> None:
        if message.type == "error":
            self.errors.append(f"console: {message.text}")


def open_deck(browser, path: Path):  # noqa: F811
    """A deck opened from disk in an offline context at 1280 x 720, started and typeset."""
    context = browser.new_context(viewport=SCREEN, offline=True)
    context.set_default_timeout(WAIT_MS)
    page = context.new_page()
    report = DeckReport(context, page)
    page.goto(path.resolve().as_uri(), wait_until="load")
    page.wait_for_function(_READY, timeout=WAIT_MS)
    return context, page, report


def measure(page, least: float = bookslides.BODY_PX) -> list[dict]:
    """Every slide of the open deck, measured (see _MEASURE)."""
    return [page.evaluate(_MEASURE, [h, v, least]) for h, v in page.evaluate(_SLIDES)]


# --- the checks, each a function of what the page reported ----------------------------------------


def misfits(slides: list[dict]) -> list[str]:
    """Each slide with something outside its box, something that scrolls, or text too small."""
    found = []
    for number, slide in enumerate(slides, start=1):
        where = f"slide {number} ({slide['title'].strip()[:50]!r})"
        if slide["outside"]:
            found.append(f"{where}: outside the slide's box: {slide['outside']}")
        if slide["scrolling"]:
            found.append(f"{where}: scrolls: {slide['scrolling']}")
        if slide["small"]:
            found.append(f"{where}: text below {bookslides.BODY_PX} px: {slide['small']}")
    return found


def slide_count_problem(stem: str, count: int) -> str:
    """ "" when a deck's number of slides suits a lecture, else what is wrong."""
    least = 3 if stem in SHORT else 6
    if least <= count <= 40:
        return ""
    return f"{stem}: {count} slides, where a lecture's deck holds {least} to 40"


def arrows_move(page) -> bool:
    """From the first slide, the right arrow reaches the second (past any fragments) and the left
    arrow comes back."""
    page.evaluate("() => Reveal.slide(0, 0, -1)")
    page.locator(".reveal").click(position={"x": 5, "y": 5})  # the deck has the keyboard
    for _ in range(
        1 + page.evaluate("() => Reveal.getCurrentSlide().querySelectorAll('.fragment').length")
    ):
        page.keyboard.press("ArrowRight")
    forward = page.evaluate("() => Reveal.getIndices().h")
    page.keyboard.press("ArrowLeft")
    back = page.evaluate("() => Reveal.getIndices().h")
    return forward == 1 and back == 0


def speaker_notes_shown(page) -> str:
    """The text the speaker's window shows for the first slide, after the "s" key opened it."""
    page.evaluate("() => Reveal.slide(0, 0)")
    with page.expect_popup(timeout=WAIT_MS) as opened:
        page.keyboard.press("s")
    notes = opened.value
    notes.wait_for_function(
        "() => { const v = document.querySelector('.speaker-controls-notes .value');"
        " return v && v.textContent.trim().length > 0; }",
        timeout=WAIT_MS,
    )
    shown = notes.evaluate(
        "() => document.querySelector('.speaker-controls-notes .value').textContent"
    )
    notes.close()
    return shown


def first_notes(page) -> str:
    return page.evaluate(
        "() => document.querySelector('.reveal .slides section aside.notes').textContent"
    )


def words(text: str) -> list[str]:
    return text.split()[:12]


# --- the tests ------------------------------------------------------------------------------------


@pytest.mark.parametrize("stem", CHAPTERS)
def test_every_slide_of_the_deck_fits_and_reads_from_disk_offline(decks, browser, stem):  # noqa: F811
    context, page, report = open_deck(browser, decks / f"{stem}.html")
    try:
        slides = measure(page)
        assert not slide_count_problem(stem, len(slides)), slide_count_problem(stem, len(slides))
        assert all(slide["scale"] == pytest.approx(1.0, abs=0.01) for slide in slides)
        problems = misfits(slides)
        assert not problems, f"{stem}:\n" + "\n".join(problems)
        assert arrows_move(page), f"{stem}: the arrow keys do not move between slides"
        assert words(speaker_notes_shown(page)) == words(first_notes(page)), stem
        assert not report.foreign, f"{stem}: requests that are not file://: {report.foreign}"
        assert not report.errors, f"{stem}: errors in the browser: {report.errors}"
    finally:
        context.close()


def test_every_chapter_has_a_deck_whose_title_slide_names_the_papers_sections(decks):
    """The first slide is the chapter's title with the paper's sections its title cell names
    (the copy task and the lab notebook are the book's own: they name none)."""
    from tools import booksite  # noqa: PLC0415  (it reads a chapter's paper line)

    for chapter in booksite.chapter_pages():
        page = (decks / f"{chapter.stem}.html").read_text(encoding="utf-8")
        first = page.split('<section class="title-slide">', 1)[1].split("</section>", 1)[0]
        assert f"<h1>{chapter.title}</h1>" in first, f"{chapter.stem}: no title slide"
        assert chapter.paper[:30] in " ".join(first.split()), f"{chapter.stem}: no paper line"
    assert {c.stem for c in booksite.chapter_pages() if not c.paper} <= SHORT | {"ch04_copy_task"}
    assert (decks / "assets" / "reveal" / "reveal.js").is_file()
    assert (decks / "assets" / "mathjax" / "tex-chtml.js").is_file()


def test_the_slide_count_of_a_lecture():
    assert slide_count_problem("ch01_attention", 6) == ""
    assert slide_count_problem("ch01_attention", 40) == ""
    assert "6 to 40" in slide_count_problem("ch01_attention", 5)
    assert "6 to 40" in slide_count_problem("ch01_attention", 41)
    assert slide_count_problem("ch10_conclusion", 3) == ""
    assert "3 to 40" in slide_count_problem("ch11_lab_notebook", 2)


# --- planted defects: each check fails where it should ----------------------------------------------


def _notebook(folder: Path, cells: list[dict]) -> Path:
    """A made-up chapter notebook: a title slide with notes, then `cells`."""
    title = {
        "cell_type": "markdown",
        "metadata": {"slideshow": {"slide_type": "slide"}},
        "source": "# Chapter 99 — Planted\n\n*Paper: none.*\n\nThe notes of the title slide.",
    }
    path = folder / "ch99_planted.ipynb"
    path.write_text(json.dumps({"cells": [title, *cells]}), encoding="utf-8")
    return path


def _output_cell(mark: str, output: dict) -> dict:
    return {
        "cell_type": "code",
        "metadata": {"slideshow": {"slide_type": mark}},
        "source": "show()",
        "outputs": [output],
    }


def _html(markup: str) -> dict:
    return {"output_type": "display_data", "data": {"text/html": markup}, "metadata": {}}


def _stream(lines: int) -> dict:
    return {"output_type": "stream", "name": "stdout", "text": "a line\n" * lines}


@pytest.fixture(scope="module")
def planted(decks, tmp_path_factory) -> Path:
    """A folder with the decks' assets and room for planted decks."""
    folder = tmp_path_factory.mktemp("planted")
    shutil.copytree(decks / "assets", folder / "assets")
    return folder


def _planted_deck(folder: Path, name: str, cells: list[dict]) -> Path:
    page, _ = bookslides.deck(_notebook(folder, cells))
    path = folder / f"{name}.html"
    path.write_text(page, encoding="utf-8")
    return path


def test_a_full_slide_continues_on_the_next(planted, browser):  # noqa: F811
    """Three printed outputs on one slide, each as long as the build lets one be: what does not
    fit moves to the slides after it, under the same title."""
    long = [_output_cell("slide", _stream(20)), _output_cell("-", _stream(20))]
    long.append(_output_cell("-", _stream(20)))
    context, page, _ = open_deck(browser, _planted_deck(planted, "full", long))
    try:
        slides = measure(page)
    finally:
        context.close()
    assert not misfits(slides), misfits(slides)
    titles = [slide["title"] for slide in slides[1:]]
    assert len(titles) >= 2 and titles[0] == "Chapter 99 — Planted", titles
    assert set(titles[1:]) == {"Chapter 99 — Planted (continued)"}, titles
    assert "more lines in the notebook" in (planted / "full.html").read_text()


def _misfits_of_one_slide(browser, planted, name: str, output: dict) -> list[str]:  # noqa: F811
    """What the checks find in a planted deck of one slide showing `output`."""
    context, page, _ = open_deck(
        browser, _planted_deck(planted, name, [_output_cell("slide", output)])
    )
    try:
        return misfits(measure(page))
    finally:
        context.close()


def test_an_output_too_long_for_its_slide_is_found(planted, browser):  # noqa: F811
    """One output taller than a whole slide (HTML the build does not cut) cannot continue."""
    tall = _html("<pre>" + "a line\n" * 40 + "</pre>")
    found = _misfits_of_one_slide(browser, planted, "tall", tall)
    assert found and found[0].startswith("slide 2") and "outside the slide's box" in found[0]
    assert "scrolls" in found[1], found


def test_text_below_the_body_size_is_found(planted, browser):  # noqa: F811
    small = _html('<p style="font-size: 12px">a caption too small to read</p>')
    found = _misfits_of_one_slide(browser, planted, "small", small)
    assert found == [
        "slide 2 ('Chapter 99 — Planted'): text below 16 px: "
        "['\"a caption too small to read\" 12.0 px']"
    ], found


def test_a_request_to_another_host_is_found(planted, browser):  # noqa: F811
    foreign = _html('<img src="https://example.org/picture.png" alt="from elsewhere">')
    context, page, report = open_deck(
        browser, _planted_deck(planted, "foreign", [_output_cell("slide", foreign)])
    )
    try:
        measure(page)
    finally:
        context.close()
    assert report.foreign == ["https://example.org/picture.png"]


def test_a_deck_without_keys_or_notes_is_found(planted, browser):  # noqa: F811
    """reveal.js started with its keyboard off: neither the arrows nor "s" do anything."""
    path = _planted_deck(planted, "no-keys", [_output_cell("slide", _stream(2))])
    script = (planted / "assets" / "deck.js").read_text(encoding="utf-8")
    (planted / "assets" / "deck-no-keys.js").write_text(
        script.replace('slideNumber: "c/t",', 'slideNumber: "c/t", keyboard: false,')
    )
    page_text = path.read_text(encoding="utf-8").replace("assets/deck.js", "assets/deck-no-keys.js")
    path.write_text(page_text, encoding="utf-8")
    context, page, _ = open_deck(browser, path)
    try:
        assert not arrows_move(page)
        with pytest.raises(Exception, match="Timeout"):
            page.evaluate("() => Reveal.slide(0, 0)")
            with page.expect_popup(timeout=3_000):
                page.keyboard.press("s")
    finally:
        context.close()


def test_a_slide_shows_what_a_cell_printed_but_not_its_logs():
    # The profiler's start and stop lines and progress bars go to stderr: a lecture has no use
    # for them (chapter 7's "where a step's time goes" showed four such lines above its chart).
    log = {"output_type": "stream", "name": "stderr", "text": "USDT: profiler_start\n"}
    said = {"output_type": "stream", "name": "stdout", "text": "7.3M parameters\n"}
    assert bookslides.render_output(log) == ""
    assert "7.3M parameters" in bookslides.render_output(said)


def test_a_tables_default_index_is_left_off_its_slide():
    """pandas' 0, 1, 2... index is a count, not data (chapter 2's offsets table showed it before
    its "offset k"): a slide leaves it off, and keeps any other index."""
    pd = pytest.importorskip("pandas")
    counted = bookslides.cut_table(pd.DataFrame({"offset k": [1, 2], "cos": [0.5, 0.2]}).to_html())
    assert "<th>0</th>" not in counted and "<th>1</th>" not in counted
    assert "<th></th>" not in counted and "<th>offset k</th>" in counted
    assert counted.count("<td>") == 4
    named = bookslides.cut_table(pd.DataFrame({"BLEU": [40.1]}, index=["beam"]).to_html())
    assert "<th>beam</th>" in named and "<th></th>" in named


def test_chapter_7s_training_slide_shows_the_curves():
    """The "2. Training" slide carries the run's curves, not only the lines the run prints."""
    notebook = json.loads((bookslides.NOTEBOOKS / "ch07_multi30k.ipynb").read_text())
    cells = notebook["cells"]
    start = next(i for i, c in enumerate(cells) if "## 2. Training" in "".join(c["source"]))
    slide = [cells[start]]
    for cell in cells[start + 1 :]:
        kind = cell["metadata"].get("slideshow", {}).get("slide_type")
        if kind in ("slide", "subslide"):
            break
        if kind in ("-", "fragment"):
            slide.append(cell)
    assert any("training_chart(" in "".join(c["source"]) for c in slide), "no curves on the slide"
