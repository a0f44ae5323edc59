"""The HTML site, read as a student reads it: in Chromium, with every other host refused.

The site is built once for this module (`python -m tools.booksite`, as `make site` does; Sphinx only
re-reads what changed). Then every page, the landing page and each chapter found in
`notebooks/ch*.ipynb`, is opened three ways:

- served from 127.0.0.1 by a server in this process, with every request to another host aborted
  and recorded, and the host resolver refusing every name but 127.0.0.1;
- straight from disk (file://) in a browser context that is offline, as on a laptop in a train.

Each must draw every chart (an SVG or a canvas in every chart box, and a tooltip on hover),
typeset every equation, log no console error, and load nothing but the site's own files.
tests/test_site_layout.py reads every page again at a desktop's and a phone's width, in light and
dark mode, and measures how it lies on the screen (it takes the screenshots, in
`_build/screenshots/`). Without Chromium (Debian's `chromium` package, which `make browser`
installs) the browser tests are skipped with a message saying so (failed, where
$ANNOTATED_REQUIRE_ALL asks for every tool: tests/needs.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from html import unescape
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from test_publish import REPOSITORY, pyproject_with

ROOT = Path(__file__).resolve().parent.parent
from tools import booksite

CHAPTERS = booksite.chapter_pages()
PAGES = ["index", "course", "try"] + [chapter.stem for chapter in CHAPTERS]
PLAIN_PAGES = {"index", "course", "try"}  # the site's pages that are not notebooks (site/<name>.md)
SCREENSHOTS = ROOT / "_build" / "screenshots"
# Pictures of the pages, for a person to look at (`make screenshots`), not for a check: make test
# leaves them out (a full page at 1280 px takes seconds to paint and write, 26 times).
SCREENSHOTS_ENV = "ANNOTATED_SCREENSHOTS"
DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}
WAIT_MS = 30_000
SETTLE_MS = 10_000  # the most read_page waits for the network to fall quiet
CHART_ID = re.compile(r'id="(annotated-chart-[0-9a-f]+)"')
DRAWING_TITLE = re.compile(
    r'<figure class="annotated-drawing"><svg [^>]*><title id="[^"]+">([^<]*)</title>'
)


# --- what the notebooks promise the pages will show ---------------------------------------------


def _outputs(notebook: Path):
    for cell in json.loads(notebook.read_text(encoding="utf-8"))["cells"]:
        yield from cell.get("outputs", [])


def expected_charts(page: str) -> dict[str, bool]:
    """Chart box id -> whether the chart has tooltips, for every chart saved in the notebook."""
    if page in PLAIN_PAGES:
        return {}
    charts = {}
    for output in _outputs(booksite.NOTEBOOKS / f"{page}.ipynb"):
        html = output.get("data", {}).get("text/html", "")
        html = "".join(html) if isinstance(html, list) else html
        for chart_id in CHART_ID.findall(html):
            charts[chart_id] = '"tooltip"' in html
    return charts


def expected_drawings(page: str) -> list[str]:
    """The title of every drawing (annotated/figures/, drawn by svg.py) saved in the notebook, in order."""
    if page in PLAIN_PAGES:
        return []
    titles = []
    for output in _outputs(booksite.NOTEBOOKS / f"{page}.ipynb"):
        html = output.get("data", {}).get("text/html", "")
        html = "".join(html) if isinstance(html, list) else html
        titles += DRAWING_TITLE.findall(html)
    return [unescape(title) for title in titles]


def expects_math(page: str) -> bool:
    """Whether a page's source has $...$ math (outside `code`)."""
    if page in PLAIN_PAGES:
        text = (ROOT / "site" / f"{page}.md").read_text(encoding="utf-8")
    else:
        cells = json.loads((booksite.NOTEBOOKS / f"{page}.ipynb").read_text(encoding="utf-8"))
        text = "\n".join(
            "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
            for cell in cells["cells"]
            if cell["cell_type"] == "markdown"
        )
    return re.search(r"\$[^$\s][^$]*\$", re.sub(r"`[^`]*`", "", text)) is not None


# --- the site, a server and a browser ----------------------------------------------------------


# --- reading a page ----------------------------------------------------------------------------

_CHARTS_SETTLED = """() => Array.from(document.querySelectorAll('.annotated-chart'))
  .every(box => box.querySelector('svg, canvas') || box.textContent.trim())"""
_CHARTS = """() => Array.from(document.querySelectorAll('.annotated-chart')).map(box => ({
  id: box.id, drawn: !!box.querySelector('svg, canvas'), text: box.textContent.trim().slice(0, 300)
}))"""
# Each drawing as the reader gets it: its size on the page, and the text alternative that the
# SVG's aria-labelledby points a screen reader to (its <title> and <desc>).
_DRAWINGS = """() => Array.from(document.querySelectorAll('figure.annotated-drawing svg')).map(svg => {
  const box = svg.getBoundingClientRect();
  const named = (svg.getAttribute('aria-labelledby') || '').split(' ')
    .map(id => document.getElementById(id)).filter(Boolean).map(el => el.textContent.trim());
  return {width: box.width, height: box.height, role: svg.getAttribute('role'), named: named,
          caption: (svg.closest('figure').querySelector('figcaption') || {}).textContent || ''};
})"""
_MATHJAX_STARTED = """() => !document.querySelector('.math')
  || !!(window.MathJax && MathJax.startup && MathJax.startup.promise)"""
_MATHJAX_DONE = """() => document.querySelector('.math') && window.MathJax && MathJax.startup
  ? MathJax.startup.promise.then(() => true) : false"""
_MATH = """() => {
  const boxes = Array.from(document.querySelectorAll('span.math, div.math'));
  const raw = boxes.filter(box => !box.querySelector('mjx-container'));
  return {total: boxes.length, raw: raw.map(box => box.textContent.slice(0, 80)).slice(0, 5),
          errors: document.querySelectorAll('mjx-merror').length};
}"""
_TOOLTIP = (
    "() => { const t = document.getElementById('vg-tooltip-element'); "
    "return !!t && t.classList.contains('visible') && t.textContent.trim().length > 0; }"
)
# Points to rest the pointer on, one per mark of a chart (up to 12): the middle of a line's
# stroke, the centre of any other mark, in viewport coordinates after scrolling the chart into view.
_MARK_POINTS = """(id) => {
  const box = document.getElementById(id);
  box.scrollIntoView({block: 'center'});
  const points = [];
  for (const path of box.querySelectorAll('g.role-mark > path')) {
    let x, y;
    if (/mark-(line|trail|rule)/.test(path.parentNode.getAttribute('class'))) {
      const length = path.getTotalLength();
      if (!length) continue;
      const p = path.getPointAtLength(length / 2), m = path.getScreenCTM();
      x = m.a * p.x + m.c * p.y + m.e;
      y = m.b * p.x + m.d * p.y + m.f;
    } else {
      const r = path.getBoundingClientRect();
      if (r.width < 1 || r.height < 1) continue;
      x = r.left + r.width / 2;
      y = r.top + r.height / 2;
    }
    if (x >= 0 && y >= 0 && x < innerWidth && y < innerHeight) points.push([x, y]);
    if (points.length >= 12) break;
  }
  return points;
}"""


_TRY_READY = """() => window.AnnotatedTry
  ? window.AnnotatedTry.ready.then(() => true, (error) => String(error)) : true"""


class PageReport:
    """Everything a page did while it loaded: requests, refusals, errors, charts, math."""

    def __init__(self, page, is_local):
        self.requests: list[str] = []
        self.foreign: list[str] = []
        self.errors: list[str] = []
        self.failed: list[str] = []
        self.is_local = is_local
        page.on("request", lambda request: self.requests.append(request.url))
        page.on("console", self._console)
        page.on("pageerror", lambda error: self.errors.append(f"uncaught: {error}"))
        page.on("response", self._response)
        page.on("requestfailed", self._request_failed)
        page.route("**/*", self._route)

    def _route(self, route) -> None:
        if self.is_local(route.request.url):
            route.continue_()
        else:
            self.foreign.append(route.request.url)
            route.abort("blockedbyclient")

    def _console(self, message) -> None:
        if message.type == "error":
            self.errors.append(f"console: {message.text} ({message.location.get('url', '')})")

    def _response(self, response) -> None:
        if response.status >= 400:
            self.failed.append(f"{response.status} {response.url}")

    def _request_failed(self, request) -> None:
        if self.is_local(request.url):
            self.failed.append(f"{request.failure} {request.url}")

    def non_local(self) -> list[str]:
        return sorted({url for url in self.requests + self.foreign if not self.is_local(url)})


def read_page(context, url: str, is_local) -> tuple:
    context.set_default_timeout(2 * WAIT_MS)
    page = context.new_page()
    report = PageReport(page, is_local)
    page.goto(url, wait_until="load")
    for script in (_CHARTS_SETTLED, _MATHJAX_STARTED):
        try:  # on a time-out, the checks below say what is missing
            page.wait_for_function(script, timeout=WAIT_MS)
        except Exception as error:  # noqa: BLE001 (playwright's TimeoutError)
            report.errors.append(f"waiting for the page: {str(error).splitlines()[0]}")
    page.evaluate(_MATHJAX_DONE)
    # The "Try the model" page loads its model, then translates its first example and draws it.
    page.evaluate(_TRY_READY)
    # Let late requests (fonts, lazily loaded MathJax parts) show up before the checks. This is
    # only a settling pause, not a check: on the heaviest page Chromium now and then keeps a
    # local request open past any sensible wait, and what the page must show is checked
    # explicitly below (charts drawn, math typeset, no errors, no foreign or failed request).
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    with contextlib.suppress(PlaywrightTimeout):
        page.wait_for_load_state("networkidle", timeout=SETTLE_MS)
    return page, report


def check_page(page, report, name: str) -> None:
    """The four promises: charts drawn, math typeset, no console error, no foreign request."""
    charts = page.evaluate(_CHARTS)
    expected = expected_charts(name)
    assert sorted(chart["id"] for chart in charts) == sorted(expected), (
        f"{name}: the page's chart boxes differ from the notebook's chart outputs"
    )
    undrawn = [chart for chart in charts if not chart["drawn"]]
    assert not undrawn, f"{name}: charts with no SVG or canvas: {undrawn}"

    drawings = page.evaluate(_DRAWINGS)
    titles = expected_drawings(name)
    assert [d["named"][0] if d["named"] else None for d in drawings] == titles, (
        f"{name}: the page's drawings differ from the notebook's drawing outputs"
    )
    for drawing in drawings:
        assert drawing["width"] > 0 and drawing["height"] > 0, f"{name}: a drawing of no size"
        assert drawing["role"] == "img" and len(drawing["named"]) == 2, drawing
        assert drawing["named"][1] and drawing["caption"].startswith(drawing["named"][0]), drawing

    math = page.evaluate(_MATH)
    if expects_math(name):
        assert math["total"] > 0, f"{name}: the notebook has $...$ math but the page has none"
    assert not math["raw"], f"{name}: {len(math['raw'])}+ equations left untypeset: {math['raw']}"
    assert math["errors"] == 0, f"{name}: MathJax reported {math['errors']} TeX errors"

    assert not report.errors, f"{name}: errors in the browser: {report.errors}"
    assert not report.failed, f"{name}: requests that failed: {report.failed}"
    assert not report.non_local(), f"{name}: requests to other hosts: {report.non_local()}"


def screenshot(page, filename: str, **options) -> None:
    """Write the page's picture to _build/screenshots/<filename> when $ANNOTATED_SCREENSHOTS is
    set (`make screenshots` sets it), else nothing."""
    if os.environ.get(SCREENSHOTS_ENV):
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / filename), **options)


def folded_until_asked(page, name: str) -> None:
    """In a chapter's exercises, a predict exercise's answer and an implement exercise's solution
    stay folded until their summary is clicked, and the check's verdict shows outside the fold.
    (Run by tests/test_site_layout.py on the page it has measured: clicking changes the page.)"""
    section = page.locator("section#exercises")
    answer = section.locator("details:not(.hide)").first  # a predict exercise's answer
    assert answer.get_attribute("open") is None
    text = answer.locator("p").first
    assert not text.is_visible(), f"{name}: an answer shows before it is asked for"
    answer.locator("summary").click()
    text.wait_for(state="visible")
    solution = section.locator("details.hide.above-input").first  # myst-nb's hide-input
    code = solution.locator("pre").first
    assert "BEGIN SOLUTION" in code.inner_text() or not code.is_visible()
    assert not code.is_visible(), f"{name}: a solution shows before it is asked for"
    solution.locator("summary").click()
    code.wait_for(state="visible")
    assert "BEGIN SOLUTION" in code.inner_text()
    # The check's verdict is an output, outside the fold: always visible.
    assert section.get_by_text("your function agrees with the book's").first.is_visible()


def hover_tooltips(page, name: str) -> None:
    """Each chart that declares tooltips shows one when the pointer rests on one of its marks."""
    for chart_id, has_tooltip in expected_charts(name).items():
        if not has_tooltip:
            continue
        shown = False
        for x, y in page.evaluate(_MARK_POINTS, chart_id):
            page.mouse.move(x, y, steps=2)
            try:
                page.wait_for_function(_TOOLTIP, timeout=1_000)
                shown = True
                break
            except Exception:  # noqa: BLE001 (playwright's TimeoutError): try the next mark
                continue
        page.mouse.move(0, 0)
        assert shown, f"{name}: no tooltip appeared over chart {chart_id}"


# --- tests -------------------------------------------------------------------------------------


def test_every_chapter_has_a_page_in_reading_order(site):
    index = (site / "index.html").read_text(encoding="utf-8")
    for chapter in CHAPTERS:
        assert (site / f"{chapter.stem}.html").exists(), f"{chapter.stem}.html was not built"
        assert chapter.title in index, f"the landing page does not name {chapter.title!r}"
    # The navigation lists the chapters in file-name order, and the landing page names both commands.
    nav = index[index.index('class="bd-sidebar-primary') :]
    order = [m for m in re.findall(r'href="(ch[^"#/]+)\.html"', nav)]
    assert list(dict.fromkeys(order)) == [chapter.stem for chapter in CHAPTERS]
    text = re.sub(r"<[^>]+>", "", index)  # the code block is split into highlighted spans
    assert "make book" in text and "make test" in text
    assert 'href="course.html"' in index, "the landing page links the course page"
    course = re.sub(r"<[^>]+>", "", (site / "course.html").read_text(encoding="utf-8"))
    assert "Syllabus" in course and "ANNOTATED_PROFILE=class" in course and "make student" in course


def test_chapter_pages_offer_their_notebook_and_python_source(site):
    for chapter in CHAPTERS:
        html = (site / f"{chapter.stem}.html").read_text(encoding="utf-8")
        files = [chapter.notebook] + ([chapter.module] if chapter.module else [])
        assert chapter.module is not None, f"{chapter.stem} has no annotated/{chapter.stem}.py"
        for source in files:
            assert f'href="downloads/{source.name}"' in html, (
                f"{chapter.stem}: no link to {source.name}"
            )
            served = site / "downloads" / source.name
            assert served.read_bytes() == source.read_bytes(), f"{served} is not {source}"


def test_pages_name_no_other_host_to_load_from(site):
    """A static look at every page and stylesheet: nothing is loaded from an absolute URL."""
    loads = re.compile(
        r"""<(?:script|img|iframe|source|audio|video)\b[^>]*\bsrc=["']((?:https?:)?//[^"']+)"""
        r"""|<link\b[^>]*\bhref=["']((?:https?:)?//[^"']+)"""
        r"""|@import\s+(?:url\()?["']?((?:https?:)?//[^"')]+)"""
        r"""|url\(\s*["']?((?:https?:)?//[^"')]+)""",
        re.I,
    )
    found = []
    for path in [*site.rglob("*.html"), *site.rglob("*.css")]:
        for match in loads.finditer(path.read_text(encoding="utf-8", errors="replace")):
            found.append(f"{path.relative_to(site)}: {next(g for g in match.groups() if g)}")
    assert not found, "pages that load from another host:\n" + "\n".join(found)


def served_from(server: str):
    """Whether a URL is one of the local server's (or an in-page data:, blob: or about: URL)."""
    host = urlsplit(server).netloc

    def is_local(url: str) -> bool:
        parts = urlsplit(url)
        return parts.scheme in {"data", "blob", "about"} or (
            parts.scheme == "http" and parts.netloc == host
        )

    return is_local


# Served over http with every other host refused, each page is read by tests/test_site_layout.py
# (at 1280 px in light mode it also rests the pointer on each chart for its tooltip): one load
# of each page does both.


@pytest.mark.parametrize("name", PAGES)
def test_page_renders_from_disk_offline(site, browser, name):
    """file://, network off: the case of a teacher's folder copied to a laptop."""
    root = site.resolve().as_uri() + "/"

    def is_local(url: str) -> bool:
        return urlsplit(url).scheme in {"data", "blob", "about"} or url.startswith(root)

    context = browser.new_context(viewport=DESKTOP, offline=True)
    try:
        page, report = read_page(context, f"{root}{name}.html", is_local)
        check_page(page, report, name)
    finally:
        context.close()


EXERCISE_PAGES = [c.stem for c in CHAPTERS if c.stem[:4] in {f"ch{n:02d}" for n in range(1, 9)}]


def test_every_chapter_page_ends_with_exercises_whose_answers_are_folded(site):
    for chapter in CHAPTERS:
        html = (site / f"{chapter.stem}.html").read_text(encoding="utf-8")
        assert 'id="exercises"' in html, f"{chapter.stem}: no Exercises section"
        assert "<details>" in html, f"{chapter.stem}: no folded answer"
        assert "<details open" not in html.split('id="exercises"')[1]


def test_the_chapters_that_build_the_model_each_show_a_drawing_made_from_code():
    """Chapters 1 to 4 and the decoding chapter (6) each carry at least one drawing."""
    for page in (
        "ch01_attention",
        "ch02_model",
        "ch03_training",
        "ch04_copy_task",
        "ch06_decoding",
    ):
        assert expected_drawings(page), f"{page}: no drawing saved in its notebook"


def test_the_course_page_gives_each_chapter_its_reading_time_from_its_word_count():
    """The syllabus's "read" column is what booksite.reading_minutes computes from each chapter."""
    text = (ROOT / "site" / "course.md").read_text(encoding="utf-8")
    table = text[text.index("| chapter | read | run |") :].split("\n\n")[0].splitlines()[2:]
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in table]
    assert len(rows) == len(CHAPTERS), "the syllabus has a row per chapter, in the chapters' order"
    for row, chapter in zip(rows, CHAPTERS, strict=True):
        number = chapter.stem[2:4].lstrip("0") or "0"
        assert row[0].startswith(number) or "lab notebook" in chapter.title.lower(), (row, chapter)
        minutes = booksite.reading_minutes(chapter.notebook)
        assert row[1] == f"{minutes} min", (
            f"{chapter.stem}: the course page says {row[1]!r} to read it; its "
            f"{minutes} min come from its word count (booksite.reading_minutes): update course.md"
        )


def test_reading_time_counts_prose_and_code_words(tmp_path):
    """400 prose words (2 min) and 300 code words (3 min) make 5 minutes; one more word makes 10."""
    cells = [
        {"cell_type": "markdown", "source": "word " * 400},
        {"cell_type": "code", "source": ["x = 1 " * 100]},
    ]
    notebook = tmp_path / "ch99_test.ipynb"
    notebook.write_text(json.dumps({"cells": cells}), encoding="utf-8")
    assert booksite.reading_minutes(notebook) == 5
    cells.append({"cell_type": "markdown", "source": "more"})
    notebook.write_text(json.dumps({"cells": cells}), encoding="utf-8")
    assert booksite.reading_minutes(notebook) == 10


def assert_repository_links(html: Path, repository: str) -> None:
    """With `repository`, every chapter page of the site in `html` links its notebook in Colab and
    Binder, and every page's header links the repository; with "", no page links any of them."""
    for name in PAGES:
        page = (html / f"{name}.html").read_text(encoding="utf-8")
        if not repository:
            for service in ("colab.research.google.com", "mybinder.org", "github.com"):
                assert service not in page, (name, service)
            continue
        assert f'href="{repository}"' in page, f"{name}: no link to the repository"
        if name in PLAIN_PAGES:
            continue
        for label, address in booksite.launch_links(repository, f"{name}.ipynb"):
            assert f'href="{address.replace("&", "&amp;")}"' in page, (name, label)
        assert "Run this chapter:" in re.sub(r"<[^>]+>", "", page), name


# An in-process Sphinx build: its extensions' deprecation notices are theirs, not the book's.
@pytest.mark.filterwarnings("ignore:.*is deprecated. Check CHANGES for Sphinx API")
def test_colab_binder_and_repository_links_come_from_pyprojects_address(
    site, tmp_path, monkeypatch
):
    """pyproject.toml's [project.urls] Repository, written once, makes the links: this checkout's
    site is built with what it says (unset: no link), and a second build with the other case
    (a dummy address, or none) shows the other."""
    here = booksite.repository()
    assert_repository_links(site, here)
    other = "" if here else REPOSITORY
    monkeypatch.setattr(booksite, "PYPROJECT", pyproject_with(tmp_path, other))
    built = booksite.build(html=tmp_path / "html")
    assert_repository_links(built.parent, other)
    if other:  # spelled out once, independently of launch_links: the services' documented forms
        page = (built.parent / "ch01_attention.html").read_text(encoding="utf-8")
        assert (
            'href="https://colab.research.google.com/github/example-owner/annotated-book/blob/'
            'main/notebooks/ch01_attention.ipynb"' in page
        )
        assert (
            'href="https://mybinder.org/v2/gh/example-owner/annotated-book/main'
            '?labpath=notebooks%2Fch01_attention.ipynb"' in page
        )


def test_a_repository_address_that_is_not_githubs_is_refused_with_what_to_write():
    for wrong in ("github.com/owner/name", "https://gitlab.com/owner/name", "https://github.com/x"):
        with pytest.raises(ValueError, match="https://github.com/OWNER/NAME"):
            booksite.launch_links(wrong, "ch01_attention.ipynb")
