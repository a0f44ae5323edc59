"""The book's drawings: drawn from the model they show, byte-stable, with a text alternative."""

import dataclasses
import xml.etree.ElementTree as ET

import pytest
import torch

from annotated.ch01_attention import MultiHeadAttention
from annotated.ch02_model import ModelConfig, make_model
from annotated.ch03_training import SpecialTokens
from annotated.drawings import (
    HIGHLIGHT,
    PARTS,
    architecture,
    attention_flow,
    beam_tree,
    decoding_steps,
    multi_head_flow,
    teacher_forcing,
)
from annotated.figures import HTML_ENV

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
    faint = {part for part, items in groups.items() if all(g.get("opacity") for g in items)}
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
    assert "Mask" in _texts(masked) and "minus infinity" in masked.description


def test_multi_head_flow_reads_the_modules_sizes():
    texts = _texts(multi_head_flow(MultiHeadAttention(d_model=64, h=4), length=3))
    assert "64 → 4 × 16" in texts and "× h = 4" in texts and "(B, 3, 4 × 16 = 64)" in texts
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
    faint = [g for g in root.iter(f"{SVG}g") if g.get("opacity")]
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
    faint = [[t.text for t in g.iter(f"{SVG}text")] for g in boxes if g.get("opacity")]
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
