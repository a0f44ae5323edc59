"""Drawings the book computes from its own code: the architecture (Figure 1), attention as a flow,
teacher forcing, the decoding steps and the beam search's tree.

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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from annotated.ch01_attention import MultiHeadAttention, subsequent_mask
from annotated.ch02_model import EncoderDecoder, LearnedPositions, ModelConfig, make_model
from annotated.ch06_decoding import BeamCandidate, beam_winner
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


def _text_width(words: str, size: float = SMALL, em: float = CHAR_EM) -> float:
    """The estimated width of a line of text: what the layout leaves room for."""
    return len(words) * size * em


# Glyphs that are much narrower or wider than 0.6 em in the common sans-serif fonts (DejaVu Sans,
# Arial): for fitting a word inside its box, where the flat estimate is not enough.
NARROW, WIDE, WIDEST = set("iljtfrI.,:;'!|()[]/ "), set("<>=+×→−÷~"), set("mwMW…")


def _ink_width(words: str, size: float = SMALL) -> float:
    """A closer estimate of a word's width than `_text_width`'s, by its kinds of glyph."""
    ems = sum(
        0.35 if c in NARROW else 0.84 if c in WIDE else 0.98 if c in WIDEST else 0.62 for c in words
    )
    return ems * size


def _number(value: float) -> str:
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
            f'<text x="{_number(x)}" y="{_number(y + (i - (len(lines) - 1) / 2) * LINE + 5)}" '
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
            f'<rect x="{_number(left)}" y="{_number(top)}" width="{_number(width)}" '
            f'height="{_number(height)}" rx="6" fill="{FILLS[kind]}" stroke="{stroke}" '
            f'stroke-width="{stroke_width}"{self._shape(part)}/>'
            f"{self._lines(x, y, lines, size, part)}</g>"
        )

    def circle(self, x: float, y: float, symbol: str, part: str | None = None) -> None:
        """A small circle with a symbol in it (+: the residual addition)."""
        stroke, stroke_width = self._stroke(part)
        self.items.append(
            f'<g{self._group(part)}><circle cx="{_number(x)}" cy="{_number(y)}" r="10" '
            f'fill="#ffffff" stroke="{stroke}" stroke-width="{stroke_width}"{self._shape(part)}/>'
            f'<text x="{_number(x)}" y="{_number(y + 5)}" text-anchor="middle" '
            f'font-size="{TEXT}"{self._ink(part)}>{html.escape(symbol)}</text></g>'
        )

    def frame(
        self, left: float, top: float, width: float, height: float, label: str, part: str
    ) -> None:
        """A rounded, grey frame around a stack of layers, with its repeat count beside it."""
        stroke, stroke_width = self._stroke(part)
        label_svg = (
            f'<text x="{_number(left - 8)}" y="{_number(top + height / 2 + 5)}" '
            f'text-anchor="end" font-size="{TEXT}" font-weight="bold"{self._ink(part)}>'
            f"{html.escape(label)}</text>"
            if label
            else ""
        )
        self.items.append(
            f"<g{self._group(part)}>"
            f'<rect x="{_number(left)}" y="{_number(top)}" width="{_number(width)}" '
            f'height="{_number(height)}" rx="12" fill="#f7f7f7" stroke="{stroke}" '
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
        path = " ".join(f"{_number(x)},{_number(y)}" for x, y in points)
        shape = self._shape(part)
        if dashed and not shape:
            shape = ' stroke-dasharray="5 4"'
        label_svg = ""
        if label:
            (x0, y0), (x1, y1) = points[0], points[1]
            mid_x, mid_y = (x0 + x1) / 2, (y0 + y1) / 2
            offset, anchor = (6, "start") if label_side == "right" else (-6, "end")
            label_svg = (
                f'<text x="{_number(mid_x + offset)}" y="{_number(mid_y + 5)}" '
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
            f'<rect x="{_number(x)}" y="{_number(y)}" width="{_number(size)}" '
            f'height="{_number(size)}" fill="{"#3b6ea5" if filled else "#ffffff"}" '
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
            f'<text{self._group(part)} x="{_number(x)}" y="{_number(y)}" text-anchor="{anchor}" '
            f'font-size="{size}"{weight}{self._ink(part)}>{html.escape(words)}</text>'
        )

    def svg(self, title: str, description: str) -> str:
        """The finished SVG: sized, titled, described; its ids derived from its content."""
        body = "".join(self.items)
        key = hashlib.sha256((title + body).encode()).hexdigest()[:10]
        arrow = f"arrow-{key}"
        body = body.replace("{arrow}", arrow)
        top, height = _number(self.top), _number(self.height - self.top)
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


# ---------------------------------------------------------------- the architecture (Figure 1)

PARTS = ("attention", "residual", "feed_forward", "stacks", "embeddings", "positions", "output")

# Figure 1's layout, in SVG units (y grows downwards); everything is placed from these.
# Across: the encoder's N, its frame, a gap for the memory's arrow, the decoder's frame, and on
# the right the decoder's N and the link of the shared matrix with its words.
FIGURE_WIDTH = 920
ENCODER_X, DECODER_X = 254, 632  # the centre line of each stack's column
SUBLAYER_WIDTH = 290  # a sub-layer's box; the frame around a layer is wider, for the residual path
FRAME_WIDTH = 338
COLUMN_WIDTH = 250  # the boxes outside the frames: embeddings, final LayerNorms, output layer
TOKENS_MARGIN = 40  # under the inputs' line (a column's base): room for the tokens' words
STACK_GAP = 10  # between the positional encoding's arrow and a stack's first sublayer
LABELLED = 30  # the length of an arrow with a shape beside it: room for one line of SMALL text
# How far each piece of one sublayer rises, bottom up (`_layer_stack` draws them).
NORM_RISE, SUBLAYER_RISE, ADD_NORM_RISE, PLUS_RISE, LINK_RISE = 44, 48, 44, 34, LABELLED
SOURCE_LENGTH, TARGET_LENGTH = "S", "T"  # the length symbols of the shapes on the arrows


@dataclass(frozen=True)
class Architecture:
    """What a built model is made of, read from its modules (not from the config it came from)."""

    encoder_layers: int
    decoder_layers: int
    d_model: int
    d_ff: int
    h: int
    d_k: int
    d_v: int
    src_vocab: int
    tgt_vocab: int
    norm_first: bool  # LayerNorm before each sublayer (pre-norm) or after the addition (post-norm)
    final_norm: bool  # a LayerNorm on top of each stack (pre-norm needs one)
    positions: str  # "sinusoids" or "learned"
    sharing: str  # "all three", "target and output", or "none" (section 3.4)


def architecture_of(model: EncoderDecoder | ModelConfig) -> Architecture:
    """Walk a built model (a ModelConfig is built first) and say what each part is.

    Parts are recognized by their class names, not by identity, so that a model built from the
    classes a chapter's notebook defines (the same code, run as cells) is read the same way.
    """
    if not isinstance(model, nn.Module):  # a configuration: build it
        model = make_model(model)
    encoder, decoder = model.encoder.layers, model.decoder.layers
    first = encoder[0]
    src_table = model.src_embed[0].lut.weight
    tgt_table = model.tgt_embed[0].lut.weight
    if model.generator.weight is tgt_table and src_table is tgt_table:
        sharing = "all three"
    elif model.generator.weight is tgt_table:
        sharing = "target and output"
    else:
        sharing = "none"
    return Architecture(
        encoder_layers=len(encoder),
        decoder_layers=len(decoder),
        d_model=first.self_attn.d_model,
        d_ff=first.feed_forward.w_1.out_features,
        h=first.self_attn.h,
        d_k=first.self_attn.d_k,
        d_v=first.self_attn.d_v,
        src_vocab=model.src_embed[0].lut.num_embeddings,
        tgt_vocab=model.generator.out_features,
        norm_first=first.sublayers[0].norm_first,
        final_norm=isinstance(model.encoder.norm, nn.LayerNorm),
        positions="learned"
        if type(model.src_embed[1]).__name__ == LearnedPositions.__name__
        else "sinusoids",
        sharing=sharing,
    )


@dataclass(frozen=True)
class _Box:
    """A box of Figure 1 by its centre and size: what the layout pieces place and link."""

    x: float
    y: float
    width: float
    height: float

    @property
    def top(self) -> float:
        return self.y - self.height / 2

    @property
    def bottom(self) -> float:
        return self.y + self.height / 2

    @property
    def left(self) -> float:
        return self.x - self.width / 2

    @property
    def right(self) -> float:
        return self.x + self.width / 2

    def draw(self, canvas: Canvas, lines: Sequence[str], kind: str, part: str) -> None:
        canvas.box(self.x, self.y, self.width, self.height, lines, kind, part)


@dataclass(frozen=True)
class _Sublayer:
    """One sublayer of a stack's drawn layer: its name, its box's two lines, the part it is."""

    name: str
    lines: tuple[str, str]
    part: str  # also its box's colour: "attention" or "feed_forward"


@dataclass(frozen=True)
class _Column:
    """One stack's side of Figure 1, bottom up: its tokens, their embedding and positions, one
    layer of sublayers in a frame, and the LayerNorm that may end the stack."""

    x: float
    base: float  # the tokens' arrow starts just below this line, their words under it
    tokens: str  # the words under the column
    length: str  # the symbol of its sequence length in the shapes: S or T
    vocab: int
    side: str  # the side of the arrows that the input shapes are written on
    sublayers: tuple[_Sublayer, ...]
    norm_first: bool
    final_norm: bool

    @property
    def embedding(self) -> _Box:
        return _Box(self.x, self.base - 51, COLUMN_WIDTH, 46)

    @property
    def encoding(self) -> _Box:
        """The positional encoding's box, above the embedding."""
        return _Box(self.x, self.embedding.top - 46, COLUMN_WIDTH, 44)

    @property
    def inputs_top(self) -> float:
        """Where the arrow out of the positional encoding ends, inside the frame."""
        return self.encoding.top - LABELLED

    @property
    def bottom(self) -> float:
        """Where the layer's first sublayer starts, a little above the inputs' arrow."""
        return self.inputs_top - STACK_GAP

    @property
    def top(self) -> float:
        """Where the arrow out of the layer's last sublayer ends."""
        rise = NORM_RISE + PLUS_RISE if self.norm_first else ADD_NORM_RISE
        return self.bottom - len(self.sublayers) * (rise + SUBLAYER_RISE + LINK_RISE)

    @property
    def frame(self) -> _Box:
        """The grey frame around the layer, from the inputs' arrow tip to its last arrow."""
        middle = (self.top + self.inputs_top) / 2
        return _Box(self.x, middle, FRAME_WIDTH, self.inputs_top - self.top + 8)

    @property
    def end_norm(self) -> _Box:
        """The LayerNorm on top of the stack, when it has one (pre-norm does)."""
        return _Box(self.x, self.top - 43, COLUMN_WIDTH, 30)

    @property
    def output(self) -> float:
        """Where the stack's output leaves it."""
        return self.end_norm.top if self.final_norm else self.top


def _columns(arch: Architecture) -> tuple[_Column, _Column]:
    """The encoder's column (left) and the decoder's (right), on a canvas of arch's height."""
    base = _canvas_height(arch) - TOKENS_MARGIN
    heads = f"h = {arch.h} heads, d_k = {arch.d_k}"
    feed = _Sublayer("ffn", ("Feed-forward", _feed_forward(arch)), "feed_forward")
    encoder = (_Sublayer("self", ("Multi-head self-attention", heads), "attention"), feed)
    decoder = (
        _Sublayer("self", ("Masked multi-head self-attention", heads), "attention"),
        _Sublayer("cross", ("Encoder-decoder attention", heads), "attention"),
        feed,
    )
    norms = (arch.norm_first, arch.final_norm)
    source = ("source tokens", SOURCE_LENGTH, arch.src_vocab, "left")
    target = ("target tokens, shifted right", TARGET_LENGTH, arch.tgt_vocab, "right")
    return (
        _Column(ENCODER_X, base, *source, encoder, *norms),
        _Column(DECODER_X, base, *target, decoder, *norms),
    )


def _canvas_height(arch: Architecture) -> int:
    """Tall enough for the figure, whose empty band on top is then cut off (Canvas.top)."""
    post_norm = ADD_NORM_RISE + SUBLAYER_RISE + LINK_RISE
    rise = post_norm + (NORM_RISE + PLUS_RISE - ADD_NORM_RISE if arch.norm_first else 0)
    final_norm = 60 if arch.final_norm else 0
    return TOKENS_MARGIN + 200 + 3 * rise + final_norm + 200  # the decoder's 3 sublayers


def _feed_forward(arch: Architecture) -> str:
    return f"{arch.d_model} → {arch.d_ff} → {arch.d_model}"


def _output_layer(decoder: _Column) -> tuple[_Box, _Box]:
    """The linear layer's box and the softmax's, above the decoder's output."""
    linear = _Box(decoder.x, decoder.output - LABELLED - 23, COLUMN_WIDTH, 46)
    return linear, _Box(decoder.x, linear.top - 35, COLUMN_WIDTH, 30)


def _stack_frames(canvas: Canvas, encoder: _Column, decoder: _Column, layers: int) -> None:
    """The background: a grey frame behind each stack's layer, with the encoder's N beside it."""
    for column, label in ((encoder, f"N = {layers} ×"), (decoder, "")):
        frame = column.frame
        canvas.frame(frame.left, frame.top, frame.width, frame.height, label, "stacks")


def _embedding_column(canvas: Canvas, column: _Column, arch: Architecture) -> None:
    """A stack's inputs, bottom up: its tokens, their embedding, the positions added to it."""
    x, embedding, encoding = column.x, column.embedding, column.encoding
    canvas.text(x, column.base + 26, column.tokens, TEXT)
    canvas.arrow(
        [(x, column.base + 6), (x, embedding.bottom + 2)],
        label=f"(B, {column.length})",
        label_side=column.side,
    )
    lines = ["Embedding × √d_model", f"{column.vocab:,} × {arch.d_model}"]
    embedding.draw(canvas, lines, "embedding", "embeddings")
    canvas.arrow([(x, embedding.top), (x, encoding.bottom + 2)], part="positions")
    table = "sinusoids (fixed)" if arch.positions == "sinusoids" else "learned table"
    encoding.draw(canvas, ["+ positional encoding", table], "positions", "positions")
    canvas.arrow(
        [(x, encoding.top), (x, column.inputs_top)],
        label=f"(B, {column.length}, {arch.d_model})",
        part="positions",
        label_side=column.side,
    )


def _layer_stack(canvas: Canvas, column: _Column, d: int) -> dict[str, float]:
    """Draw one layer's sublayers upwards from the column's bottom; return where each box sits.

    Post-norm: sublayer, then an "Add & Norm" box the residual path enters. Pre-norm: a Norm
    box, the sublayer, then ⊕. Each piece rises by its *_RISE, as `_Column.top` counts them.
    """
    x, y, where, width = column.x, column.bottom, {}, SUBLAYER_WIDTH
    for sublayer in column.sublayers:
        start, part = y, sublayer.part  # the residual path leaves from start
        if column.norm_first:
            canvas.box(x, y - 16, width, 28, ["LayerNorm"], "norm", "residual")
            canvas.arrow([(x, y - 30), (x, y - NORM_RISE)], part=part)
            y -= NORM_RISE
        canvas.box(x, y - 25, width, 46, sublayer.lines, part, part)
        where[sublayer.name] = y - 25
        y -= SUBLAYER_RISE
        canvas.arrow([(x, y), (x, y - 14)], part="residual")
        if column.norm_first:
            join, end = y - 24, x - 10
            canvas.circle(x, join, "+", "residual")
            y -= PLUS_RISE
        else:
            join, end = y - 29, x - width / 2
            canvas.box(x, join, width, 30, ["Add & Norm"], "norm", "residual")
            y -= ADD_NORM_RISE
        side = x - width / 2 - 14
        path = [(x, start + 4), (side, start + 4), (side, join), (end, join)]
        canvas.arrow(path, part="residual")
        canvas.arrow([(x, y), (x, y - LINK_RISE)], label=f"(B, ·, {d})", part=part)
        y -= LINK_RISE
    return where


def _stacks(canvas: Canvas, encoder: _Column, decoder: _Column, arch: Architecture) -> float:
    """Both stacks' layers, the decoder's repeat count, and the LayerNorms that may end them.

    Returns the y of the decoder's attention over the source, which the encoder's output enters.
    """
    _layer_stack(canvas, encoder, arch.d_model)
    cross = _layer_stack(canvas, decoder, arch.d_model)["cross"]
    frame = decoder.frame
    label = f"× N = {arch.decoder_layers}"
    canvas.text(frame.right + 10, frame.y + 5, label, TEXT, "start", "stacks", bold=True)
    if arch.final_norm:
        for column in (encoder, decoder):
            column.end_norm.draw(canvas, ["LayerNorm (end of stack)"], "norm", "residual")
        for column in (encoder, decoder):
            path = [(column.x, column.top - 4), (column.x, column.end_norm.bottom + 2)]
            canvas.arrow(path, part="residual")
    return cross


def _memory(canvas: Canvas, encoder: _Column, decoder: _Column, cross: float, d: int) -> None:
    """The encoder's output, routed between the frames into the decoder's attention at `cross`.

    Its label sits above the arrow's first turn, left of the gap it runs down: nothing crosses it.
    """
    route, out = (encoder.frame.right + decoder.frame.left) / 2, encoder.output
    path = [
        (encoder.x, out),
        (encoder.x, out - 24),
        (route, out - 24),
        (route, cross),
        (decoder.x - SUBLAYER_WIDTH / 2 - 1, cross),
    ]
    canvas.arrow(path, part="stacks")
    label = f"memory (B, {encoder.length}, {d}): keys and values"
    canvas.text(route - 8, out - 32, label, SMALL, "end", "stacks")


def _output_column(canvas: Canvas, decoder: _Column, d: int) -> None:
    """The output layer on top of the decoder: a linear layer, then a softmax."""
    x, length, vocab = decoder.x, decoder.length, decoder.vocab
    linear, softmax = _output_layer(decoder)
    shape = f"(B, {length}, {d})"
    canvas.arrow([(x, decoder.output), (x, linear.bottom)], label=shape, part="output")
    linear.draw(canvas, ["Linear", f"{d} × {vocab:,}"], "output", "output")
    canvas.arrow([(x, linear.top), (x, softmax.bottom + 1)], part="output")
    softmax.draw(canvas, ["Softmax"], "output", "output")
    canvas.arrow(  # its label to the left, over the encoder's side, where there is room
        [(x, softmax.top), (x, softmax.top - LABELLED)],
        label=f"(B, {length}, {vocab:,}): next-token probabilities",
        part="output",
        label_side="left",
    )


def _shared_matrices(canvas: Canvas, encoder: _Column, decoder: _Column, sharing: str) -> None:
    """One matrix in several roles (section 3.4): dashed links between the boxes that share it."""
    source, target = encoder.embedding, decoder.embedding
    linear, _ = _output_layer(decoder)
    if sharing != "none":
        right = decoder.frame.right + 4
        path = [(target.right, target.y), (right, target.y)]
        path += [(right, linear.y), (linear.right, linear.y)]
        canvas.arrow(path, part="embeddings", dashed=True)
        canvas.text(right + 6, target.y - 40, "same matrix", SMALL, "start", "embeddings")
    if sharing == "all three":
        path = [(source.right, source.y), (target.left, target.y)]
        canvas.arrow(path, part="embeddings", dashed=True)
        middle = (source.right + target.left) / 2
        canvas.text(middle, source.y - 8, "same matrix", SMALL, "middle", "embeddings")


def _architecture_words(arch: Architecture, marked: frozenset[str]) -> tuple[str, str]:
    """The drawing's title and its text alternative, which says what the picture shows."""
    norm = (
        "pre-norm: a LayerNorm before each sublayer and one at the end of each stack, the residual "
        "path adding the sublayer's output unnormalized"
        if arch.norm_first
        else "post-norm as in the paper: each sublayer's output added to its input, then "
        "normalized (Add & Norm)"
    )
    encoding = (
        "sinusoidal positional encodings"
        if arch.positions == "sinusoids"
        else "learned position vectors"
    )
    sharing = {
        "all three": "one matrix shared by both embeddings and the output layer",
        "target and output": "the target embedding shared with the output layer",
        "none": "no shared matrices",
    }[arch.sharing]
    title = (
        f"The Transformer as built: {arch.encoder_layers} encoder and "
        f"{arch.decoder_layers} decoder layers, d_model {arch.d_model}"
    )
    description = (
        f"Encoder on the left, decoder on the right, inputs at the bottom. Source tokens pass "
        f"through an embedding, to which {encoding} are added, into the encoder, whose layer "
        f"(repeated {arch.encoder_layers} times) has multi-head self-attention ({arch.h} heads, "
        f"each with queries and keys of {arch.d_k} numbers) and a feed-forward network "
        f"({_feed_forward(arch)}); {norm}. The decoder's layer (repeated "
        f"{arch.decoder_layers} times) has masked self-attention, attention over the encoder's "
        f"output, and a feed-forward network; a linear layer and a softmax turn its output into "
        f"probabilities over {arch.tgt_vocab:,} target tokens. {sharing.capitalize()}."
    )
    if marked:
        description += f" Outlined in red: {', '.join(sorted(marked))}."
    return title, description


def architecture(
    model: EncoderDecoder | ModelConfig | Architecture,
    built: Iterable[str] | None = None,
    highlight: Iterable[str] = (),
) -> Drawing:
    """The model as the paper's Figure 1 lays it out, drawn from the model itself.

    Encoder on the left, decoder on the right, inputs at the bottom; one layer of each stack is
    drawn, with its repeat count N beside it; tensor shapes on the arrows, B being the batch, S
    the source length and T the target length. `built` names the PARTS drawn in full (the others
    faintly), `highlight` those outlined in red: chapter 2 grows the picture with them.
    """
    arch = model if isinstance(model, Architecture) else architecture_of(model)
    built_parts = None if built is None else frozenset(built)
    marked = frozenset(highlight)
    for name in (built_parts or frozenset()) | marked:
        if name not in PARTS:
            raise ValueError(f"no part {name!r} in the drawing; the parts are {PARTS}")
    encoder, decoder = _columns(arch)
    height = _canvas_height(arch)
    # Two layers, the background (the frames behind the stacks) painted before the foreground.
    background = Canvas(FIGURE_WIDTH, height, built=built_parts, highlight=marked)
    _stack_frames(background, encoder, decoder, arch.encoder_layers)
    foreground = Canvas(FIGURE_WIDTH, height, built=built_parts, highlight=marked)
    for column in (encoder, decoder):
        _embedding_column(foreground, column, arch)
    cross = _stacks(foreground, encoder, decoder, arch)
    _memory(foreground, encoder, decoder, cross, arch.d_model)
    _output_column(foreground, decoder, arch.d_model)
    _shared_matrices(foreground, encoder, decoder, arch.sharing)
    _, softmax = _output_layer(decoder)
    top = softmax.top - LABELLED - 12  # just above the output's arrow: no empty band on top
    picture = Canvas(FIGURE_WIDTH, height, background.items + foreground.items, top=top)
    title, description = _architecture_words(arch, marked)
    return Drawing(picture.svg(title, description), title, description)


# ---------------------------------------------------------------- attention as a flow (Figure 2)

FLOW_STEP = 76  # from one box of a flow to the next: the box, and an arrow with a shape beside it


def _shape(tensor: Tensor, names: Sequence[str]) -> str:
    """A tensor's shape with its axes named: (B 2, n 5, d_k 64)."""
    sizes = list(tensor.shape)
    names = list(names)[-len(sizes) :]
    return "(" + ", ".join(f"{n} {s}" for n, s in zip(names, sizes, strict=True)) + ")"


def _flow_steps(canvas: Canvas, x: float, y: float, steps: list, shape: str) -> float:
    """The boxes between attention's two MatMuls, bottom up from the first (centred on (x, y)),
    the scores' shape on the left of each arrow. Returns where the second MatMul goes."""
    for lines, kind in steps:
        canvas.arrow([(x, y - 23), (x, y - 53)], label=shape, label_side="left")
        y -= FLOW_STEP
        canvas.box(x, y, 270, 46, lines, kind)
    canvas.arrow([(x, y - 23), (x, y - 53)], label=shape + ": the weights", label_side="left")
    return y - FLOW_STEP


def attention_flow(
    query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None = None
) -> Drawing:
    """Scaled dot-product attention (equation 1) drawn as the flow of these tensors' shapes.

    The shapes are computed by running chapter 1's `attention` on the tensors, so the drawing
    shows what the code does with them.
    """
    from annotated.ch01_attention import attention

    output, weights = attention(query, key, value, mask)
    lead = ["B", "h"][: query.dim() - 2]
    q_names, k_names = [*lead, "n", "d_k"], [*lead, "m", "d_k"]
    v_names, s_names = [*lead, "m", "d_v"], [*lead, "n", "m"]
    d_k = query.size(-1)
    steps = [(["Scale: ÷ √d_k", f"√{d_k} = {d_k**0.5:.3g}"], "operation")]
    if mask is not None:
        steps.append((["Mask the scores", "forbidden → finfo(dtype).min"], "operation"))
    steps.append((["Softmax over the keys", "each row sums to 1"], "operation"))
    if mask is not None:
        steps.append((["Mask the weights", "forbidden → 0"], "operation"))
    inputs = [
        ["Q (queries)", _shape(query, q_names)],
        ["K (keys)", _shape(key, k_names)],
        ["V (values)", _shape(value, v_names)],
    ]
    # Three inputs side by side, the flow rising from K's: its shapes on the left of its arrows.
    width = max(190, max(_text_width(lines[1]) for lines in inputs) + 20)
    q_x, spacing = 20 + width / 2, width + 24
    x, v_x = q_x + spacing, q_x + 2 * spacing
    canvas = Canvas(int(v_x + width / 2 + 20), 84 + FLOW_STEP * (len(steps) + 1) + 103)
    bottom = canvas.height - 34
    for i, lines in enumerate(inputs):
        canvas.box(q_x + i * spacing, bottom, width, 46, lines, "tensor")
    y = bottom - 84
    canvas.arrow([(q_x, bottom - 23), (q_x, y + 10), (x - 135, y + 10)])
    canvas.arrow([(x, bottom - 23), (x, y + 23)])
    canvas.box(x, y, 270, 46, ["MatMul: Q Kᵀ", "one score per query and key"], "operation")
    y = _flow_steps(canvas, x, y, steps, _shape(weights, s_names))
    canvas.arrow([(v_x, bottom - 23), (v_x, y), (x + 135, y)])
    canvas.box(x, y, 270, 46, ["MatMul: weights · V", "a weighted sum of values"], "operation")
    output_shape = _shape(output, [*lead, "n", "d_v"]) + ": output"
    canvas.arrow([(x, y - 23), (x, y - 57)], label=output_shape, label_side="left")
    canvas.top = y - 69  # nothing above the output's arrow
    masked = (
        " A mask sets the scores of forbidden keys to the most negative number their dtype holds"
        " (not minus infinity) before the softmax, and their weights to 0 after it."
        if (mask is not None)
        else ""
    )
    title = "Scaled dot-product attention as a flow of tensors"
    description = (
        f"Queries {_shape(query, q_names)} and keys {_shape(key, k_names)} are multiplied into "
        f"scores {_shape(weights, s_names)}, divided by the square root of d_k ({d_k}), "
        f"turned by a softmax over the keys into weights that sum to 1 for each query, and "
        f"used to average the values {_shape(value, v_names)} into the output "
        f"{_shape(output, [*lead, 'n', 'd_v'])}.{masked}"
    )
    return Drawing(canvas.svg(title, description), title, description)


def _flow_width(x: float, spacing: float, width: float, cards: float, label: str) -> int:
    """The width of multi-head attention's drawing: its V column and label, or the heads' count."""
    v_x = x + spacing
    count = x + cards / 2 + 12 + 14 + _text_width("× h = 00", TEXT, 0.66)
    return int(max(v_x + width / 2 + 20, v_x + 6 + _text_width(label) + 10, count + 10))


def _heads(canvas: Canvas, x: float, y: float, width: float, lines: Sequence[str], h: int) -> None:
    """The h heads: cards stacked behind each other, the front one centred on (x, y)."""
    for offset in (12, 6):
        canvas.box(x + offset, y - offset, width, 56, [""], "attention")
    canvas.box(x, y, width, 56, lines, "attention")
    canvas.text(x + width / 2 + 26, y - 6, f"× h = {h}", TEXT, "start", bold=True)


def multi_head_flow(module: MultiHeadAttention, length: int = 10) -> Drawing:
    """Multi-head attention (section 3.2.2) drawn from a module's own sizes and weights."""
    h, d_model, d_k, d_v = module.h, module.d_model, module.d_k, module.d_v
    q_out, q_in = module.w_q.weight.shape
    o_out, o_in = module.w_o.weight.shape
    widths = {"Q": d_k, "K": d_k, "V": d_v}
    inputs = {
        name: (
            [f"{name} input", f"(B, {length}, {d_model})"],
            [f"Linear W^{name}", f"{q_in} → {h} × {w}"],
        )
        for name, w in widths.items()
    }
    labels = {name: f"(B, {h}, {length}, {w})" for name, w in widths.items()}
    # The three inputs side by side, each shape on the right of its arrow, clear of the next one.
    width = max(
        170, *(_text_width(line) + 20 for pair in inputs.values() for b in pair for line in b)
    )
    spacing = max(width + 30, *(_text_width(label) + 16 for label in labels.values()))
    heads = ["Scaled dot-product attention", f"{h} heads at once, each on its d_k = {d_k}"]
    cards = max(300, _text_width(heads[1]) + 24)
    q_x = 20 + width / 2
    x = q_x + spacing
    canvas = Canvas(_flow_width(x, spacing, width, cards, labels["V"]), 492)
    bottom = canvas.height - 34
    for i, (name, (tensor, linear)) in enumerate(inputs.items()):
        column = q_x + i * spacing
        canvas.box(column, bottom, width, 46, tensor, "tensor")
        canvas.arrow([(column, bottom - 23), (column, bottom - 53)])
        canvas.box(column, bottom - 76, width, 46, linear, "operation")
        end = (x + (column - x) / 3, bottom - 180)  # into the heads, a third of the way across
        canvas.arrow([(column, bottom - 99), (column, bottom - 149), end], label=labels[name])
    _heads(canvas, x, bottom - 208, cards, heads, h)
    canvas.arrow([(x, bottom - 248), (x, bottom - 290)], label=f"(B, {h}, {length}, {d_v})")
    lines = ["Concat the heads", f"(B, {length}, {h} × {d_v} = {o_in})"]
    canvas.box(x, bottom - 313, cards, 46, lines, "operation")
    canvas.arrow([(x, bottom - 336), (x, bottom - 366)])
    canvas.box(x, bottom - 389, cards, 46, ["Linear W^O", f"{o_in} → {o_out}"], "operation")
    canvas.arrow([(x, bottom - 412), (x, bottom - 446)], label=f"(B, {length}, {o_out}): output")
    canvas.top = bottom - 458  # nothing above the output's arrow
    title = f"Multi-head attention with h = {h} heads of d_k = {d_k}"
    description = (
        f"Queries, keys and values of shape (B, {length}, {d_model}) each pass through their own "
        f"linear map ({q_in} to {q_out} = {h} heads × {d_k}), are split into {h} heads, attend "
        f"in parallel by scaled dot-product attention, are concatenated back to width {o_in}, "
        f"and mixed by the output map W^O into (B, {length}, {o_out})."
    )
    return Drawing(canvas.svg(title, description), title, description)


# ---------------------------------------------------------------- teacher forcing (chapter 3)

CELL = 52  # the side of one token's cell in the grid drawings, wider for longer words


def _cell_size(words: Sequence[str]) -> float:
    """A cell wide enough for the longest of the words, with the gap between two cells."""
    return max(CELL, *(max(_text_width(word, TEXT), _ink_width(word, TEXT)) + 24 for word in words))


def _token_row(
    canvas: Canvas, left: float, y: float, words: Sequence[str], kind: str, label: str, cell: float
) -> None:
    """One row of token cells, left to right, with its label on the left."""
    canvas.text(left - 12, y + 5, label, SMALL, "end")
    for i, word in enumerate(words):
        canvas.box(left + cell * i + cell / 2, y, cell - 12, 32, [word], kind)


def _mask_grid(
    canvas: Canvas, left: float, top: float, words: Sequence[str], mask: list, cell: float
) -> None:
    """The target mask, row i the inputs position i may see, with the word it must predict."""
    length = len(mask)
    canvas.text(left - 12, top + 18, "tgt_mask: which inputs", SMALL, "end")
    canvas.text(left - 12, top + 36, "each position sees", SMALL, "end")
    for i in range(length):
        y = top + cell * i + cell / 2
        for j in range(length):
            visible = bool(mask[i][j])
            kind = "attention" if visible else "tensor"
            canvas.box(
                left + cell * j + cell / 2,
                y,
                cell - 6,
                cell - 6,
                [words[j] if visible else "×"],
                kind,
            )
        canvas.text(left + cell * length + 8, y + 5, f"→ {words[i + 1]}", SMALL, "start")


def teacher_forcing(batch, words: Sequence[str], row: int = 0) -> Drawing:
    """One sentence of a training Batch: the target shifted into decoder input and prediction,
    and the mask that lets each input position see only itself and the positions before it.

    `words` names the target's tokens in order (<s> first, pads included); which cell is visible
    is read from `batch.tgt_mask` itself, so a wrong mask draws wrong.
    """
    tgt_in = batch.tgt_in[row].tolist()
    mask = batch.tgt_mask[row].tolist()  # (tgt_len, tgt_len), True where a position may look
    length = len(tgt_in)
    if len(words) != length + 1:
        raise ValueError(
            f"give one word per target token: {length + 1} (<s> and {length} more), got {len(words)}"
        )
    cell, left, top = _cell_size(words), 220, 30
    ends = max(_text_width(f"→ {word}") for word in words)
    canvas = Canvas(int(left + cell * (length + 1) + max(ends - cell, 0) + 30), 0)
    rows = top + 16, top + 86, top + 156  # the target, the decoder's input, what it must predict
    _token_row(canvas, left, rows[0], words, "embedding", "target", cell)
    _token_row(canvas, left, rows[1], words[:-1], "tensor", "decoder input tgt_in", cell)
    _token_row(canvas, left, rows[2], words[1:], "output", "must predict tgt_out", cell)
    for i in range(length):
        x = left + cell * i + cell / 2
        canvas.arrow([(x, rows[0] + 16), (x, rows[1] - 16)])  # the input: the target but its last
        gap = x + cell / 2  # the shift runs down the gap between two inputs
        shift = [(x + cell - 6, rows[0] + 16), (gap, rows[1] - 20), (gap, rows[1] + 20)]
        canvas.arrow([*shift, (x + 6, rows[2] - 16)], dashed=True)
    grid_top = rows[2] + 46
    _mask_grid(canvas, left, grid_top, words, mask, cell)
    canvas.height = int(grid_top + cell * length + 16)
    title = f"Teacher forcing: one target sentence of {length + 1} tokens as a training example"
    description = (
        f"The target ({' '.join(words)}) is cut into the decoder's input, every token but the "
        f"last ({' '.join(words[:-1])}), and what it must predict, every token but the first "
        f"({' '.join(words[1:])}); dashed arrows show the shift by one position. Below, the mask: "
        f"row i lists the inputs that position i may attend to, the positions up to and "
        f"including i, and crosses mark the future it may not see; at the end of each row is the "
        f"token that position must predict. All {length} positions are trained at once."
    )
    return Drawing(canvas.svg(title, description), title, description)


# ---------------------------------------------------------------- decoding, step by step


def _decoding_key(canvas: Canvas, left: float, y: float, cached: bool) -> None:
    """The key below the decoding steps: what each colour of box means, one a line."""
    keys = [
        ("feed_forward", "computed at this step"),
        ("output", "chosen: the most probable next token"),
    ]
    if cached:
        keys.append(("positions", "keys and values read from the cache"))
    for i, (kind, words) in enumerate(keys):
        canvas.box(left + 18, y + 26 * i, 36, 20, [""], kind)
        canvas.text(left + 46, y + 26 * i + 5, words, SMALL, "start")
    canvas.height = int(y + 26 * len(keys))


def _decoding_masks(canvas: Canvas, x: float, y: float, t: int, cached: bool) -> None:
    """The mask the decoder's self-attention applies at step t, as the code builds it, its top
    left corner at (x, y): chapter 1's subsequent mask over the prefix, or, with the cache, one
    query that may look at every position so far."""
    mask = torch.ones(1, t + 1, dtype=torch.bool) if cached else subsequent_mask(t + 1)[0]
    size = min(8.0, 32 / (t + 1))
    for i, row in enumerate(mask.tolist()):
        for j, visible in enumerate(row):
            canvas.cell(x + size * j, y + size * i, size, visible)


def decoding_steps(output: Sequence[str], cached: bool, bos: str = "<s>") -> Drawing:
    """Greedy decoding of one sentence drawn step by step, from the tokens it produced.

    Step t feeds the decoder `<s>` and the t - 1 tokens chosen so far, and appends the most
    probable next token. Without a cache (chapter 4) every step recomputes all of its positions;
    with one (chapter 6) only the newest position is computed and the earlier ones' keys and
    values are read from the cache. `output` is the decoder's own output, ending with </s>.
    """
    steps, left, top, pitch = len(output), 80, 56, 44
    # Cells as wide as the longest word, narrower (to the words' width) if the row is long.
    room = (MAX_WIDTH - left - 24 - 30 - 52) / (steps + 1)
    widest = max(max(_text_width(w, TEXT), _ink_width(w, TEXT)) for w in [bos, *output]) + 8
    cell = max(widest, min(_cell_size([bos, *output]), room))
    masks_x = left + cell * (steps + 1) + 24 + 30  # the column of mask drawings on the right
    canvas = Canvas(int(max(masks_x + 52, left + 400)), 0)
    canvas.text(canvas.width - 10, top - 34, "self-attention mask", SMALL, "end")
    canvas.text(canvas.width - 10, top - 16, "(rows: queries computed)", SMALL, "end")
    computed, reused = 0, 0
    for t in range(steps):
        y = top + pitch * t + 16
        _decoding_masks(canvas, masks_x, y - 16, t, cached)
        canvas.text(left - 12, y + 5, f"step {t + 1}", SMALL, "end")
        prefix = [bos, *output[:t]]
        for i, word in enumerate(prefix):
            from_cache = cached and i < t
            kind = "positions" if from_cache else "feed_forward"
            canvas.box(left + cell * i + cell / 2, y, cell - 6, 32, [word], kind)
            reused, computed = reused + from_cache, computed + (not from_cache)
        end = left + cell * len(prefix)
        canvas.arrow([(end - 3, y), (end + 25, y)])
        canvas.box(end + 24 + cell / 2, y, cell - 6, 32, [output[t]], "output")
    _decoding_key(canvas, left, top + pitch * steps + 20, cached)
    how = "with a key/value cache" if cached else "recomputing the prefix"
    title = f"Greedy decoding {how}: {steps} steps, one token each"
    description = (
        f"Each row is one step. The decoder is fed the start symbol and the tokens chosen so far, "
        f"and appends the most probable next one; the output is {' '.join(output)}. On the "
        "right, the mask of the decoder's self-attention at each step: "
        + (
            "one row, since only the newest position asks, and it may see every position so far. "
            if cached
            else "a triangle, one row per position of the prefix, each seeing itself and the "
            "positions before it. "
        )
        + (
            f"With the cache only the newest position is computed at each step ({computed} "
            f"positions in all), the earlier ones' keys and values being read back ({reused} reads)."
            if cached
            else f"Without a cache every step recomputes every position of its prefix: {computed} "
            f"positions for {steps} tokens."
        )
    )
    return Drawing(canvas.svg(title, description), title, description)


# ---------------------------------------------------------------- beam search as a tree (chapter 6)


BEAM_LEFT, BEAM_PITCH = 76, 78  # room for the steps' names; from one step's row to the next
BEAM_SPACING = 70, 118  # the least and the most room across for one candidate's box


def _beam_columns(rows: int) -> tuple[int, float]:
    """How many of a step's candidates fit across the column, and the room each has."""
    room = MAX_WIDTH - BEAM_LEFT - 10
    least, most = BEAM_SPACING
    if rows * least <= room:
        return rows, min(most, room / rows)
    return int(room // least), float(least)


def _fit(word: str, width: float, spacing: float) -> str:
    """A word cut, with an ellipsis, to fit its box's width and to keep clear of its neighbours
    at the layout's 0.6 em a character (the text alternative has it whole)."""
    cut = word
    while len(cut) > 1 and (_ink_width(cut) > width - 8 or _text_width(cut) > spacing - 2):
        cut = cut[:-2] + "…"
    return cut


def _wrap(words: str, width: float) -> list[str]:
    """Lines of SMALL text no wider than `width`, broken between words."""
    chars, lines, line = max(int(width // _text_width("x")), 10), [], ""
    for word in words.split(" "):
        if line and len(line) + 1 + len(word) > chars:
            lines, line = [*lines, line], word
        else:
            line = f"{line} {word}" if line else word
    return [*lines, line]


def _beam_node(
    canvas: Canvas,
    candidate: BeamCandidate,
    start: tuple[float, float] | None,
    centre: tuple[float, float],
    word: str,
    winner: bool,
    width: float,
) -> None:
    """One candidate of the tree: an arrow down from its hypothesis (when that is drawn), and its
    box, coloured by its fate."""
    status = "finished" if candidate.finished else "dropped" if candidate.kept is None else "kept"
    (x, y), fill = centre, {"kept": "attention", "finished": "output", "dropped": "tensor"}
    if start is not None:
        canvas.arrow([start, (x, y - 22)], part=status)
    lines = [word, f"{candidate.score:.2f}"]
    canvas.box(x, y, width, 40, lines, fill[status], "winner" if winner else status, SMALL)


def _beam_rows(canvas: Canvas, trace, words, winners, shown: int, spacing: float) -> float:
    """The tree, top down: <s>, then one row per step, best candidate first. Returns its bottom."""
    xs = [BEAM_LEFT + spacing * rank + spacing / 2 for rank in range(shown)]
    y = 30
    canvas.box((xs[0] + xs[-1]) / 2, y, 60, 32, ["<s>"], "tensor")
    beam_ends = {0: ((xs[0] + xs[-1]) / 2, y + 16)}  # beam position -> the bottom of its node
    for s, step in enumerate(trace):
        y += BEAM_PITCH
        canvas.text(BEAM_LEFT - 12, y + 5, f"step {s + 1}", SMALL, "end")
        next_ends = {}
        for rank, c in enumerate(step[:shown]):
            word = _fit(words[c.tokens[-1]], spacing - 6, spacing)
            winner = c in winners.values()
            start = beam_ends.get(c.parent)
            _beam_node(canvas, c, start, (xs[rank], y), word, winner, spacing - 6)
            if c.kept is not None:
                next_ends[c.kept] = (xs[rank], y + 20)
        beam_ends = next_ends
    return y + 20


def beam_tree(
    trace: Sequence[Sequence[BeamCandidate]],
    words: Sequence[str],
    alphas: Sequence[float] = (0.0, 2.5),
) -> Drawing:
    """A traced beam search (chapter 6's `beam_search(trace=...)`) drawn as a tree, step by step.

    The tree grows downwards, one row a step; in each row the 2k best extensions of the beam,
    best first (left), each with its word and the sum of log-probabilities so far. Those that
    continue are kept (orange), those that end with </s> within the best k are set aside as
    finished candidates (purple), the rest are dropped (grey), an extension ending with </s> below
    the best k included. The finished candidate each length penalty alpha would choose (chapter
    6's `beam_winner`) is outlined in red. A beam too wide for the page draws each step's best.
    """
    winners = {alpha: beam_winner(trace, alpha) for alpha in alphas}
    rows = max(len(step) for step in trace)
    shown, spacing = _beam_columns(rows)
    canvas = Canvas(
        int(BEAM_LEFT + spacing * shown + 10),
        0,
        built=frozenset({"kept", "finished", "winner"}),  # the dropped ones drawn faintly
        highlight=frozenset({"winner"}),
    )
    y = _beam_rows(canvas, trace, words, winners, shown, spacing) + 14
    lines = [
        f"α = {alpha:g}: best finished candidate “{' '.join(words[t] for t in w.tokens)}”"
        for alpha, w in winners.items()
    ]
    notes = [f"Drawn: the best {shown} of each step's {rows} candidates."] if shown < rows else []
    for line in notes + lines:  # a line too long for the page goes on, indented, below
        first, *more = _wrap(line, canvas.width - 30)
        more = _wrap(" ".join(more), canvas.width - 50) if more else []
        for indent, part in [(20, first)] + [(40, part) for part in more]:
            y += 20
            canvas.text(indent, y, part, SMALL, "start")
    canvas.height = int(y + 12)
    beam, finished = rows // 2, sum(c.finished for step in trace for c in step)
    title = f"Beam search as a tree: {len(trace)} steps, beam of {beam}"
    description = (
        f"Each row is a step of the search, from the top; in it the {2 * beam} best extensions of "
        "the hypotheses in the beam, best first from the left, with their word and summed "
        "log-probability, and an arrow from the hypothesis each extends. Orange "
        f"ones stay in the beam; purple ones end with </s> among the best {beam} and are set "
        f"aside as finished candidates; faint ones are dropped, an extension ending with </s> "
        f"below the best {beam} too. {finished} candidates finished. " + "; ".join(lines) + "."
    )
    return Drawing(canvas.svg(title, description), title, description)
