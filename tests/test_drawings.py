"""The book's drawings: drawn from the model they show, byte-stable, with a text alternative."""

import dataclasses
import xml.etree.ElementTree as ET

import pytest
import torch

from annotated.ch01_attention import MultiHeadAttention
from annotated.ch02_model import ModelConfig, make_model
from annotated.ch03_training import SpecialTokens
from annotated.figures import HTML_ENV
from annotated.figures.ch01_attention import attention_flow, multi_head_flow
from annotated.figures.ch02_model import PARTS, architecture
from annotated.figures.ch03_training import teacher_forcing
from annotated.figures.ch04_copy_task import decoding_steps
from annotated.figures.ch06_decoding import beam_tree
from annotated.figures.svg import HIGHLIGHT

SVG = "{http://www.w3.org/2000/svg}"


def _small(**changes):
    return ModelConfig(
        **{"src_vocab": 50, "tgt_vocab": 40, "N": 2, "d_model": 32, "d_ff": 64, "h": 4, **changes}
    )


def _texts(drawing):
    root = ET.fromstring(drawing.svg)
    return [element.text for element in root.iter(f"{SVG}text")]


def test_the_drawing_shows_each_stacks_depth_as_built():
    two, six = architecture(_small()), architecture(_small(N=6))
    assert "N = 2 ×" in _texts(two) and "× N = 2" in _texts(two)
    assert "N = 6 ×" in _texts(six) and two.svg != six.svg
    # It reads the modules, not the config: a model whose encoder lost a layer draws that.
    model = make_model(_small(N=3))
    model.encoder.layers = model.encoder.layers[:1]
    texts = _texts(architecture(model))
    assert "N = 1 ×" in texts and "× N = 3" in texts


def test_post_norm_and_pre_norm_are_drawn_differently():
    post, pre = _texts(architecture(_small())), _texts(architecture(_small(norm_first=True)))
    # post-norm: one "Add & Norm" after each of the 2 + 3 sublayers, no final norm
    assert post.count("Add & Norm") == 5 and "LayerNorm" not in post
    assert "LayerNorm (end of stack)" not in post
    # pre-norm: a LayerNorm before each sublayer, ⊕ after it, one more on top of each stack
    assert "Add & Norm" not in pre and pre.count("LayerNorm") == 5 and pre.count("+") == 5
    assert pre.count("LayerNorm (end of stack)") == 2
    assert "pre-norm" in architecture(_small(norm_first=True)).description


@pytest.mark.parametrize(
    ("changes", "links", "said"),
    [
        (
            {"src_vocab": 40, "share_embeddings": True},
            2,
            "shared by both embeddings and the output",
        ),
        ({"tie_target_embeddings": True}, 1, "target embedding shared with the output layer"),
        ({}, 0, "No shared matrices"),
    ],
)
def test_shared_matrices_are_drawn_as_links(changes, links, said):
    drawing = architecture(_small(**changes))
    assert _texts(drawing).count("same matrix") == links
    assert said in drawing.description


def test_the_drawing_is_byte_stable_titled_and_described():
    first, again = architecture(_small()), architecture(make_model(_small()))
    assert first.svg == again.svg  # nothing random, nothing machine-dependent
    root = ET.fromstring(first.svg)
    assert root.get("role") == "img" and int(root.get("width")) > 0 and int(root.get("height")) > 0
    title, desc = root.find(f"{SVG}title"), root.find(f"{SVG}desc")
    assert title.text == first.title and desc.text == first.description
    assert root.get("aria-labelledby") == f"{title.get('id')} {desc.get('id')}"
    assert "2 encoder and 2 decoder layers" in first.title
    assert "40 target tokens" in first.description


def test_parts_can_be_built_up_and_highlighted():
    drawing = architecture(_small(), built=["attention", "residual"], highlight=["residual"])
    root = ET.fromstring(drawing.svg)
    groups = {part: [g for g in root.iter() if g.get("data-part") == part] for part in PARTS}
    assert all(groups[part] for part in PARTS)  # every part is drawn, built or not
    faint = {part for part, items in groups.items() if all(g.get("data-faint") for g in items)}
    # A part not built yet: its shapes pale and dashed, its words grey (still legible).
    for item in (item for part in faint for item in groups[part]):
        shapes = [e for e in item.iter() if e.tag in (f"{SVG}rect", f"{SVG}polyline")]
        assert all(e.get("opacity") and e.get("stroke-dasharray") for e in shapes)
        assert all(t.get("fill") == "#555555" for t in item.iter(f"{SVG}text"))
    assert faint == set(PARTS) - {"attention", "residual"}
    red = {
        part
        for part, items in groups.items()
        if any(e.get("stroke") == HIGHLIGHT for g in items for e in g.iter())
    }
    assert red == {"residual"}
    with pytest.raises(ValueError, match="no part 'decoder'"):
        architecture(_small(), highlight=["decoder"])


def test_the_frames_are_painted_first_and_the_shapes_name_both_lengths():
    for drawing in (architecture(_small()), architecture(_small(norm_first=True))):
        groups = list(ET.fromstring(drawing.svg).iter(f"{SVG}g"))
        frames = [g for g in groups if any(r.get("rx") == "12" for r in g.iter(f"{SVG}rect"))]
        assert len(frames) == 2 and groups[:2] == frames  # the background, behind the stacks
        texts = set(_texts(drawing))
        assert {"(B, S)", "(B, S, 32)", "memory (B, S, 32): keys and values"} <= texts
        assert {"(B, T)", "(B, T, 32)", "(B, T, 40): next-token probabilities"} <= texts


def test_attention_flow_shows_the_shapes_the_code_produces():
    query, key, value = torch.zeros(2, 5, 16), torch.zeros(2, 7, 16), torch.zeros(2, 7, 8)
    texts = " ".join(_texts(attention_flow(query, key, value)))
    assert "(B 2, n 5, m 7)" in texts  # the weights
    assert "(B 2, n 5, d_v 8): output" in texts and "√16 = 4" in texts
    assert "Mask" not in texts
    masked = attention_flow(query, key, value, torch.ones(2, 1, 7, dtype=torch.bool))
    # As chapter 1's code does: the most negative finite score, then weights set to 0.
    assert {"Mask the scores", "Mask the weights", "forbidden → 0"} <= set(_texts(masked))
    assert "most negative number" in masked.description and "weights to 0" in masked.description


def test_multi_head_flow_reads_the_modules_sizes():
    texts = _texts(multi_head_flow(MultiHeadAttention(d_model=64, h=4), len_q=3))
    assert "64 → 4 × 16" in texts and "× h = 4" in texts and "(B, 3, 4 × 16 = 64)" in texts
    # Queries and keys of other lengths (chapter 1's cell: 10 queries, 7 keys): each drawn as run.
    cross = _texts(multi_head_flow(MultiHeadAttention(d_model=64, h=4), len_q=10, len_k=7))
    assert cross.count("(B, 10, 64)") == 1 and cross.count("(B, 7, 64)") == 2  # Q; K and V
    assert "(B, 4, 10, 16)" in cross and "(B, 4, 7, 16)" in cross  # per head: Q; K and V
    assert "(B, 10, 64): output" in cross and "(B, 10, 4 × 16 = 64)" in cross
    other = _texts(multi_head_flow(MultiHeadAttention(d_model=64, h=2, d_k=8, d_v=12)))
    assert "64 → 2 × 8" in other and "64 → 2 × 12" in other and "24 → 64" in other


def test_html_figure_with_caption_only_when_the_book_is_executed(monkeypatch):
    drawing = architecture(_small())
    monkeypatch.delenv(HTML_ENV, raising=False)
    assert set(drawing._repr_mimebundle_()) == {"image/svg+xml", "text/plain"}
    monkeypatch.setenv(HTML_ENV, "1")
    html = drawing._repr_mimebundle_()["text/html"]
    assert html.startswith('<figure class="annotated-drawing"><svg') and "<figcaption>" in html


# ---------------------------------------------------------------- chapters 3, 4 and 6


def _boxes(drawing):
    """The text of every box (a rect with text in one group), in drawing order."""
    root = ET.fromstring(drawing.svg)
    return [
        [t.text for t in g.iter(f"{SVG}text")]
        for g in root.iter(f"{SVG}g")
        if g.find(f"{SVG}rect") is not None
    ]


def test_teacher_forcing_draws_the_batchs_own_mask():
    from annotated.ch03_training import Batch

    batch = Batch.build(torch.tensor([[5, 6, 7]]), torch.tensor([[1, 8, 9, 10, 2]]), pad=0)
    words = ["<s>", "a", "dog", "runs", "</s>"]
    drawing = teacher_forcing(batch, words)
    texts = _texts(drawing)
    assert texts.count("×") == 6  # the future of 4 positions: 3 + 2 + 1 cells
    assert [t for t in texts if t.startswith("→")] == ["→ a", "→ dog", "→ runs", "→ </s>"]
    # A batch whose mask lets every position see everything draws no crosses at all.
    leaky = dataclasses.replace(batch, tgt_mask=torch.ones_like(batch.tgt_mask))
    assert "×" not in _texts(teacher_forcing(leaky, words))
    with pytest.raises(ValueError, match="one word per target token: 5"):
        teacher_forcing(batch, words[:-1])


def test_decoding_steps_show_what_the_cache_saves():
    output = ["a", "dog", "runs", "</s>"]
    plain, cached = decoding_steps(output, cached=False), decoding_steps(output, cached=True)
    fed = [b for b in _boxes(plain) if b and b[0] in ("<s>", "a", "dog", "runs")]
    assert len(fed) == 1 + 2 + 3 + 4 + 3  # the prefixes, and the chosen words but the last
    assert "10 positions for 4 tokens" in plain.description
    assert "(4 positions in all)" in cached.description and "(6 reads)" in cached.description
    assert "keys and values read from the cache" in _texts(cached)
    assert "keys and values read from the cache" not in _texts(plain)


def test_the_beam_tree_outlines_each_alphas_winner_and_fades_the_dropped():
    from annotated.ch06_decoding import beam_search

    torch.manual_seed(0)
    model = make_model(ModelConfig(12, 12, N=1, d_model=32, d_ff=64, h=4)).double().eval()
    specials = SpecialTokens(pad=0, bos=1, eos=2)
    src = torch.randint(3, 12, (1, 5))
    trace = []
    beam_search(model, src, torch.ones(1, 1, 5, dtype=torch.bool), specials, 8, 3, trace=trace)
    words = ["<pad>", "<s>", "</s>"] + [f"w{i}" for i in range(3, 12)]
    drawing = beam_tree(trace, words, alphas=(0.0, 2.5))
    root = ET.fromstring(drawing.svg)
    red = [g for g in root.iter(f"{SVG}g") if g.get("data-part") == "winner"]
    faint = [g for g in root.iter(f"{SVG}g") if g.get("data-faint")]
    assert 1 <= len(red) <= 2 and faint  # this search: "</s>" alone for 0, 8 words for 2.5
    assert all(e.get("stroke") == HIGHLIGHT for g in red for e in g.iter(f"{SVG}rect"))
    assert "α = 0: best finished candidate “</s>”" in drawing.description
    assert "α = 2.5: best finished candidate “w" in drawing.description
    assert f"{len(trace)} steps, beam of 3" in drawing.title


def test_the_beam_tree_draws_only_what_a_hand_made_trace_says():
    from annotated.ch06_decoding import BeamCandidate

    # A beam of one: "</s>" finishes at step 1 (log-prob -1), "w5 </s>" at step 2 (-2). Without
    # a penalty the short one wins; alpha = 10 divides the long one's sum by (7/6)^10 ≈ 4.7.
    trace = [
        (BeamCandidate((2,), 0, -1.0, True, None), BeamCandidate((5,), 0, -1.5, False, 0)),
        (BeamCandidate((5, 2), 0, -2.0, True, None), BeamCandidate((5, 6), 0, -3.0, False, None)),
    ]
    words = ["<pad>", "<s>", "</s>"] + [f"w{i}" for i in range(3, 8)]
    drawing = beam_tree(trace, words, alphas=(0.0, 10.0))
    assert "α = 0: best finished candidate “</s>”" in drawing.description
    assert "α = 10: best finished candidate “w5 </s>”" in drawing.description
    assert "2 candidates finished" in drawing.description
    assert drawing.title == "Beam search as a tree: 2 steps, beam of 1"
    groups = ET.fromstring(drawing.svg).iter(f"{SVG}g")
    boxes = [g for g in groups if g.find(f"{SVG}rect") is not None]
    red = [[t.text for t in g.iter(f"{SVG}text")] for g in boxes if g.get("data-part") == "winner"]
    faint = [[t.text for t in g.iter(f"{SVG}text")] for g in boxes if g.get("data-faint")]
    assert sorted(red) == [["</s>", "-1.00"], ["</s>", "-2.00"]] and faint == [["w6", "-3.00"]]


def test_learned_positions_are_drawn_as_a_table():
    learned, fixed = architecture(_small(learned_positions=True)), architecture(_small())
    assert "learned table" in _texts(learned) and "learned table" not in _texts(fixed)
    assert "learned position vectors" in learned.description
    assert "sinusoidal positional encodings" in fixed.description


def test_decoding_steps_draw_each_steps_mask_from_the_code():
    def filled(drawing):
        root = ET.fromstring(drawing.svg)
        return sum(r.get("fill") == "#3b6ea5" for r in root.iter(f"{SVG}rect"))

    output = ["a", "dog", "runs", "</s>"]
    # Without a cache, step t's mask is the triangle over t positions; with it, one full row.
    assert filled(decoding_steps(output, cached=False)) == 1 + 3 + 6 + 10
    assert filled(decoding_steps(output, cached=True)) == 1 + 2 + 3 + 4


# ---------------------------------------------------------------- legible on the site
#
# The site shows a drawing at the size of its SVG's width and height, never scaled down, in a
# cell output about 940 px wide at a desktop width of 1280 px (drawn at most 920 wide), under
# captions of 14.4 px. These checks read the SVG text of every drawing the chapters make, at the
# sizes they make it: its width, the size of its words on screen, words overlapping words or
# crossed by a line, and the contrast of each word against what is painted behind it. Where a
# word's box is needed it is estimated from its position, anchor and size (0.6 em a character,
# bold 0.66; the ascent and descent of DejaVu Sans, the browser's sans-serif here);
# tests/test_site_layout.py measures the real boxes.

COLUMN_PX = 920  # svg.MAX_WIDTH: a cell's output in the site's column at 1280 px, 20 to spare
LEAST_TEXT_PX = 14.5  # just above the captions' 14.4 px
LEAST_CONTRAST = 4.5  # WCAG AA for text of this size
GLYPH_EM, BOLD_GLYPH_EM, ASCENT_EM, DESCENT_EM = 0.6, 0.66, 0.93, 0.24


@dataclasses.dataclass
class _Word:
    """A <text> of a drawing with what it inherits, its estimated box in SVG units, its colour."""

    text: str
    box: tuple[float, float, float, float]  # left, top, right, bottom
    size: float
    ink: tuple[float, float, float, float]  # RGB 0-255 and alpha, opacity included
    behind: tuple[float, float, float]  # what is painted under the middle of its box
    anchor: tuple[float, float]  # its x and y


def _rgb(colour: str) -> tuple[float, float, float]:
    colour = colour.lstrip("#")
    if len(colour) == 3:
        colour = "".join(c * 2 for c in colour)
    return tuple(int(colour[i : i + 2], 16) for i in (0, 2, 4))


def _over(top: tuple, alpha: float, under: tuple) -> tuple[float, float, float]:
    return tuple(t * alpha + u * (1 - alpha) for t, u in zip(top, under, strict=True))


def _luminance(rgb) -> float:
    def linear(v):
        v /= 255
        return v / 12.92 if v <= 0.03928 else ((v + 0.055) / 1.055) ** 2.4

    r, g, b = (linear(v) for v in rgb)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def _contrast(ink, ground) -> float:
    shown = _over(ink[:3], ink[3], ground)
    high, low = sorted((_luminance(shown), _luminance(ground)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def _covers(shape, x: float, y: float) -> bool:
    tag, attrs = shape
    if tag == "rect":
        left, top = float(attrs.get("x", 0)), float(attrs.get("y", 0))
        right, bottom = left + float(attrs["width"]), top + float(attrs["height"])
        return left <= x <= right and top <= y <= bottom
    cx, cy, r = (float(attrs[k]) for k in ("cx", "cy", "r"))
    return (x - cx) ** 2 + (y - cy) ** 2 <= r * r


def _word_box(attrs: dict, text: str, size: float) -> tuple[float, float, float, float]:
    em = BOLD_GLYPH_EM if attrs.get("font-weight") == "bold" else GLYPH_EM
    width, x, y = len(text) * size * em, float(attrs["x"]), float(attrs["y"])
    left = {"start": x, "middle": x - width / 2, "end": x - width}[
        attrs.get("text-anchor", "start")
    ]
    return left, y - ASCENT_EM * size, left + width, y + DESCENT_EM * size


def _painted(svg: str):
    """Every word, line (polyline) and box (rect) of a drawing, in the order they are painted."""
    words, lines, rects, shapes = [], [], [], []  # shapes: the filled rects and circles so far

    def walk(element, inherited: dict, opacity: float) -> None:
        tag = element.tag.replace(SVG, "")
        if tag in ("defs", "title", "desc"):
            return
        attrs = inherited | {k: v for k, v in element.attrib.items() if k != "opacity"}
        opacity *= float(element.get("opacity", 1))
        alpha = opacity * float(attrs.get("fill-opacity", 1))
        if tag in ("rect", "circle") and attrs.get("fill", "#000000") != "none":
            shapes.append(((tag, attrs), _rgb(attrs.get("fill", "#000000")), alpha))
        if tag == "rect":
            left, top = float(attrs.get("x", 0)), float(attrs.get("y", 0))
            rects.append((left, top, left + float(attrs["width"]), top + float(attrs["height"])))
        elif tag == "polyline":
            points = [tuple(map(float, p.split(","))) for p in attrs["points"].split()]
            lines.append(list(zip(points, points[1:], strict=False)))
        elif tag == "text" and (element.text or "").strip():
            size = float(attrs["font-size"])
            box = _word_box(attrs, element.text, size)
            middle = ((box[0] + box[2]) / 2, (box[1] + box[3]) / 2)
            ground = (255.0, 255.0, 255.0)  # the page under the drawing
            for shape, fill, shape_alpha in shapes:
                if _covers(shape, *middle):
                    ground = _over(fill, shape_alpha, ground)
            ink = (*_rgb(attrs.get("fill", "#000000")), alpha)
            anchor = (float(attrs["x"]), float(attrs["y"]))
            words.append(_Word(element.text, box, size, ink, ground, anchor))
        inherited = {k: v for k, v in attrs.items() if k not in ("x", "y", "width", "height")}
        for child in element:
            walk(child, inherited, opacity)

    walk(ET.fromstring(svg), {}, 1.0)
    return words, lines, rects


def _scale(svg: str) -> float:
    """Screen pixels per SVG unit: the width attribute over the viewBox's width."""
    root = ET.fromstring(svg)
    return float(root.get("width")) / float(root.get("viewBox").split()[2])


def _too_small(svg: str) -> list[str]:
    words, *_ = _painted(svg)
    scale = _scale(svg)
    return [f"{w.text!r} {w.size * scale:.1f} px" for w in words if w.size * scale < LEAST_TEXT_PX]


def _overlapping(svg: str, slack: float = 1.0) -> list[str]:
    """Pairs of words whose boxes overlap by more than `slack` screen pixels both ways."""
    words, *_ = _painted(svg)
    scale, found = _scale(svg), []
    for i, a in enumerate(words):
        for b in words[i + 1 :]:
            across = min(a.box[2], b.box[2]) - max(a.box[0], b.box[0])
            down = min(a.box[3], b.box[3]) - max(a.box[1], b.box[1])
            if across * scale > slack and down * scale > slack:
                found.append(f"{a.text!r} and {b.text!r}")
    return found


def _crosses(segment, box, slack: float) -> bool:
    """Whether a segment passes through a box shrunk by `slack` (Liang-Barsky clipping)."""
    (x0, y0), (x1, y1) = segment
    left, top, right, bottom = box[0] + slack, box[1] + slack, box[2] - slack, box[3] - slack
    low, high, dx, dy = 0.0, 1.0, x1 - x0, y1 - y0
    for p, q in ((-dx, x0 - left), (dx, right - x0), (-dy, y0 - top), (dy, bottom - y0)):
        if p == 0:
            if q < 0:
                return False
        elif p < 0:
            low = max(low, q / p)
        else:
            high = min(high, q / p)
    return low < high


def _runs_into(word: _Word, rect, slack: float) -> bool:
    """Whether a word placed outside a box (its anchor outside) reaches into it. A word inside
    a box is left to the browser's measures: 0.6 em is too rough to say that it fits."""
    (x, y), (left, top, right, bottom) = word.anchor, rect
    if left <= x <= right and top <= y <= bottom:
        return False
    across = min(word.box[2], right) - max(word.box[0], left)
    return across > slack and min(word.box[3], bottom) - max(word.box[1], top) > slack


def _crossed(svg: str, slack: float = 1.0) -> list[str]:
    """Words that a line or an arrow runs through, or that run into a box's edge."""
    words, lines, rects = _painted(svg)
    crossed = [
        f"{w.text!r}"
        for w in words
        if any(_crosses(segment, w.box, slack) for line in lines for segment in line)
    ]
    return crossed + [
        f"{w.text!r} into a box" for w in words if any(_runs_into(w, r, slack) for r in rects)
    ]


def _faint_against_ground(svg: str) -> list[str]:
    words, *_ = _painted(svg)
    return [
        f"{w.text!r} {_contrast(w.ink, w.behind):.2f}:1"
        for w in words
        if _contrast(w.ink, w.behind) < LEAST_CONTRAST
    ]


def _long_trace(steps: int, beam: int) -> tuple[list, list[str]]:
    """A traced search shaped like chapter 7's (a trained model, beam 4, real words, the longest of
    them 13 letters, sums down to about -17, candidates finishing over the last four steps),
    made up, so that no model is trained for it."""
    from annotated.ch06_decoding import BeamCandidate

    words = ["<pad>", "<s>", "</s>", "Six", "people", "individuals", "are", "riding", "bicycles"]
    words += ["mountain", "through", "a", "dirt", "trail", ".", "skateboarders", '"']
    hypotheses, trace = [()], []
    for s in range(steps):
        step, kept = [], []
        for rank in range(2 * beam):
            ends = (rank == 0 and s >= steps - 4) or (s == steps - 1 and rank < beam)
            token = 2 if ends else 3 + (5 * s + 3 * rank) % (len(words) - 3)
            goes_on = not ends and s < steps - 1 and len(kept) < beam
            tokens = (*hypotheses[rank % len(hypotheses)], token)
            score = round(-0.01 - 0.6 * s - 0.9 * rank, 2)
            parent = rank % len(hypotheses)
            step.append(BeamCandidate(tokens, parent, score, ends, len(kept) if goes_on else None))
            kept += [tokens] if goes_on else []
        trace.append(tuple(step))
        hypotheses = kept
    return trace, words


def _chapters_drawings() -> dict:
    """Every drawing the chapters make, made as they make it (the paper's Figure 1 from its
    Architecture, the same as architecture_of gives, without building 60M parameters), and the
    largest they could make: the longest copy of chapter 4, a search of chapter 7's limit."""
    from annotated.ch01_attention import padding_mask
    from annotated.ch02_model import ModelConfig
    from annotated.ch03_training import Batch, pad_sequences
    from annotated.ch06_decoding import beam_search
    from annotated.figures.ch02_model import Architecture

    paper = Architecture(
        6, 6, 512, 2048, 8, 64, 64, 37000, 37000, False, False, "sinusoids", "all three"
    )
    big = dataclasses.replace(
        paper, d_model=1024, d_ff=4096, h=16, src_vocab=90000, tgt_vocab=90000
    )
    grown = ["attention", "residual", "feed_forward", "stacks"]  # chapter 2 builds the map up
    steps = [(grown[:2], ["residual"]), (grown[:3], ["feed_forward"]), (grown, ["stacks"])]
    steps += [([*grown, "embeddings", "output"], ["embeddings", "output"]), (None, ["positions"])]
    drawings = {"ch02 Figure 1": architecture(paper)}
    for built, marked in steps:
        drawings[f"ch02 Figure 1, {marked[0]} marked"] = architecture(paper, built, marked)
    drawings["big Figure 1"] = architecture(big)
    pre_norm = ModelConfig(8000, 6000, N=2, d_model=256, d_ff=1024, h=4, norm_first=True)
    drawings["ch02 pre-norm"] = architecture(
        dataclasses.replace(pre_norm, tie_target_embeddings=True)
    )
    q, kv = torch.zeros(2, 5, 64), torch.zeros(2, 7, 64)
    drawings["ch01 attention_flow"] = attention_flow(
        q, kv, kv, torch.ones(2, 1, 7, dtype=torch.bool)
    )
    drawings["attention_flow, no mask"] = attention_flow(q, kv, kv)
    drawings["ch01 multi_head_flow"] = multi_head_flow(
        MultiHeadAttention(512, 8), len_q=10, len_k=7
    )
    drawings["multi_head_flow, d_k and d_v"] = multi_head_flow(
        MultiHeadAttention(1024, 16, 96, 80), 128
    )
    src = pad_sequences([[5, 6, 7, 2], [8, 9, 2]], 0)
    batch = Batch.build(src, pad_sequences([[1, 15, 16, 17, 2], [1, 18, 2]], 0), 0)
    drawings["ch03 teacher_forcing"] = teacher_forcing(batch, ["<s>", "a", "dog", "runs", "</s>"])
    copy = ["11", "10", "9", "6", "12", "</s>"]
    drawings["ch04 decoding_steps"] = decoding_steps(copy, cached=False)
    longest = decoding_steps([str(3 + i % 10) for i in range(12)] + ["</s>"], cached=False)
    drawings["decoding_steps, the longest copy"] = longest
    toy = ["w35", "w24", "w24", "w34", "w35", "w35"]
    drawings["ch06 decoding_steps"] = decoding_steps(toy, cached=True)
    with torch.random.fork_rng():
        torch.manual_seed(15)
        model = make_model(ModelConfig(50, 50, N=2, d_model=64, d_ff=128, h=4)).double()
        src = torch.randint(3, 50, (1, 12))
    trace, specials = [], SpecialTokens(pad=0, bos=1, eos=2)
    beam_search(model, src, padding_mask(src, 0), specials, 8, beam=3, alpha=2.5, trace=trace)
    toy_words = ["<pad>", "<s>", "</s>"] + [f"w{i}" for i in range(3, 50)]
    drawings["ch06 beam_tree"] = beam_tree(trace, toy_words, alphas=(0.0, 2.5))
    drawings["ch07 beam_tree"] = beam_tree(*_long_trace(14, 4), alphas=(0.6, 2.5))
    drawings["beam_tree at chapter 7's limit"] = beam_tree(*_long_trace(20, 4), alphas=(0.6, 2.5))
    drawings["beam_tree, beam 8"] = beam_tree(*_long_trace(6, 8), alphas=(0.6, 2.5))
    return drawings


@pytest.fixture(scope="module")
def chapters_drawings() -> dict:
    return _chapters_drawings()


def _problems(drawings: dict, check) -> dict[str, list[str]]:
    """What `check` finds in each drawing's SVG, by drawing (those it finds nothing in left out)."""
    found = {name: check(drawing.svg) for name, drawing in drawings.items()}
    return {name: problems[:8] for name, problems in found.items() if problems}


def test_every_drawing_fits_the_sites_column_at_full_size(chapters_drawings):
    widths = {
        name: float(ET.fromstring(d.svg).get("width")) for name, d in chapters_drawings.items()
    }
    assert {name: w for name, w in widths.items() if w > COLUMN_PX} == {}


def test_every_word_is_at_least_as_large_as_the_captions_on_screen(chapters_drawings):
    assert _problems(chapters_drawings, _too_small) == {}


def test_no_two_words_overlap(chapters_drawings):
    assert _problems(chapters_drawings, _overlapping) == {}


def test_no_line_runs_through_a_word(chapters_drawings):
    assert _problems(chapters_drawings, _crossed) == {}


def test_every_word_stands_out_from_what_is_painted_behind_it(chapters_drawings):
    assert _problems(chapters_drawings, _faint_against_ground) == {}


def test_the_legibility_checks_find_what_they_look_for():
    """Each check on a drawing made to fail it, and on its repaired twin."""
    bad = (
        '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 1000 100" width="950" height="95">'
        '<rect width="1000" height="100" fill="#ffffff"/>'
        '<rect x="0" y="0" width="200" height="50" fill="#3b6ea5"/>'
        '<text x="10" y="30" font-size="15">dark on blue</text>'
        '<text x="60" y="35" font-size="15">over it</text>'
        '<polyline points="500,0 500,100" fill="none" stroke="#333333"/>'
        '<text x="500" y="80" font-size="15" text-anchor="middle">crossed</text>'
        '<g opacity="0.25"><text x="700" y="80" font-size="15">faint</text></g></svg>'
    )
    assert _scale(bad) == 0.95
    assert len(_too_small(bad)) == 4  # 15 units shown at 0.95 px a unit: 14.25 px
    assert _overlapping(bad) == ["'dark on blue' and 'over it'"]
    assert _crossed(bad) == ["'crossed'"]
    assert _faint_against_ground(bad)[0].startswith("'dark on blue'")
    assert [p.split()[0] for p in _faint_against_ground(bad)] == ["'dark", "'over", "'faint'"]
    good = (
        '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 900 100" width="900" height="100">'
        '<rect width="900" height="100" fill="#ffffff"/>'
        '<text x="10" y="30" font-size="15">dark on white</text>'
        '<text x="10" y="60" font-size="15" fill="#555555">grey under it</text>'
        '<polyline points="500,0 500,100" fill="none" stroke="#333333"/>'
        '<text x="506" y="80" font-size="15">beside the line</text></svg>'
    )
    assert (_too_small(good), _overlapping(good), _crossed(good)) == ([], [], [])
    assert _faint_against_ground(good) == []
