"""The book's drawer of pictures: SVG boxes, arrows and text on a fixed grid, and `Drawing`, which
shows one in Jupyter and on the site. Each chapter's drawings (the architecture of Figure 1,
attention as a flow, teacher forcing, the decoding steps, the beam search's tree) are made with it
in that chapter's figures module.

Every drawing is SVG written here, by a small drawer of the book's own (boxes, arrows, text on a
fixed grid), from a built model or module and the shapes it really uses. Changing the model
changes the drawing: more layers, pre-norm blocks, shared embeddings all show. A diagram library
that lays out graphs (Graphviz, for one) would place the boxes for us, but it needs a program
outside Python that a reader's laptop may not have, and its layout moves when the graph changes;
Figure 1's layout is fixed and simple enough to place by hand, and a fixed layout is what lets a
reader compare two drawings, and nbval compare a drawing byte for byte on any machine.

A `Drawing` shows itself in Jupyter as SVG; when the book is executed for the site (the same
switch as the charts', ANNOTATED_CHART_HTML=1) it also carries an HTML `<figure>` with the SVG
inline and a caption. The site shows it at its own size, one SVG unit a pixel: so each drawing is
laid out to be at most 920 units wide (what a cell's output gets of the site's 960-px text
column) with no text under 15 (its captions are 14.4 px), and a drawing that would be wider is laid out another way (the beam tree
grows downwards, a step a row) rather than shrunk. Each SVG has a `<title>`, a `<desc>` (the
text alternative, which says what the picture shows), and `role="img"`, so screen readers and the
site's tests find both.
"""

from __future__ import annotations

import hashlib
import html
import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from annotated.figures import HTML_ENV

# Colours by kind of block (a light fill, the text stays black), close to the paper's Figure 1.
FILLS = {
    "embedding": "#f6d5dc",
    "positions": "#e8e8e8",
    "attention": "#fbe0c3",
    "norm": "#f8f1b6",
    "feed_forward": "#cfe4f6",
    "output": "#ddd3ef",
    "tensor": "#ffffff",
    "operation": "#e6f2e1",
}
HIGHLIGHT = "#c0392b"
LABEL_INK = "#555555"  # labels beside arrows, and the words of parts drawn faintly: 7.5:1 on white

# The site shows a drawing at the size of its SVG, in a cell output about 940 px wide (a 960-px
# column less the output's indent), under captions of 14.4 px: so a drawing is at most 920 units
# wide (one unit, one pixel; 20 to spare) and its smallest text 15 units. Words and numbers are laid out at an estimated 0.6 em a character (a bold one wider).
MAX_WIDTH = 920
TEXT, SMALL = 16, 15  # the first line of a box; its other lines, labels and notes
LINE = 18  # from one line of a box to the next
CHAR_EM = 0.6


def text_width(words: str, size: float = SMALL, em: float = CHAR_EM) -> float:
    """The estimated width of a line of text: what the layout leaves room for."""
    return len(words) * size * em


# Glyphs that are much narrower or wider than 0.6 em in the common sans-serif fonts (DejaVu Sans,
# Arial): for fitting a word inside its box, where the flat estimate is not enough.
NARROW, WIDE, WIDEST = set("iljtfrI.,:;'!|()[]/ "), set("<>=+×→−÷~"), set("mwMW…")


def ink_width(words: str, size: float = SMALL) -> float:
    """A closer estimate of a word's width than `text_width`'s, by its kinds of glyph."""
    ems = sum(
        0.35 if c in NARROW else 0.84 if c in WIDE else 0.98 if c in WIDEST else 0.62 for c in words
    )
    return ems * size


def number(value: float) -> str:
    """Coordinates as short, stable text: integers where they are, else one decimal."""
    value = round(float(value), 1)
    return str(int(value)) if value == int(value) else f"{value:.1f}"


@dataclass
class Canvas:
    """An SVG under construction: boxes, arrows and text, each tagged with the part it draws.

    A part not built yet is drawn faintly: its shapes pale and dashed, its words grey but still
    legible against the pale shapes (a reader may want to read ahead).
    """

    width: int
    height: int
    items: list[str] = field(default_factory=list)
    built: frozenset[str] | None = None  # parts drawn in full (None: all); the rest faintly
    top: float = 0  # the picture starts here: the space above it is cut off
    highlight: frozenset[str] = frozenset()  # parts drawn with a red outline

    def _faint(self, part: str | None) -> bool:
        return bool(part) and self.built is not None and part not in self.built

    def _group(self, part: str | None) -> str:
        """The attributes of a part's group (or lone text): its name, and whether it is faint."""
        attributes = f' data-part="{part}"' if part else ""
        return attributes + (' data-faint="true"' if self._faint(part) else "")

    def _shape(self, part: str | None) -> str:
        """The attributes of a shape of `part`: pale and dashed if it is not built yet."""
        return ' opacity="0.3" stroke-dasharray="4 3"' if self._faint(part) else ""

    def _ink(self, part: str | None) -> str:
        return f' fill="{LABEL_INK}"' if self._faint(part) else ""

    def _stroke(self, part: str | None) -> tuple[str, str]:
        if part and part in self.highlight:
            return HIGHLIGHT, "3"
        return "#333333", "1.2"

    def _lines(self, x: float, y: float, lines: Sequence[str], size: int, part: str | None) -> str:
        """Lines of text centred on (x, y): the first at `size`, the others at SMALL."""
        return "".join(
            f'<text x="{number(x)}" y="{number(y + (i - (len(lines) - 1) / 2) * LINE + 5)}" '
            f'text-anchor="middle" font-size="{size if i == 0 else SMALL}"{self._ink(part)}>'
            f"{html.escape(line)}</text>"
            for i, line in enumerate(lines)
            if line
        )

    def box(
        self,
        x: float,
        y: float,
        width: float,
        height: float,
        lines: Sequence[str],
        kind: str,
        part: str | None = None,
        size: int = TEXT,
    ) -> None:
        """A block centred on (x, y) with a line or two of text (the first of `size`)."""
        stroke, stroke_width = self._stroke(part)
        left, top = x - width / 2, y - height / 2
        self.items.append(
            f"<g{self._group(part)}>"
            f'<rect x="{number(left)}" y="{number(top)}" width="{number(width)}" '
            f'height="{number(height)}" rx="6" fill="{FILLS[kind]}" stroke="{stroke}" '
            f'stroke-width="{stroke_width}"{self._shape(part)}/>'
            f"{self._lines(x, y, lines, size, part)}</g>"
        )

    def circle(self, x: float, y: float, symbol: str, part: str | None = None) -> None:
        """A small circle with a symbol in it (+: the residual addition)."""
        stroke, stroke_width = self._stroke(part)
        self.items.append(
            f'<g{self._group(part)}><circle cx="{number(x)}" cy="{number(y)}" r="10" '
            f'fill="#ffffff" stroke="{stroke}" stroke-width="{stroke_width}"{self._shape(part)}/>'
            f'<text x="{number(x)}" y="{number(y + 5)}" text-anchor="middle" '
            f'font-size="{TEXT}"{self._ink(part)}>{html.escape(symbol)}</text></g>'
        )

    def frame(
        self, left: float, top: float, width: float, height: float, label: str, part: str
    ) -> None:
        """A rounded, grey frame around a stack of layers, with its repeat count beside it."""
        stroke, stroke_width = self._stroke(part)
        label_svg = (
            f'<text x="{number(left - 8)}" y="{number(top + height / 2 + 5)}" '
            f'text-anchor="end" font-size="{TEXT}" font-weight="bold"{self._ink(part)}>'
            f"{html.escape(label)}</text>"
            if label
            else ""
        )
        self.items.append(
            f"<g{self._group(part)}>"
            f'<rect x="{number(left)}" y="{number(top)}" width="{number(width)}" '
            f'height="{number(height)}" rx="12" fill="#f7f7f7" stroke="{stroke}" '
            f'stroke-width="{stroke_width}"{self._shape(part)}/>{label_svg}</g>'
        )

    def arrow(
        self,
        points: Sequence[tuple[float, float]],
        label: str | None = None,
        part: str | None = None,
        dashed: bool = False,
        label_side: str = "right",
    ) -> None:
        """A polyline ending in an arrowhead, with an optional label beside its first segment."""
        stroke, stroke_width = self._stroke(part)
        path = " ".join(f"{number(x)},{number(y)}" for x, y in points)
        shape = self._shape(part)
        if dashed and not shape:
            shape = ' stroke-dasharray="5 4"'
        label_svg = ""
        if label:
            (x0, y0), (x1, y1) = points[0], points[1]
            mid_x, mid_y = (x0 + x1) / 2, (y0 + y1) / 2
            offset, anchor = (6, "start") if label_side == "right" else (-6, "end")
            label_svg = (
                f'<text x="{number(mid_x + offset)}" y="{number(mid_y + 5)}" '
                f'text-anchor="{anchor}" font-size="{SMALL}" fill="{LABEL_INK}">'
                f"{html.escape(label)}</text>"
            )
        self.items.append(
            f"<g{self._group(part)}>"
            f'<polyline points="{path}" fill="none" stroke="{stroke}" '
            f'stroke-width="{stroke_width}"{shape} marker-end="url(#{{arrow}})"/>{label_svg}</g>'
        )

    def cell(self, x: float, y: float, size: float, filled: bool) -> None:
        """A small square of a mask drawing: dark where a query may look, white where not."""
        self.items.append(
            f'<rect x="{number(x)}" y="{number(y)}" width="{number(size)}" '
            f'height="{number(size)}" fill="{"#3b6ea5" if filled else "#ffffff"}" '
            f'stroke="#999999" stroke-width="0.5"/>'
        )

    def text(
        self,
        x: float,
        y: float,
        words: str,
        size: int = SMALL,
        anchor: str = "middle",
        part: str | None = None,
        bold: bool = False,
    ) -> None:
        weight = ' font-weight="bold"' if bold else ""
        self.items.append(
            f'<text{self._group(part)} x="{number(x)}" y="{number(y)}" text-anchor="{anchor}" '
            f'font-size="{size}"{weight}{self._ink(part)}>{html.escape(words)}</text>'
        )

    def svg(self, title: str, description: str) -> str:
        """The finished SVG: sized, titled, described; its ids derived from its content."""
        body = "".join(self.items)
        key = hashlib.sha256((title + body).encode()).hexdigest()[:10]
        arrow = f"arrow-{key}"
        body = body.replace("{arrow}", arrow)
        top, height = number(self.top), number(self.height - self.top)
        return (
            f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 {top} {self.width} {height}" '
            f'width="{self.width}" height="{height}" role="img" '
            f'aria-labelledby="title-{key} desc-{key}" font-family="sans-serif">'
            f'<title id="title-{key}">{html.escape(title)}</title>'
            f'<desc id="desc-{key}">{html.escape(description)}</desc>'
            f'<defs><marker id="{arrow}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="8" '
            f'markerHeight="8" markerUnits="userSpaceOnUse" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" '
            f'fill="#333333"/></marker></defs>'
            f'<rect y="{top}" width="{self.width}" height="{height}" fill="#ffffff"/>{body}</svg>'
        )


@dataclass(frozen=True)
class Drawing:
    """An SVG picture with its title and text alternative, shown by Jupyter and on the site."""

    svg: str
    title: str
    description: str

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict[str, str]:
        bundle = {"image/svg+xml": self.svg, "text/plain": f"<drawing: {self.title}>"}
        if os.environ.get(HTML_ENV) == "1":
            bundle["text/html"] = (
                f'<figure class="annotated-drawing">{self.svg}'
                f"<figcaption>{html.escape(self.title)}. {html.escape(self.description)}"
                "</figcaption></figure>"
            )
        return bundle


CELL = 52  # the side of one token's cell in the grid drawings, wider for longer words


def cell_size(words: Sequence[str]) -> float:
    """A cell wide enough for the longest of the words, with the gap between two cells."""
    return max(CELL, *(max(text_width(word, TEXT), ink_width(word, TEXT)) + 24 for word in words))
