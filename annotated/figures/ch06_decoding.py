"""Chapter 6's chart: the length penalty lp(Y) against the candidate's length, for a few alphas;
and the beam search drawn as a tree (chapter 7 draws its own search with it)."""

from __future__ import annotations

from collections.abc import Sequence

import altair as alt
import pandas as pd
import torch

from annotated.ch06_decoding import BeamCandidate, beam_winner, length_penalty
from annotated.figures import rounded
from annotated.figures.svg import (
    MAX_WIDTH,
    SMALL,
    Canvas,
    Drawing,
    ink_width,
    text_width,
)


def penalty_chart() -> alt.Chart:
    """lp(Y) = ((5 + |Y|) / 6) ** alpha for lengths 1 to 40, for alpha = 0, 0.6, 1 and 2.5."""
    lengths = torch.arange(1, 41, dtype=torch.float64)
    penalties = pd.DataFrame(
        [
            {"length |Y|": int(n), "α": str(alpha), "lp(Y)": float(value)}
            for alpha in (0.0, 0.6, 1.0, 2.5)
            for n, value in zip(lengths, length_penalty(lengths, alpha), strict=True)
        ]
    )
    return (
        alt.Chart(rounded(penalties))
        .mark_line()
        .encode(
            x=alt.X("length |Y|:Q", title="candidate length |Y| (tokens)"),
            y=alt.Y("lp(Y):Q", title="length penalty lp(Y)", scale=alt.Scale(type="log")),
            color=alt.Color("α:N", title="α"),
        )
        .properties(
            width=420, height=220, title="The length penalty for α = 0, 0.6 (the paper), 1 and 2.5"
        )
    )


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
    while len(cut) > 1 and (ink_width(cut) > width - 8 or text_width(cut) > spacing - 2):
        cut = cut[:-2] + "…"
    return cut


def _wrap(words: str, width: float) -> list[str]:
    """Lines of SMALL text no wider than `width`, broken between words."""
    chars, lines, line = max(int(width // text_width("x")), 10), [], ""
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
