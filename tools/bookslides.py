"""Slide decks for teaching from the book: one reveal.js deck per chapter, made from the saved notebooks.

    python -m tools.bookslides            # -> _build/slides/ch01_attention.html, ... (make slides)
    python -m tools.bookslides --out DIR  # the decks and their assets/ into DIR

A deck is not a second copy of its chapter: it is the chapter's own cells, those marked with
Jupyter's slideshow mark in the chapter's `.py` (`# %% [markdown] slideshow={"slide_type": "slide"}`,
kept in the notebook by tools/book.py). What each mark does here:

    slide, subslide   starts a slide (a subslide sits below the slide before it: the down arrow)
    -                 adds the cell to the slide it follows
    fragment          adds the cell to that slide, shown at the next key press
    notes             the cell's prose goes into that slide's speaker notes
    skip              left out, from the notes too
    (no mark)         a markdown cell's prose goes into the notes of the slide before it; an
                      unmarked code cell is left out

A marked markdown cell shows what a reader's eye catches: its headings (the first one is the
slide's title; a slide that opens with a code cell takes the chapter's last heading before it),
its display equations and lists, the paragraphs that open in italics (the chapter's "Paper: ..."
line) and the bold leads of paragraphs and list items ("**Padding.** Sentences in a batch..." shows
"Padding."; under an "Exercises" heading each exercise is shown whole). Its running prose, its
tables, the rest of what a lead opens and the answers folded in `<details>` become the slide's
speaker notes, with the prose that follows it. A slide too full
for its box continues on the next one, under the same title (site/slides/deck.js lays it out). A marked code cell
shows its saved outputs (nothing is executed): text as printed (a long one cut, saying so),
tables (long ones cut), and drawings and charts enlarged until their smallest text is the site's
body size; a marked code cell without outputs shows its code.

A deck opens from disk with the network off, as the site does: `assets/` beside the decks holds
reveal.js and its notes plugin (the npm package pinned by tools/revealjs/package-lock.json), MathJax
(from the sphinx-mathjax-offline package, as the site's), the site's vega bundle
(`annotated.figures.write_vega_bundle`) and the decks' own style and start-up script
(site/slides/). The site's build (tools/booksite.py) writes the decks into `_build/html/slides/`.
"""

from __future__ import annotations

import copy
import hashlib
import html
import re
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from tools.chapters import (
    NOTEBOOKS,
    ROOT,
    cell_source,
    cell_text,
    chapter_notebooks,
    notebook_cells,
    slide_type,
)

SITE = ROOT / "site"
OUT = ROOT / "_build" / "slides"
ASSETS = "assets"  # the folder beside the decks that holds everything they load
OWN = SITE / "slides"  # deck.css and deck.js, the decks' own style and start-up
REVEAL = ROOT / "tools" / "revealjs" / "node_modules" / "reveal.js"
# What a deck loads of reveal.js (its package's dist/ holds more: other themes, other plugins).
REVEAL_FILES = (
    "dist/reset.css",
    "dist/reveal.css",
    "dist/theme/white.css",
    "dist/reveal.js",
    "dist/plugin/notes.js",
    "LICENSE",
)
# The site's body text is 16 CSS pixels (the theme's 1rem): no text on a slide is smaller, once
# reveal.js has scaled the slide to the window (tests/test_slides.py measures it at 1280 x 720).
BODY_PX = 16
WIDTH, HEIGHT = 1280, 720  # a slide's size before reveal.js scales it to the window
MAX_OUTPUT_LINES = 14  # a printed output longer than this is cut, with a line saying so
MAX_TABLE_ROWS = 10  # likewise a table's rows


@dataclass
class Slide:
    """One slide: its title, what it shows (each part with whether it is a fragment), its notes."""

    title: str
    below: bool = False  # a subslide, reached with the down arrow from the slide before it
    parts: list[tuple[str, bool]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


# --- markdown -------------------------------------------------------------------------------------


def _markdown(for_notes: bool):
    """CommonMark with tables, raw HTML and $-math: on a slide the math is left for MathJax as
    \\( \\) and \\[ \\]; in the notes (a window without MathJax) it stays as the chapter wrote it."""
    from markdown_it import MarkdownIt
    from mdit_py_plugins.dollarmath import dollarmath_plugin

    if for_notes:
        inline = lambda content: html.escape(f"${content}$")  # noqa: E731
        block = lambda content: f"<p>{html.escape(f'$${content}$$')}</p>"  # noqa: E731
    else:
        inline = lambda content: f'<span class="math">\\({html.escape(content)}\\)</span>'  # noqa: E731
        block = lambda content: f'<div class="math">\\[{html.escape(content)}\\]</div>'  # noqa: E731
    parser = MarkdownIt("commonmark", {"html": True}).enable("table")
    return parser.use(
        dollarmath_plugin,
        renderer=lambda content, options: (
            block(content) if options.get("display_mode") else inline(content)
        ),
    )


SLIDE_MD, NOTES_MD = _markdown(False), _markdown(True)


def _blocks(tokens) -> list[list]:
    """The top-level blocks of a parsed markdown text, each its list of tokens."""
    blocks, depth = [], 0
    for token in tokens:
        if depth == 0:
            blocks.append([])
        blocks[-1].append(token)
        depth += token.nesting
    return blocks


def _opening(inline) -> str:
    """How an inline run of text opens: "strong", "em" or "text"."""
    children = [child for child in inline.children or [] if child.type != "text" or child.content]
    return children[0].type.removesuffix("_open") if children else "text"


def _leads_only(block) -> tuple[list, bool]:
    """The block with each paragraph that opens in bold cut to its bold lead ("**Padding.**
    Sentences in a batch..." shows "Padding."), and whether it cut any."""
    block, cut = copy.deepcopy(block), False
    for token in block:
        if token.type == "inline" and _opening(token) == "strong":
            children = token.children
            start = next(i for i, child in enumerate(children) if child.type == "strong_open")
            end = next(i for i, child in enumerate(children) if child.type == "strong_close")
            cut = cut or end + 1 < len(children)
            token.children = children[start : end + 1]
    return block, cut


def split_markdown(text: str, whole: bool = False) -> tuple[list[str], list[str], list[str]]:
    """(what a slide shows, what goes to the notes, the headings' text): see the module's doc.
    `whole`: a paragraph or list item that opens in bold is shown whole, not cut to its lead."""
    shown, notes, headings, folded = [], [], [], False
    render = lambda tokens: SLIDE_MD.renderer.render(tokens, SLIDE_MD.options, {})  # noqa: E731
    for block in _blocks(SLIDE_MD.parse(text)):
        first = block[0]
        folded = folded or (first.type == "html_block" and "<details" in first.content)
        source = _source_of(text, block)
        prose = {"html_block", "fence", "code_block", "blockquote_open", "table_open"}
        if folded or first.type in prose:
            notes.append(source)
        elif first.type == "heading_open":
            headings.append(SLIDE_MD.renderInline(block[1].content))
            whole = whole or "Exercises" in block[1].content
            shown.append(render(block))
        elif first.type == "paragraph_open" and _opening(block[1]) not in {"strong", "em"}:
            notes.append(source)
        else:  # display math, lists, a paragraph that opens in bold or italics
            leads, cut = (block, False) if whole else _leads_only(block)
            shown.append(render(leads))
            notes += [source] if cut else []
        if first.type == "html_block" and "</details>" in first.content:
            folded = False
    return shown, [NOTES_MD.render("\n\n".join(notes))] if notes else [], headings


def _source_of(text: str, block) -> str:
    """The lines of `text` a block was parsed from."""
    lines = text.splitlines()
    spans = [token.map for token in block if token.map]
    return "\n".join(lines[spans[0][0] : spans[0][1]]) if spans else ""


# --- outputs ----------------------------------------------------------------------------------------


def _cut_lines(text: str) -> str:
    lines = text.rstrip("\n").splitlines()
    if len(lines) > MAX_OUTPUT_LINES:
        left = len(lines) - (MAX_OUTPUT_LINES - 1)
        lines = lines[: MAX_OUTPUT_LINES - 1] + [f"⋮ ({left} more lines in the notebook)"]
    return "\n".join(lines)


def printed(text: str) -> str:
    """A printed output as a slide shows it: as printed, cut after MAX_OUTPUT_LINES lines."""
    return f'<pre class="output">{html.escape(_cut_lines(text))}</pre>'


def without_default_index(markup: str) -> str:
    """A DataFrame's HTML table without its index column when that is pandas' default 0, 1, 2...
    (a count, not data: noise on a slide); any other index, or a header of several rows, is kept."""
    head, _, body = markup.partition("<tbody>")
    rows = re.findall(r"<tr\b[^>]*>\s*<th>([^<]*)</th>", body)
    if (
        head.count("<tr") != 1
        or not re.search(r"<thead>\s*<tr\b[^>]*>\s*<th>\s*</th>", head)
        or len(rows) != body.count("<tr")
        or rows != [str(i) for i in range(len(rows))]
    ):
        return markup
    head = re.sub(r"(<thead>\s*<tr\b[^>]*>)\s*<th>\s*</th>", r"\1", head, count=1)
    return head + "<tbody>" + re.sub(r"(<tr\b[^>]*>)\s*<th>\d+</th>", r"\1", body)


def cut_table(markup: str) -> str:
    """An HTML table (a DataFrame's) with at most MAX_TABLE_ROWS body rows, and a row saying how
    many more the notebook has; pandas' scoped style block and default index left out (the deck
    styles tables)."""
    markup = without_default_index(re.sub(r"<style scoped>.*?</style>", "", markup, flags=re.S))
    rows = list(re.finditer(r"<tr\b.*?</tr>", markup.partition("<tbody>")[2], flags=re.S))
    if len(rows) <= MAX_TABLE_ROWS:
        return f'<div class="output table">{markup}</div>'
    body_start = markup.index("<tbody>") + len("<tbody>")
    cut_at = body_start + rows[MAX_TABLE_ROWS - 1].end()
    end = markup.index("</tbody>")
    more = len(rows) - MAX_TABLE_ROWS
    note = f'<tr class="more"><td colspan="99">⋮ ({more} more rows in the notebook)</td></tr>'
    return f'<div class="output table">{markup[:cut_at]}{note}{markup[end:]}</div>'


def legible_drawing(svg: str) -> str:
    """A drawing scaled so that its smallest text is the site's body size (never shrunk)."""
    sizes = [float(size) for size in re.findall(r'font-size="([\d.]+)"', svg)]
    scale = max(1.0, BODY_PX / min(sizes)) if sizes else 1.0

    def grown(match: re.Match) -> str:
        return f'{match.group(1)}="{float(match.group(2)) * scale:g}"'

    head, rest = svg.split(">", 1)
    head = re.sub(r'\b(width|height)="([\d.]+)"', grown, head)
    return f'<figure class="output drawing">{head}>{rest}</figure>'


# A chart on a slide is drawn as on the site, then enlarged as a whole until its smallest text is
# the body size (site/slides/deck.js). Two panels the site stacks for its narrow column are put
# side by side on a wide slide instead, each at most PANEL_WIDTH wide, their legend below them.
PANEL_WIDTH = 200


def widescreen(spec: dict) -> dict:
    """The chart's spec laid out for a wide slide (see PANEL_WIDTH)."""
    spec = copy.deepcopy(spec)
    if len(spec.get("vconcat", [])) == 2:
        spec["hconcat"] = spec.pop("vconcat")
        config = spec.setdefault("config", {})
        config["legend"] = {**config.get("legend", {}), "orient": "bottom"}
        for panel in spec["hconcat"]:
            for view in [panel, *panel.get("layer", [])]:
                if isinstance(view.get("width"), int | float):
                    view["width"] = min(view["width"], PANEL_WIDTH)
    return spec


def slide_chart(spec: dict) -> str:
    """A chart drawn by the site's bundle (annotated/figures/__init__.py), laid out for a slide."""
    from annotated.figures import chart_html

    return f'<div class="output chart">{chart_html(widescreen(spec))}</div>'


def render_output(output: dict) -> str:
    """One saved output as a slide shows it ("" for an error or an output it cannot show)."""
    if output.get("output_type") == "stream":
        # stderr holds logs (progress bars, the profiler's start and stop), not a point to make
        return "" if output.get("name") == "stderr" else printed(cell_text(output.get("text", "")))
    data = output.get("data", {})
    spec = next((data[k] for k in data if k.startswith("application/vnd.vegalite.")), None)
    if spec is not None:
        return slide_chart(spec)
    if "image/svg+xml" in data:
        return legible_drawing(cell_text(data["image/svg+xml"]))
    if "text/html" in data:
        return cut_table(cell_text(data["text/html"]))
    if "text/plain" in data:
        return printed(cell_text(data["text/plain"]))
    return ""


def render_code_cell(cell: dict) -> str:
    """What a marked code cell shows: its outputs, or its code when it has none."""
    outputs = [render_output(output) for output in cell.get("outputs", [])]
    if any(outputs):
        return "\n".join(part for part in outputs if part)
    code = html.escape(_cut_lines(cell_source(cell)))
    return f'<pre class="code"><code>{code}</code></pre>'


# --- a chapter's slides -----------------------------------------------------------------------------


def chapter_slides(notebook: Path) -> list[Slide]:
    """The chapter's marked cells as slides, with the prose around them as their notes."""
    cells = notebook_cells(notebook)
    slides: list[Slide] = []
    heading = ""  # the chapter's last heading so far: the title of a slide that opens with code
    for cell in cells:
        mark, markdown = slide_type(cell), cell["cell_type"] == "markdown"
        shown, notes, headings = split_markdown(cell_source(cell)) if markdown else ([], [], [])
        if mark in {"slide", "subslide"}:
            title = headings[0] if markdown and headings else heading
            if markdown and headings:
                shown = shown[1:]  # the first heading is the title
            if not slides:  # the title slide: the chapter's title, its paper line, its plan
                shown = [part for part in shown if not part.startswith("<h")]
            slides.append(Slide(title=title, below=mark == "subslide"))
        heading = headings[-1] if headings else heading
        if not slides or mark == "skip" or (mark is None and not markdown):
            continue
        if mark is None or mark == "notes":
            notes = [NOTES_MD.render(cell_source(cell))] if markdown else []
            slides[-1].notes += notes
            continue
        part = "\n".join(shown) if markdown else render_code_cell(cell)
        slides[-1].parts.append((part, mark == "fragment"))
        slides[-1].notes += notes
    return slides


def section(slide: Slide, index: int) -> str:
    """A slide as reveal.js reads it: a <section> with its title, parts and notes."""
    kind = "title-slide" if index == 0 else "content-slide"
    level = "h1" if index == 0 else "h2"
    parts = []
    for markup, fragment in slide.parts:
        parts.append(f'<div class="part fragment">{markup}</div>' if fragment else markup)
    notes = "\n".join(slide.notes)
    aside = f'\n<aside class="notes">{notes}</aside>' if notes else ""
    body = "\n".join(parts)
    return f'<section class="{kind}">\n<{level}>{slide.title}</{level}>\n{body}{aside}\n</section>'


def sections(slides: list[Slide]) -> str:
    """The slides in reveal.js's order: a slide with its subslides below it in one stack."""
    stacks: list[list[str]] = []
    for index, slide in enumerate(slides):
        if slide.below and stacks:
            stacks[-1].append(section(slide, index))
        else:
            stacks.append([section(slide, index)])
    return "\n".join(
        stack[0] if len(stack) == 1 else "<section>\n" + "\n".join(stack) + "\n</section>"
        for stack in stacks
    )


DECK = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title} (slides)</title>
<link rel="stylesheet" href="{assets}/reveal/reset.css">
<link rel="stylesheet" href="{assets}/reveal/reveal.css">
<link rel="stylesheet" href="{assets}/reveal/theme/white.css">
<link rel="stylesheet" href="{assets}/deck.css">
<script src="{assets}/annotated-vega.js"></script>
<script src="{assets}/deck.js"></script>
<script src="{assets}/mathjax/tex-chtml.js" defer></script>
</head>
<body>
<div class="reveal"><div class="slides">
{sections}
</div></div>
<script src="{assets}/reveal/reveal.js"></script>
<script src="{assets}/reveal/plugin/notes.js"></script>
<script>annotatedDeck.start({{width: {width}, height: {height}}});</script>
</body>
</html>
"""


def deck(notebook: Path) -> tuple[str, int]:
    """A chapter's deck as one HTML page, and its number of slides."""
    slides = chapter_slides(notebook)
    if not slides:
        raise SystemExit(
            f"{notebook.name}: no cell is marked for a slide: mark its title cell "
            '`# %% [markdown] slideshow={"slide_type": "slide"}` in its .py (CONTRIBUTING.md)'
        )
    title = re.sub(r"<[^>]+>", "", slides[0].title)
    page = DECK.format(
        title=title, assets=ASSETS, sections=sections(slides), width=WIDTH, height=HEIGHT
    )
    return page, len(slides)


# --- the assets, and the decks --------------------------------------------------------------------


def copy_reveal(target: Path) -> None:
    """reveal.js's files a deck loads, from tools/revealjs/node_modules (`npm ci` put them there)."""
    if not (REVEAL / "dist" / "reveal.js").is_file():
        raise SystemExit(
            f"reveal.js is not installed in {REVEAL.relative_to(ROOT)}: run `make slides` (it runs "
            "`npm ci --ignore-scripts` in tools/revealjs, from the pinned package-lock.json)"
        )
    for name in REVEAL_FILES:
        destination = target / "reveal" / name.removeprefix("dist/")
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REVEAL / name, destination)


def copy_mathjax(target: Path) -> None:
    """MathJax from sphinx-mathjax-offline, as the site has it: tex-chtml.js and the folders it
    loads its parts from (fonts, TeX extensions, the menu's code), not the other builds."""
    import importlib.util

    spec = importlib.util.find_spec("sphinx-mathjax-offline")
    if spec is None or spec.origin is None:
        raise SystemExit("the sphinx-mathjax-offline package is missing: run `make setup`")
    source = Path(spec.origin).parent / "static" / "mathjax"
    destination = target / "mathjax"
    shutil.rmtree(destination, ignore_errors=True)
    destination.mkdir(parents=True)
    shutil.copyfile(source / "tex-chtml.js", destination / "tex-chtml.js")
    for folder in (path for path in source.iterdir() if path.is_dir()):
        shutil.copytree(folder, destination / folder.name)


def copy_vega(target: Path) -> None:
    """The site's vega bundle (a few seconds to make): written once per vl-convert and
    Vega-Lite version, then copied."""
    from importlib.metadata import version

    import altair

    from annotated.figures import BUNDLE_NAME, vega_snippet, write_vega_bundle

    wrapper = hashlib.sha256(vega_snippet().encode()).hexdigest()[:12]
    key = f"vl-convert-python {version('vl-convert-python')}, {altair.SCHEMA_VERSION}, {wrapper}"
    cache = ROOT / "_build" / "slides-vega"
    stamp = cache / (BUNDLE_NAME + ".version")
    if not stamp.exists() or stamp.read_text() != key or not (cache / BUNDLE_NAME).exists():
        cache.mkdir(parents=True, exist_ok=True)
        write_vega_bundle(cache)
        stamp.write_text(key)
    shutil.copyfile(cache / BUNDLE_NAME, target / BUNDLE_NAME)


def write_assets(out: Path) -> None:
    target = out / ASSETS
    target.mkdir(parents=True, exist_ok=True)
    copy_reveal(target)
    copy_mathjax(target)
    copy_vega(target)
    for name in ("deck.css", "deck.js"):
        shutil.copyfile(OWN / name, target / name)


def build(out: Path = OUT) -> dict[str, int]:
    """Write every chapter's deck and the assets into `out`; return each deck's slide count."""
    notebooks = chapter_notebooks(NOTEBOOKS)
    if not notebooks:
        raise SystemExit(f"no chapter notebooks in {NOTEBOOKS}: run `make notebooks` first")
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob("*.html"):
        stale.unlink()
    write_assets(out)
    counts = {}
    for notebook in notebooks:
        page, counts[notebook.stem] = deck(notebook)
        (out / f"{notebook.stem}.html").write_text(page, encoding="utf-8")
    return counts


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT, help="the folder to write (%(default)s)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    counts = build(args.out)
    listed = ", ".join(f"{stem[:4]} {count}" for stem, count in counts.items())
    print(f"slides: {len(counts)} decks in {args.out} ({listed} slides) in "
          f"{time.perf_counter() - started:.0f} s")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
