"""Chapter 3's charts: the learning-rate schedule, the smoothed targets, and what smoothing does to
the loss of an over-confident model; and teacher forcing drawn from a batch.
"""

from __future__ import annotations

from collections.abc import Sequence

import altair as alt
import pandas as pd
import torch
from torch import Tensor

from annotated.ch03_training import label_smoothing_loss, rate, smoothed_targets
from annotated.figures import rounded
from annotated.figures.svg import (
    SMALL,
    Canvas,
    Drawing,
    cell_size,
    text_width,
)


def schedule_chart(pairs: Sequence[tuple[int, int]], steps: int = 20_000) -> alt.Chart:
    """Equation 3 over training, for several (d_model, warmup) pairs."""
    frame = pd.DataFrame(
        [
            {
                "step": step,
                "lrate": rate(step, d_model, warmup),
                "setting": f"d_model={d_model}, warmup={warmup}",
            }
            for d_model, warmup in pairs
            for step in range(1, steps + 1, 100)
        ]
    )
    return (
        alt.Chart(rounded(frame))
        .mark_line()
        .encode(
            x=alt.X(
                "step:Q",
                title="optimizer step",
                axis=alt.Axis(values=list(range(0, steps + 1, 4000))),
            ),
            y=alt.Y("lrate:Q", title="learning rate", axis=alt.Axis(format=".1e")),
            color=alt.Color("setting:N", title="setting"),
            tooltip=["setting", "step", alt.Tooltip("lrate:Q", format=".2e")],
        )
        .properties(
            width=460, height=240, title="Equation 3: linear warmup, then decay as 1/sqrt(step)"
        )
    )


def smoothing_chart(target: Tensor, vocab: int, pad: int, eps_ls: float) -> alt.Chart:
    """Heatmap of the smoothed target distribution: one row per position, one column per token."""
    q = smoothed_targets(target, vocab, pad, eps_ls)
    frame = pd.DataFrame(
        [
            {"position": f"{i}: target {int(t)}", "token": c, "probability": q[i, c].item()}
            for i, t in enumerate(target)
            for c in range(vocab)
        ]
    )
    return (
        alt.Chart(rounded(frame))
        .mark_rect(stroke="white")
        .encode(
            x=alt.X("token:O", title="token id (0 = pad)"),
            y=alt.Y("position:N", title="position and its target"),
            color=alt.Color("probability:Q", scale=alt.Scale(scheme="blues"), title="q"),
            tooltip=["position", "token", "probability"],
        )
        .properties(width=360, height=150, title=f"Smoothed targets, eps_ls = {eps_ls}")
    )


def confidence_curve(
    eps_values: Sequence[float] = (0.0, 0.1, 0.2), vocab: int = 10, pad: int = 0
) -> pd.DataFrame:
    """Loss against the probability the model gives the right token (the rest spread evenly)."""
    rows = []
    for eps_ls in eps_values:
        for p in [i / 200 for i in range(4, 200)] + [0.999, 0.9999]:
            # float64: near its minimum the loss is a difference of nearly equal sums, and in
            # float32 its last digits would depend on the machine's kernels.
            probs = torch.full((1, vocab), (1 - p) / (vocab - 2), dtype=torch.float64)
            probs[0, pad], probs[0, 1] = 0.0, p
            logits = probs.log()  # -inf at pad: probability exactly 0 there
            loss = label_smoothing_loss(logits, torch.tensor([1]), pad, eps_ls).item()
            loss = max(loss, 0.0)  # a KL divergence is never negative; -1e-16 would be rounding
            rows.append({"p(right token)": p, "loss": loss, "eps_ls": f"eps_ls = {eps_ls}"})
    return pd.DataFrame(rows)


def confidence_chart(frame: pd.DataFrame) -> alt.Chart:
    return (
        alt.Chart(rounded(frame))
        .mark_line()
        .encode(
            x=alt.X("p(right token):Q", title="probability the model gives the right token"),
            y=alt.Y(
                "loss:Q", title="loss (KL divergence)", scale=alt.Scale(domain=[0, 2.5], clamp=True)
            ),
            color=alt.Color("eps_ls:N", title="smoothing"),
            tooltip=["eps_ls", "p(right token)", "loss"],
        )
        .properties(width=420, height=220, title="Label smoothing penalizes over-confidence")
    )


# ---------------------------------------------------------------- teacher forcing (chapter 3)


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
    cell, left, top = cell_size(words), 220, 30
    ends = max(text_width(f"→ {word}") for word in words)
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
