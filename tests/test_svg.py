"""annotated/figures/svg.py: the book's drawer of pictures. Shapes are placed where their numbers
say, parts not built yet are drawn faintly and highlighted parts in red, the finished SVG is
sized, titled and described with ids derived from its content, and a `Drawing` carries an HTML
figure with its caption only when the book is executed for the site. (The book's drawings
themselves, drawn from the model they show, are tests/test_drawings.py's.)"""

import xml.etree.ElementTree as ET

import pytest

from annotated.figures import HTML_ENV
from annotated.figures.svg import (
    CELL,
    FILLS,
    HIGHLIGHT,
    LABEL_INK,
    TEXT,
    Canvas,
    Drawing,
    cell_size,
    ink_width,
    number,
    text_width,
)

SVG = "{http://www.w3.org/2000/svg}"


def parsed(
    canvas: Canvas, title: str = "A title", description: str = "What it shows."
) -> ET.Element:
    return ET.fromstring(canvas.svg(title, description))


@pytest.mark.parametrize(
    ("value", "text"), [(3.0, "3"), (2.46, "2.5"), (-0.04, "0"), (1000, "1000"), (7.25001, "7.3")]
)
def test_coordinates_are_written_short_and_stable(value, text):
    assert number(value) == text


def test_a_box_is_centred_on_its_point_with_its_lines_escaped():
    canvas = Canvas(200, 100)
    canvas.box(100, 50, 40, 20, ["Q & K", "<mask>"], "attention")
    group = parsed(canvas).find(f"{SVG}g")
    rect = group.find(f"{SVG}rect")
    assert [rect.get(k) for k in ("x", "y", "width", "height")] == ["80", "40", "40", "20"]
    assert rect.get("fill") == FILLS["attention"]
    lines = group.findall(f"{SVG}text")
    assert [t.text for t in lines] == ["Q & K", "<mask>"]  # escaped in the SVG, read back whole
    assert {t.get("x") for t in lines} == {"100"} and [t.get("font-size") for t in lines] == [
        str(TEXT),
        "15",
    ]
    # Two lines centred on y = 50, a line (18) apart, with the baseline 5 below the centre.
    assert [t.get("y") for t in lines] == ["46", "64"]


def test_a_part_not_built_yet_is_faint_and_a_highlighted_part_red():
    canvas = Canvas(300, 100, built=frozenset({"encoder"}), highlight=frozenset({"encoder"}))
    canvas.box(50, 50, 40, 20, ["built"], "norm", part="encoder")
    canvas.box(150, 50, 40, 20, ["to come"], "norm", part="decoder")
    canvas.text(250, 50, "loose words")  # no part: drawn in full
    built, faint = parsed(canvas).findall(f"{SVG}g")
    assert built.get("data-part") == "encoder" and built.get("data-faint") is None
    rect = built.find(f"{SVG}rect")
    assert (rect.get("stroke"), rect.get("stroke-width"), rect.get("opacity")) == (
        HIGHLIGHT,
        "3",
        None,
    )
    assert faint.get("data-part") == "decoder" and faint.get("data-faint") == "true"
    rect = faint.find(f"{SVG}rect")
    assert (rect.get("opacity"), rect.get("stroke-dasharray"), rect.get("stroke")) == (
        "0.3",
        "4 3",
        "#333333",
    )
    assert faint.find(f"{SVG}text").get("fill") == LABEL_INK  # grey, still legible
    loose = parsed(canvas).findall(f"{SVG}text")[-1]
    assert loose.text == "loose words" and loose.get("fill") is None


def test_the_finished_svg_is_sized_titled_described_and_its_arrows_find_their_head():
    canvas = Canvas(400, 300, top=20)
    canvas.arrow([(10, 10), (10, 90)], label="x", label_side="left")
    svg = parsed(canvas, "Attention", "Queries look at keys.")
    assert svg.get("viewBox") == "0 20 400 280" and svg.get("height") == "280"
    assert svg.get("width") == "400" and svg.get("role") == "img"
    title, desc = svg.find(f"{SVG}title"), svg.find(f"{SVG}desc")
    assert (title.text, desc.text) == ("Attention", "Queries look at keys.")
    assert svg.get("aria-labelledby") == f"{title.get('id')} {desc.get('id')}"
    marker = svg.find(f"{SVG}defs/{SVG}marker")
    line = svg.find(f"{SVG}g/{SVG}polyline")
    assert line.get("points") == "10,10 10,90"
    assert line.get("marker-end") == f"url(#{marker.get('id')})"
    label = svg.find(f"{SVG}g/{SVG}text")
    assert (label.get("x"), label.get("text-anchor")) == ("4", "end")  # left of the line


def test_the_same_picture_gives_the_same_bytes_and_another_picture_other_ids():
    def drawn(title: str, y: float = 50) -> str:
        canvas = Canvas(100, 100)
        canvas.arrow([(10, 10), (10, y)])
        return canvas.svg(title, "An arrow.")

    assert drawn("One") == drawn("One")
    one, two = ET.fromstring(drawn("One")), ET.fromstring(drawn("One", y=60))
    assert one.find(f"{SVG}title").get("id") != two.find(f"{SVG}title").get("id")
    assert one.find(f"{SVG}defs/{SVG}marker").get("id") != two.find(f"{SVG}defs/{SVG}marker").get(
        "id"
    ), "two drawings on one page must not share their arrowhead"


def test_a_drawing_carries_its_html_figure_only_when_the_book_is_executed(monkeypatch):
    drawing = Drawing("<svg/>", "Beam & search", "Four <hypotheses>.")
    monkeypatch.delenv(HTML_ENV, raising=False)
    bundle = drawing._repr_mimebundle_()
    assert bundle == {"image/svg+xml": "<svg/>", "text/plain": "<drawing: Beam & search>"}
    monkeypatch.setenv(HTML_ENV, "1")
    html = drawing._repr_mimebundle_()["text/html"]
    assert html == (
        '<figure class="annotated-drawing"><svg/><figcaption>Beam &amp; search. '
        "Four &lt;hypotheses&gt;.</figcaption></figure>"
    )


def test_a_grid_cell_holds_its_longest_word():
    assert cell_size(["a", "b"]) == CELL
    long = "Transformer"
    assert cell_size(["a", long]) >= max(text_width(long, TEXT), ink_width(long, TEXT)) + 24
    assert ink_width("mmm") > text_width("mmm") > ink_width("iii")  # wide and narrow glyphs
