"""Chapter 4's charts: the copy model learning, and where its decoder looks in the source; and
the decoding steps drawn one by one (chapter 6 draws its cached decoder with them too)."""

from __future__ import annotations

from collections.abc import Sequence

import altair as alt
import pandas as pd
import torch

from annotated.ch01_attention import kept_weights, subsequent_mask
from annotated.ch02_model import EncoderDecoder
from annotated.ch03_training import inference
from annotated.ch04_copy_task import CopyTask
from annotated.figures import rounded
from annotated.figures.svg import (
    MAX_WIDTH,
    SMALL,
    TEXT,
    Canvas,
    Drawing,
    cell_size,
    ink_width,
    text_width,
)


def copy_training_chart(history: pd.DataFrame, checks: pd.DataFrame) -> alt.VConcatChart:
    """Loss per token and held-out exact match against optimizer steps."""
    loss = (
        alt.Chart(rounded(history[["step", "loss"]]))
        .mark_line()
        .encode(
            x=alt.X("step:Q", title="optimizer step"),
            y=alt.Y("loss:Q", title="loss per token (KL, label-smoothed)"),
            tooltip=["step", "loss"],
        )
        .properties(width=420, height=180, title="Training loss")
    )
    match = (
        alt.Chart(rounded(checks))
        .mark_line(point=True)
        .encode(
            x=alt.X("step:Q", title="optimizer step"),
            y=alt.Y(
                "exact match:Q",
                title="held-out exact match",
                axis=alt.Axis(format="%"),
                scale=alt.Scale(domain=[0, 1]),
            ),
            tooltip=["step", "exact match"],
        )
        .properties(
            width=420, height=140, title="Held-out sequences copied exactly (greedy decoding)"
        )
    )
    return alt.vconcat(loss, match).properties(title="Learning to copy")


def source_attention(model: EncoderDecoder, task: CopyTask, sequence: list[int]) -> pd.DataFrame:
    """Encoder-decoder attention of the last decoder layer (mean over heads) while copying `sequence`."""
    batch = task.to_batch([sequence])
    with kept_weights([model.decoder.layers[-1].src_attn]) as (attention,), inference(model):
        model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
        weights = attention.weights[0].mean(dim=0)  # (tgt_len, src_len)
    src_labels = [f"{i}: {t}" for i, t in enumerate(sequence + ["</s>"])]
    tgt_labels = [f"{i}: {t}" for i, t in enumerate(["<s>"] + sequence)]
    return pd.DataFrame(
        [
            {
                "output position": tgt_labels[i],
                "source position": src_labels[j],
                "weight": weights[i, j].item(),
            }
            for i in range(len(tgt_labels))
            for j in range(len(src_labels))
        ]
    )


def attention_chart(frame: pd.DataFrame) -> alt.Chart:
    rows = list(dict.fromkeys(frame["output position"]))
    cols = list(dict.fromkeys(frame["source position"]))
    return (
        alt.Chart(rounded(frame))
        .mark_rect()
        .encode(
            x=alt.X("source position:N", sort=cols, title="source position: symbol (attended to)"),
            y=alt.Y("output position:N", sort=rows, title="decoder input position: symbol"),
            color=alt.Color(
                "weight:Q", scale=alt.Scale(scheme="greys", domain=[0, 1]), title="weight"
            ),
            tooltip=["output position", "source position", "weight"],
        )
        .properties(
            width=300, height=300, title="Encoder-decoder attention, last layer, mean of heads"
        )
    )


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
    widest = max(max(text_width(w, TEXT), ink_width(w, TEXT)) for w in [bos, *output]) + 8
    cell = max(widest, min(cell_size([bos, *output]), room))
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
