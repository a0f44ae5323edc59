"""Chapter 2's charts: the sinusoidal positional encoding, how two positions' encodings compare,
and the gradient that post-norm and pre-norm stacks send to each layer; and the architecture of
Figure 1, drawn from a built model.

The chapter computes what the paper claims (`sinusoidal_table`, `position_similarity`); this
module draws it. The post-norm/pre-norm comparison is the book's own experiment, not a claim of
the paper, so its measurement (`gradient_norms_by_layer`) lives here beside its chart.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import altair as alt
import pandas as pd
import torch
from torch import nn

from annotated.ch01_attention import padding_mask
from annotated.ch02_model import (
    EncoderDecoder,
    LearnedPositions,
    ModelConfig,
    make_model,
    sinusoidal_table,
)
from annotated.figures import rounded
from annotated.figures.svg import (
    SMALL,
    TEXT,
    Canvas,
    Drawing,
)


def positional_heatmap(positions: int = 100, d_model: int = 64) -> alt.Chart:
    """Heatmap of the sinusoidal encodings: position against dimension."""
    table = sinusoidal_table(positions, d_model)
    frame = pd.DataFrame(
        [
            {"position": pos, "dimension": dim, "value": table[pos, dim].item()}
            for pos in range(positions)
            for dim in range(d_model)
        ]
    )
    return (
        alt.Chart(rounded(frame))
        .mark_rect()
        .encode(
            x=alt.X(
                "dimension:O",
                title="dimension of the encoding",
                axis=alt.Axis(values=list(range(0, d_model, 8))),
            ),
            y=alt.Y(
                "position:O",
                title="position in the sentence",
                axis=alt.Axis(values=list(range(0, positions, 10))),
            ),
            color=alt.Color(
                "value:Q", scale=alt.Scale(scheme="redblue", domain=[-1, 1]), title="PE"
            ),
            tooltip=["position", "dimension", "value"],
        )
        .properties(
            width=420, height=300, title=f"Sinusoidal positional encoding (d_model = {d_model})"
        )
    )


def positional_curves(
    dimensions: tuple[int, ...] = (2, 3, 12, 24), positions: int = 100, d_model: int = 64
) -> alt.Chart:
    """A few dimensions of the encoding as curves over position."""
    table = sinusoidal_table(positions, d_model)
    frame = pd.DataFrame(
        [
            {
                "position": pos,
                "dimension": f"dim {dim} ({'sin' if dim % 2 == 0 else 'cos'})",
                "value": table[pos, dim].item(),
            }
            for dim in dimensions
            for pos in range(positions)
        ]
    )
    return (
        alt.Chart(rounded(frame))
        .mark_line()
        .encode(
            x=alt.X("position:Q", title="position"),
            y=alt.Y("value:Q", title="PE(position, dimension)"),
            color=alt.Color("dimension:N", title="dimension"),
            tooltip=["position", "dimension", "value"],
        )
        .properties(
            width=420,
            height=180,
            title="Dimensions 2 and 3 share one frequency; higher dimensions oscillate more slowly",
        )
    )


def positional_chart() -> alt.VConcatChart:
    """The heatmap of the encodings above a few of their dimensions as curves."""
    return (positional_heatmap() & positional_curves()).properties(
        title="Section 3.5's positional encoding"
    )


def similarity_chart(frame: pd.DataFrame) -> alt.Chart:
    """Similarity of two positions' encodings against their distance, one line per anchor."""
    return (
        alt.Chart(rounded(frame))
        .mark_line(point=alt.OverlayMarkDef(size=12))
        .encode(
            x=alt.X("offset k:Q", title="distance k between the two positions"),
            y=alt.Y("similarity:Q", title="PE(p) · PE(p + k) / (d_model / 2)"),
            color=alt.Color("anchor p:N", sort=None, title="where the pair sits"),
            strokeDash=alt.StrokeDash("anchor p:N", sort=None, title="where the pair sits"),
            tooltip=["anchor p", "offset k", "similarity"],
        )
        .properties(
            width=420,
            height=200,
            title="Two positions' encodings compare the same wherever they sit",
        )
    )


def gradient_norms_by_layer(seeds: int = 5, N: int = 6, d_model: int = 128) -> pd.DataFrame:
    """Mean gradient norm of each encoder layer's parameters at initialization, post- and pre-norm."""
    rows = []
    for norm_first in (False, True):
        totals = torch.zeros(N, dtype=torch.float64)
        for seed in range(seeds):
            torch.manual_seed(seed)
            sizes = {"N": N, "d_model": d_model, "d_ff": 4 * d_model, "h": 4, "p_drop": 0.0}
            config = ModelConfig(50, 50, norm_first=norm_first, **sizes)
            # float64: the norms then differ between machines only by the last bits of the
            # random initial weights, far below the three digits the table shows.
            model = make_model(config).double()
            src = torch.randint(1, 50, (8, 20))
            memory = model.encode(src, padding_mask(src, 0))
            # A fixed random direction as the "loss": its gradient is a generic signal from the top.
            (memory * torch.randn_like(memory)).sum().backward()
            for i, layer in enumerate(model.encoder.layers):
                squares = sum(p.grad.pow(2).sum() for p in layer.parameters())
                totals[i] += squares.sqrt().item()
        arrangement = "pre-norm" if norm_first else "post-norm (paper)"
        rows += [
            {"layer": i + 1, "arrangement": arrangement, "gradient norm": totals[i].item() / seeds}
            for i in range(N)
        ]
    return pd.DataFrame(rows)


def gradient_chart(frame: pd.DataFrame) -> alt.Chart:
    """Gradient norm per encoder layer for the two arrangements."""
    return (
        alt.Chart(rounded(frame))
        .mark_line(point=True)
        .encode(
            x=alt.X("layer:O", title="encoder layer (1 = bottom)"),
            y=alt.Y(
                "gradient norm:Q", scale=alt.Scale(type="log"), title="gradient norm (log scale)"
            ),
            color=alt.Color("arrangement:N", title="arrangement"),
            tooltip=["layer", "arrangement", "gradient norm"],
        )
        .properties(width=420, height=220, title="Gradient reaching each layer at initialization")
    )


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
