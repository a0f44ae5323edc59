"""Drawings the book computes from its own code: the architecture, and attention as a flow.

Every drawing is SVG written here, by a small drawer of the book's own (boxes, arrows, text on a
fixed grid), from a built model or module and the shapes it really uses. Changing the model
changes the drawing: more layers, pre-norm blocks, shared embeddings all show. A diagram library
that lays out graphs (Graphviz, for one) would place the boxes for us, but it needs a program
outside Python that a reader's laptop may not have, and its layout moves when the graph changes;
Figure 1's layout is fixed and simple enough to place by hand, and a fixed layout is what lets a
reader compare two drawings, and nbval compare a drawing byte for byte on any machine.

A `Drawing` shows itself in Jupyter as SVG; when the book is executed for the site (the same
switch as the charts', ANNOTATED_CHART_HTML=1) it also carries an HTML `<figure>` with the SVG
inline and a caption. Each SVG has a `<title>`, a `<desc>` (the text alternative, which says what
the picture shows), and `role="img"`, so screen readers and the site's tests find both.
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
from annotated.ch06_decoding import length_penalty
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


def _number(value: float) -> str:
    """Coordinates as short, stable text: integers where they are, else one decimal."""
    value = round(float(value), 1)
    return str(int(value)) if value == int(value) else f"{value:.1f}"


@dataclass
class Canvas:
    """An SVG under construction: boxes, arrows and text, each tagged with the part it draws."""

    width: int
    height: int
    items: list[str] = field(default_factory=list)
    built: frozenset[str] | None = None  # parts drawn in full (None: all); the rest faintly
    top: float = 0  # the picture starts here: the space above it is cut off
    highlight: frozenset[str] = frozenset()  # parts drawn with a red outline

    def _style(self, part: str | None) -> str:
        """The attributes of an element of `part`: faint if not built yet, red if highlighted."""
        attributes = f' data-part="{part}"' if part else ""
        if part and self.built is not None and part not in self.built:
            attributes += ' opacity="0.25" stroke-dasharray="4 3"'
        return attributes

    def _stroke(self, part: str | None) -> tuple[str, str]:
        if part and part in self.highlight:
            return HIGHLIGHT, "3"
        return "#333333", "1.2"

    def box(
        self,
        x: float,
        y: float,
        width: float,
        height: float,
        lines: Sequence[str],
        kind: str,
        part: str | None = None,
    ) -> None:
        """A block centred on (x, y) with one or two lines of text."""
        stroke, stroke_width = self._stroke(part)
        left, top = x - width / 2, y - height / 2
        text = "".join(
            f'<text x="{_number(x)}" y="{_number(y + (i - (len(lines) - 1) / 2) * 14 + 4)}" '
            f'text-anchor="middle" font-size="{12 if i == 0 else 10}">{html.escape(line)}</text>'
            for i, line in enumerate(lines)
        )
        self.items.append(
            f"<g{self._style(part)}>"
            f'<rect x="{_number(left)}" y="{_number(top)}" width="{_number(width)}" '
            f'height="{_number(height)}" rx="6" fill="{FILLS[kind]}" stroke="{stroke}" '
            f'stroke-width="{stroke_width}"/>{text}</g>'
        )

    def circle(self, x: float, y: float, symbol: str, part: str | None = None) -> None:
        """A small circle with a symbol in it (⊕: the residual addition)."""
        stroke, stroke_width = self._stroke(part)
        self.items.append(
            f'<g{self._style(part)}><circle cx="{_number(x)}" cy="{_number(y)}" r="9" '
            f'fill="#ffffff" stroke="{stroke}" stroke-width="{stroke_width}"/>'
            f'<text x="{_number(x)}" y="{_number(y + 5)}" text-anchor="middle" '
            f'font-size="14">{html.escape(symbol)}</text></g>'
        )

    def frame(
        self, left: float, top: float, width: float, height: float, label: str, part: str
    ) -> None:
        """A rounded, grey frame around a stack of layers, with its repeat count beside it."""
        stroke, stroke_width = self._stroke(part)
        self.items.append(
            f"<g{self._style(part)}>"
            f'<rect x="{_number(left)}" y="{_number(top)}" width="{_number(width)}" '
            f'height="{_number(height)}" rx="12" fill="#f7f7f7" stroke="{stroke}" '
            f'stroke-width="{stroke_width}"/>'
            f'<text x="{_number(left - 8)}" y="{_number(top + height / 2 + 5)}" '
            f'text-anchor="end" font-size="14" font-weight="bold">{html.escape(label)}</text></g>'
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
        dash = ' stroke-dasharray="5 4"' if dashed else ""
        label_svg = ""
        if label:
            (x0, y0), (x1, y1) = points[0], points[1]
            mid_x, mid_y = (x0 + x1) / 2, (y0 + y1) / 2
            offset, anchor = (6, "start") if label_side == "right" else (-6, "end")
            label_svg = (
                f'<text x="{_number(mid_x + offset)}" y="{_number(mid_y + 4)}" '
                f'text-anchor="{anchor}" font-size="10" fill="#555555">{html.escape(label)}</text>'
            )
        self.items.append(
            f"<g{self._style(part)}>"
            f'<polyline points="{path}" fill="none" stroke="{stroke}" '
            f'stroke-width="{stroke_width}"{dash} marker-end="url(#{{arrow}})"/>{label_svg}</g>'
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
        size: int = 12,
        anchor: str = "middle",
        part: str | None = None,
        bold: bool = False,
    ) -> None:
        weight = ' font-weight="bold"' if bold else ""
        self.items.append(
            f'<text{self._style(part)} x="{_number(x)}" y="{_number(y)}" text-anchor="{anchor}" '
            f'font-size="{size}"{weight}>{html.escape(words)}</text>'
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

SUBLAYER_WIDTH = 214  # a sub-layer's box; the frame around a layer is a little wider
FRAME_WIDTH = 250

PARTS = ("attention", "residual", "feed_forward", "stacks", "embeddings", "positions", "output")


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


def _sublayer_stack(
    canvas: Canvas, x: float, bottom: float, blocks: Sequence[tuple], norm_first: bool, d: int
) -> tuple[float, dict[str, float]]:
    """Draw one layer's sublayers upwards from `bottom`; return the top y and where each sits.

    `blocks` holds (name, lines, kind, part) for each sublayer. Post-norm: sublayer, then an
    "Add & Norm" box the residual path enters. Pre-norm: a Norm box, the sublayer, then ⊕.
    """
    y, where, width = bottom, {}, SUBLAYER_WIDTH
    for name, lines, kind, part in blocks:
        start = y  # the residual path leaves from here
        if norm_first:
            canvas.box(x, y - 17, width, 24, ["LayerNorm"], "norm", "residual")
            canvas.arrow([(x, y - 29), (x, y - 41)], part=part)
            y -= 41
        canvas.box(x, y - 22, width, 36, lines, kind, part)
        where[name] = y - 22
        y -= 40
        canvas.arrow([(x, y), (x, y - 12)], part="residual")
        if norm_first:
            canvas.circle(x, y - 21, "+", "residual")
            join = y - 21
            y -= 30
        else:
            canvas.box(x, y - 27, width, 30, ["Add & Norm"], "norm", "residual")
            join = y - 27
            y -= 42
        side = x - width / 2 - 14
        canvas.arrow(
            [
                (x, start + 4),
                (side, start + 4),
                (side, join),
                (x - (9 if norm_first else width / 2), join),
            ],
            part="residual",
        )
        canvas.arrow([(x, y), (x, y - 14)], label=f"(B, ·, {d})", part=part)
        y -= 14
    return y, where


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
    d = arch.d_model
    extra = 2 * 56 if arch.final_norm else 0
    height = 840 + extra + (40 if arch.norm_first else 0) * 3
    canvas = Canvas(760, height, built=built_parts, highlight=marked)
    enc_x, dec_x = 230, 540
    base = height - 40

    def inputs(x: float, words: str, shape: str, vocab: int, side: str) -> float:
        canvas.text(x, base + 24, words, 12)
        canvas.arrow([(x, base + 8), (x, base - 12)], label=shape, label_side=side)
        canvas.box(
            x,
            base - 34,
            190,
            40,
            ["Embedding × √d_model", f"{vocab:,} × {d}"],
            "embedding",
            "embeddings",
        )
        canvas.arrow([(x, base - 54), (x, base - 70)], part="positions")
        positions = "sinusoids (fixed)" if arch.positions == "sinusoids" else "learned table"
        canvas.box(
            x, base - 90, 190, 36, ["+ positional encoding", positions], "positions", "positions"
        )
        canvas.arrow(
            [(x, base - 108), (x, base - 126)],
            label=f"(B, {shape[4]}, {d})",
            part="positions",
            label_side=side,
        )
        return base - 126

    attention = f"h = {arch.h} heads, d_k = {arch.d_k}"
    feed = f"{d} → {arch.d_ff} → {d}"
    enc_bottom = inputs(enc_x, "source tokens", "(B, S)", arch.src_vocab, "left")
    dec_bottom = inputs(dec_x, "target tokens, shifted right", "(B, T)", arch.tgt_vocab, "right")
    # The encoder's layer.
    enc_top, _ = _sublayer_stack(
        canvas,
        enc_x,
        enc_bottom - 10,
        [
            ("self", ["Multi-head self-attention", attention], "attention", "attention"),
            ("ffn", ["Feed-forward", feed], "feed_forward", "feed_forward"),
        ],
        arch.norm_first,
        d,
    )
    dec_top, where = _sublayer_stack(
        canvas,
        dec_x,
        dec_bottom - 10,
        [
            ("self", ["Masked multi-head self-attention", attention], "attention", "attention"),
            (
                "cross",
                ["Encoder-decoder attention", attention],
                "attention",
                "attention",
            ),
            ("ffn", ["Feed-forward", feed], "feed_forward", "feed_forward"),
        ],
        arch.norm_first,
        d,
    )
    canvas.frame(
        enc_x - FRAME_WIDTH / 2,
        enc_top - 4,
        FRAME_WIDTH,
        enc_bottom - enc_top + 8,
        f"N = {arch.encoder_layers} ×",
        "stacks",
    )
    canvas.frame(
        dec_x - FRAME_WIDTH / 2, dec_top - 4, FRAME_WIDTH, dec_bottom - dec_top + 8, "", "stacks"
    )
    canvas.text(
        dec_x + FRAME_WIDTH / 2 + 10,
        (dec_top + dec_bottom) / 2,
        f"× N = {arch.decoder_layers}",
        14,
        "start",
        "stacks",
        bold=True,
    )
    # Move the frames behind the layers: frames were appended last, so put them first.
    canvas.items[:] = canvas.items[-3:-1] + canvas.items[:-3] + canvas.items[-1:]
    top_enc, top_dec = enc_top, dec_top
    if arch.final_norm:
        canvas.box(enc_x, enc_top - 30, 190, 28, ["LayerNorm (end of stack)"], "norm", "residual")
        canvas.box(dec_x, dec_top - 30, 190, 28, ["LayerNorm (end of stack)"], "norm", "residual")
        canvas.arrow([(enc_x, enc_top - 4), (enc_x, enc_top - 14)], part="residual")
        canvas.arrow([(dec_x, dec_top - 4), (dec_x, dec_top - 14)], part="residual")
        top_enc, top_dec = enc_top - 44, dec_top - 44
    # The encoder's output feeds every decoder layer's attention over the source.
    cross = where["cross"]
    route = (enc_x + dec_x) / 2  # between the two frames
    canvas.arrow(
        [
            (enc_x, top_enc),
            (enc_x, top_enc - 20),
            (route, top_enc - 20),
            (route, cross),
            (dec_x - SUBLAYER_WIDTH / 2 - 1, cross),
        ],
        part="stacks",
    )
    canvas.text(
        route + 4, top_enc - 26, f"memory (B, S, {d}): keys and values", 10, "middle", "stacks"
    )
    # The output layer.
    canvas.arrow([(dec_x, top_dec), (dec_x, top_dec - 18)], label=f"(B, T, {d})", part="output")
    canvas.box(
        dec_x, top_dec - 38, 190, 40, ["Linear", f"{d} × {arch.tgt_vocab:,}"], "output", "output"
    )
    canvas.arrow([(dec_x, top_dec - 58), (dec_x, top_dec - 74)], part="output")
    canvas.box(dec_x, top_dec - 90, 190, 30, ["Softmax"], "output", "output")
    canvas.arrow(
        [(dec_x, top_dec - 105), (dec_x, top_dec - 125)],
        label=f"(B, T, {arch.tgt_vocab:,}): next-token probabilities",
        part="output",
    )
    # One matrix in several roles (section 3.4): dashed links between the boxes that share it.
    emb_y = base - 34
    if arch.sharing != "none":
        right = dec_x + FRAME_WIDTH / 2 + 4
        canvas.arrow(
            [
                (dec_x + 95, emb_y),
                (right, emb_y),
                (right, top_dec - 38),
                (dec_x + 95, top_dec - 38),
            ],
            part="embeddings",
            dashed=True,
        )
        canvas.text(right + 6, emb_y - 40, "same matrix", 10, "start", "embeddings")
    if arch.sharing == "all three":
        canvas.arrow([(enc_x + 95, emb_y), (dec_x - 95, emb_y)], part="embeddings", dashed=True)
        canvas.text((enc_x + dec_x) / 2, emb_y - 6, "same matrix", 10, "middle", "embeddings")
    canvas.top = top_dec - 135  # just above the output's label: no empty space on top
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
        f"{arch.decoder_layers} decoder layers, d_model {d}"
    )
    description = (
        f"Encoder on the left, decoder on the right, inputs at the bottom. Source tokens pass "
        f"through an embedding, to which {encoding} are added, into the encoder, whose layer "
        f"(repeated {arch.encoder_layers} times) has multi-head self-attention ({arch.h} heads, "
        f"each with queries and keys of {arch.d_k} numbers) and a feed-forward network ({feed}); "
        f"{norm}. The decoder's layer (repeated "
        f"{arch.decoder_layers} times) has masked self-attention, attention over the encoder's "
        f"output, and a feed-forward network; a linear layer and a softmax turn its output into "
        f"probabilities over {arch.tgt_vocab:,} target tokens. {sharing.capitalize()}."
    )
    if marked:
        description += f" Outlined in red: {', '.join(sorted(marked))}."
    return Drawing(canvas.svg(title, description), title, description)


# ---------------------------------------------------------------- attention as a flow (Figure 2)


def _shape(tensor: Tensor, names: Sequence[str]) -> str:
    """A tensor's shape with its axes named: (B 2, n 5, d_k 64)."""
    sizes = list(tensor.shape)
    names = list(names)[-len(sizes) :]
    return "(" + ", ".join(f"{n} {s}" for n, s in zip(names, sizes, strict=True)) + ")"


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
    canvas = Canvas(560, 520 if mask is not None else 460)
    x, bottom = 280, canvas.height - 30
    canvas.box(120, bottom, 150, 36, ["Q (queries)", _shape(query, q_names)], "tensor")
    canvas.box(280, bottom, 150, 36, ["K (keys)", _shape(key, k_names)], "tensor")
    canvas.box(440, bottom, 150, 36, ["V (values)", _shape(value, v_names)], "tensor")
    y = bottom - 70
    canvas.arrow([(120, bottom - 18), (120, y + 10), (x - 90, y + 10)])
    canvas.arrow([(280, bottom - 18), (280, y + 18)])
    canvas.box(x, y, 180, 36, ["MatMul: Q Kᵀ", "one score per query and key"], "operation")
    steps = [(["Scale: ÷ √d_k", f"√{d_k} = {d_k**0.5:.3g}"], "operation")]
    if mask is not None:
        steps.append((["Mask", "masked scores → −∞"], "operation"))
    steps.append((["Softmax over the keys", "each row sums to 1"], "operation"))
    for lines, kind in steps:
        canvas.arrow([(x, y - 18), (x, y - 42)], label=_shape(weights, s_names))
        y -= 60
        canvas.box(x, y, 180, 36, lines, kind)
    canvas.arrow([(x, y - 18), (x, y - 42)], label=_shape(weights, s_names) + ": the weights")
    y -= 60
    canvas.arrow([(440, bottom - 18), (440, y), (x + 90, y)])
    canvas.box(x, y, 180, 36, ["MatMul: weights · V", "a weighted sum of values"], "operation")
    canvas.arrow([(x, y - 18), (x, y - 44)], label=_shape(output, [*lead, "n", "d_v"]) + ": output")
    canvas.top = y - 54  # nothing above the output's arrow
    masked = (
        " A mask sets the scores of forbidden keys to minus infinity before the softmax."
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


def multi_head_flow(module: MultiHeadAttention, length: int = 10) -> Drawing:
    """Multi-head attention (section 3.2.2) drawn from a module's own sizes and weights."""
    h, d_model, d_k, d_v = module.h, module.d_model, module.d_k, module.d_v
    q_out, q_in = module.w_q.weight.shape
    o_out, o_in = module.w_o.weight.shape
    canvas = Canvas(600, 560)
    bottom = canvas.height - 30
    for x, name in ((130, "Q"), (300, "K"), (470, "V")):
        canvas.box(x, bottom, 130, 34, [f"{name} input", f"(B, {length}, {d_model})"], "tensor")
        canvas.arrow([(x, bottom - 17), (x, bottom - 45)])
        width = d_k if name != "V" else d_v
        canvas.box(
            x, bottom - 70, 130, 40, [f"Linear W^{name}", f"{q_in} → {h} × {width}"], "operation"
        )
        canvas.arrow(
            [(x, bottom - 90), (x, bottom - 140), (300 + (x - 300) // 3, bottom - 171)],
            label=f"(B, {h}, {length}, {width})",
        )
    # h heads side by side: cards stacked behind each other.
    for offset in (12, 6):
        canvas.box(300 + offset, bottom - 196 - offset, 260, 50, [""], "attention")
    canvas.box(
        300,
        bottom - 196,
        260,
        50,
        ["Scaled dot-product attention", f"{h} heads at once, each on its d_k = {d_k}"],
        "attention",
    )
    canvas.text(445, bottom - 230, f"× h = {h}", 14, "start", bold=True)
    canvas.arrow([(300, bottom - 221), (300, bottom - 262)], label=f"(B, {h}, {length}, {d_v})")
    canvas.box(
        300,
        bottom - 282,
        260,
        36,
        ["Concat the heads", f"(B, {length}, {h} × {d_v} = {o_in})"],
        "operation",
    )
    canvas.arrow([(300, bottom - 300), (300, bottom - 330)])
    canvas.box(300, bottom - 352, 260, 40, ["Linear W^O", f"{o_in} → {o_out}"], "operation")
    canvas.arrow(
        [(300, bottom - 372), (300, bottom - 410)], label=f"(B, {length}, {o_out}): output"
    )
    canvas.top = bottom - 430  # nothing above the output's arrow
    title = f"Multi-head attention with h = {h} heads of d_k = {d_k}"
    description = (
        f"Queries, keys and values of shape (B, {length}, {d_model}) each pass through their own "
        f"linear map ({q_in} to {q_out} = {h} heads × {d_k}), are split into {h} heads, attend "
        f"in parallel by scaled dot-product attention, are concatenated back to width {o_in}, "
        f"and mixed by the output map W^O into (B, {length}, {o_out})."
    )
    return Drawing(canvas.svg(title, description), title, description)


# ---------------------------------------------------------------- teacher forcing (chapter 3)

CELL = 46  # the side of one token's cell in the grid drawings


def _token_row(
    canvas: Canvas, left: float, y: float, words: Sequence[str], kind: str, label: str
) -> None:
    """One row of token cells, left to right, with its label on the left."""
    canvas.text(left - 10, y + 4, label, 11, "end")
    for i, word in enumerate(words):
        canvas.box(left + CELL * i + CELL / 2, y, CELL - 4, 28, [word], kind)


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
    left, top = 190, 40
    canvas = Canvas(int(left + CELL * (length + 1) + 30), int(top + 190 + CELL * length))
    _token_row(canvas, left, top + 10, words, "embedding", "target")
    _token_row(canvas, left, top + 70, words[:-1], "tensor", "decoder input tgt_in")
    _token_row(canvas, left, top + 130, words[1:], "output", "must predict tgt_out")
    for i in range(length):
        x = left + CELL * i + CELL / 2
        canvas.arrow([(x, top + 25), (x, top + 54)])  # the input: the target without its last
        canvas.arrow([(x + CELL, top + 25), (x + 4, top + 114)], dashed=True)  # the shift
    grid_top = top + 180
    canvas.text(left - 10, grid_top + 12, "tgt_mask: which inputs", 11, "end")
    canvas.text(left - 10, grid_top + 26, "each position sees", 11, "end")
    for i in range(length):
        for j in range(length):
            visible = bool(mask[i][j])
            canvas.box(
                left + CELL * j + CELL / 2,
                grid_top + CELL * i + CELL / 2,
                CELL - 4,
                CELL - 4,
                [words[j] if visible else "×"],
                "attention" if visible else "tensor",
            )
        canvas.text(
            left + CELL * length + 8,
            grid_top + CELL * i + CELL / 2 + 4,
            f"→ {words[i + 1]}",
            11,
            "start",
        )
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


def decoding_steps(output: Sequence[str], cached: bool, bos: str = "<s>") -> Drawing:
    """Greedy decoding of one sentence drawn step by step, from the tokens it produced.

    Step t feeds the decoder `<s>` and the t - 1 tokens chosen so far, and appends the most
    probable next token. Without a cache (chapter 4) every step recomputes all of its positions;
    with one (chapter 6) only the newest position is computed and the earlier ones' keys and
    values are read from the cache. `output` is the decoder's own output, ending with </s>.
    """
    steps = len(output)
    left, top = 110, 46
    masks_x = left + CELL * (steps + 1) + 40  # the column of mask drawings on the right
    canvas = Canvas(int(max(masks_x + 120, left + 500)), int(top + 40 * steps + 60))
    canvas.text(masks_x, top - 20, "self-attention mask", 11, "start")
    canvas.text(masks_x, top - 7, "(rows: queries computed)", 10, "start")
    computed, reused = 0, 0
    for t in range(steps):
        # The mask the decoder's self-attention applies at this step, as the code builds it:
        # chapter 1's subsequent mask over the prefix, or, with the cache, one query that may
        # look at every position so far.
        mask = torch.ones(1, t + 1, dtype=torch.bool) if cached else subsequent_mask(t + 1)[0]
        size = min(8.0, 34 / (t + 1))
        for i, row in enumerate(mask.tolist()):
            for j, visible in enumerate(row):
                canvas.cell(masks_x + size * j, top + 40 * t - 2 + size * i, size, visible)
        y = top + 40 * t + 14
        canvas.text(left - 12, y + 4, f"step {t + 1}", 11, "end")
        prefix = [bos, *output[:t]]
        for i, word in enumerate(prefix):
            from_cache = cached and i < t
            kind = "positions" if from_cache else "feed_forward"
            canvas.box(left + CELL * i + CELL / 2, y, CELL - 4, 28, [word], kind)
            reused, computed = reused + from_cache, computed + (not from_cache)
        end = left + CELL * len(prefix)
        canvas.arrow([(end, y), (end + 22, y)])
        canvas.box(end + 22 + CELL / 2, y, CELL - 4, 28, [output[t]], "output")
    key_y = top + 40 * steps + 26
    canvas.box(left + 20, key_y, 36, 20, [""], "feed_forward")
    canvas.text(left + 44, key_y + 4, "computed at this step", 11, "start")
    canvas.box(left + 220, key_y, 36, 20, [""], "output")
    canvas.text(left + 244, key_y + 4, "chosen: the most probable next token", 11, "start")
    if cached:
        canvas.box(left + 20, key_y + 24, 36, 20, [""], "positions")
        canvas.text(left + 44, key_y + 28, "keys and values read from the cache", 11, "start")
        canvas.height += 24
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


def finished_candidates(trace: Sequence[list[dict]], words: Sequence[str]) -> list[dict]:
    """The finished candidates of a traced search: their tokens, length and summed log-prob.

    Each candidate's tokens are found by following its parents back through the beam, step by
    step; `words[id]` names a token id.
    """
    kept: list[dict[int, dict]] = [
        {c["kept"]: c for c in step if c["kept"] is not None} for step in trace
    ]

    def tokens(candidate: dict) -> list[str]:
        out = [words[candidate["token"]]]
        for s in range(candidate["step"] - 2, -1, -1):  # the parent lives in the step before
            candidate = kept[s][candidate["parent"]]
            out.append(words[candidate["token"]])
        return out[::-1]

    return [
        {"tokens": tokens(c), "length": c["step"], "score": c["score"]}
        for step in trace
        for c in step
        if c["finished"]
    ]


def beam_winner(candidates: Sequence[dict], alpha: float) -> dict:
    """The finished candidate with the best length-penalized score for this alpha (section 6.1)."""
    penalized = [
        c["score"] / float(length_penalty(torch.tensor(float(c["length"])), alpha))
        for c in candidates
    ]
    return candidates[max(range(len(candidates)), key=lambda i: (penalized[i], -i))]


def beam_tree(
    trace: Sequence[list[dict]], words: Sequence[str], alphas: Sequence[float] = (0.0, 2.5)
) -> Drawing:
    """A traced beam search (chapter 6's `beam_search(trace=...)`) drawn as a tree, step by step.

    Each column is a step; in it the 2k best extensions of the beam, best first, each with its
    word and the sum of log-probabilities so far. Those that continue are kept (orange), those
    that end with </s> within the best k are set aside as finished candidates (purple), the rest
    are dropped (grey), an extension ending with </s> below the best k included.
    The finished candidate each length penalty alpha would choose is outlined in red.
    """
    candidates = finished_candidates(trace, words)
    winners = {alpha: beam_winner(candidates, alpha) for alpha in alphas}
    rows = max(len(step) for step in trace)
    left, column, row_height = 70, 112, 44
    canvas = Canvas(
        int(left + column * len(trace) + 60),
        int(90 + row_height * rows + 30 * len(alphas)),
        built=frozenset({"kept", "finished", "winner"}),  # the dropped ones drawn faintly
        highlight=frozenset({"winner"}),
    )
    top = 50
    canvas.box(left - 30, top + row_height / 2, 44, 28, ["<s>"], "tensor")
    place: list[dict[int, tuple[float, float]]] = []  # per step: beam position -> node centre
    for s, step in enumerate(trace):
        x = left + column * s + column / 2 + 10
        canvas.text(x, top - 18, f"step {s + 1}", 11)
        placed: dict[int, tuple[float, float]] = {}
        for rank, c in enumerate(step):
            y = top + row_height * rank + row_height / 2
            parent = (left - 8, top + row_height / 2) if s == 0 else place[s - 1][c["parent"]]
            status = "finished" if c["finished"] else "kept" if c["kept"] is not None else "dropped"
            winner = [
                a
                for a, w in winners.items()
                if w["length"] == c["step"] and w["score"] == c["score"]
            ]
            part = "winner" if winner else status
            canvas.arrow([(parent[0], parent[1]), (x - 44, y)], part=status)
            canvas.box(
                x,
                y,
                88,
                34,
                [words[c["token"]], f"{c['score']:.2f}"],
                {"kept": "attention", "finished": "output", "dropped": "tensor"}[status],
                part,
            )
            if c["kept"] is not None:
                placed[c["kept"]] = (x + 44, y)
        place.append(placed)
    y = top + row_height * rows + 24
    lines = []
    for alpha, w in winners.items():
        line = f"α = {alpha:g}: best finished candidate “{' '.join(w['tokens'])}”"
        canvas.text(left - 30, y, line, 12, "start")
        lines.append(line)
        y += 26
    beam = max(len(s) for s in trace) // 2
    title = f"Beam search as a tree: {len(trace)} steps, beam of {beam}"
    description = (
        f"Each column is a step of the search; in it the {2 * beam} best extensions of the "
        "hypotheses in the beam, best first, with their word and summed log-probability. Orange "
        f"ones stay in the beam; purple ones end with </s> among the best {beam} and are set "
        f"aside as finished candidates; faint ones are dropped, an extension ending with </s> "
        f"below the best {beam} too. {len(candidates)} candidates finished. "
        + "; ".join(lines)
        + "."
    )
    return Drawing(canvas.svg(title, description), title, description)
