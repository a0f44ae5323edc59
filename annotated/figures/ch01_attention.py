"""Chapter 1's charts: the walk through equation 1, the softmax's saturation, masks and heads; and
its drawings, attention as a flow of tensors (one head, then several; Figure 2).

The chapter defines attention; this module lays out the walk's numbers (`one_query_steps` takes
equation 1 one step at a time, with the chapter's `attention`) and draws them, so the chapter's page
shows the attention code and a one-line call where each chart appears. Chapter 7 draws the same walk with a
trained model's numbers (`vectors_chart`, `one_query_chart`, `all_queries_chart`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import altair as alt
import pandas as pd
from torch import Tensor

from annotated.ch01_attention import (
    WALK_CONTENT,
    WALK_FEATURES,
    MultiHeadAttention,
    attention,
)
from annotated.figures import rounded
from annotated.figures.svg import (
    TEXT,
    Canvas,
    Drawing,
    text_width,
)


def _cells(matrix: Tensor, rows: list[str], columns: list[str], **extra) -> pd.DataFrame:
    """A matrix as a long table, one row per cell, its values rounded to 2 decimals."""
    return pd.DataFrame(
        [
            {"row": f"{i + 1} {r}", "column": c, "value": round(float(matrix[i, j]), 2), **extra}
            for i, r in enumerate(rows)
            for j, c in enumerate(columns)
        ]
    )


def number_heatmap(
    frame: pd.DataFrame, title: str, x_title: str, y_title: str, width: int = 150
) -> alt.LayerChart:
    """A heatmap of a long table (row, column, value) with each cell's number written in it.

    Its colour scale spans its own values: put several side by side with
    `.resolve_scale(color="independent")`, or Vega-Lite unions their scales and the numbers'
    black-or-white choice, made from this panel's values, no longer matches the shading.
    """
    rows, columns = list(dict.fromkeys(frame["row"])), list(dict.fromkeys(frame["column"]))
    base = alt.Chart(frame).encode(
        x=alt.X("column:N", sort=columns, title=x_title, axis=alt.Axis(labelAngle=-40)),
        y=alt.Y("row:N", sort=rows, title=y_title),
        tooltip=["row", "column", "value"],  # on the cell and on its number, which covers it
    )
    # Light to dark blue from the smallest value (0 if none is negative) to the largest.
    low, high = min(float(frame["value"].min()), 0.0), float(frame["value"].max())
    high = max(high, low + 1e-9)
    cells = base.mark_rect(stroke="white").encode(
        color=alt.Color(
            "value:Q", scale=alt.Scale(scheme="blues", domain=[low, high]), legend=None
        ),
    )
    # Black on the light cells, white on the dark ones. The "blues" scheme is 74% of the way to its
    # darkest where black and white read equally well on it (4.6:1 each, WCAG's AA asks 4.5).
    numbers = base.mark_text(fontSize=11).encode(
        text=alt.Text("value:Q", format=".2f"),
        color=alt.condition(
            f"datum.value > {low + 0.74 * (high - low):.3g}", alt.value("white"), alt.value("black")
        ),
    )
    return (cells + numbers).properties(width=width, height=22 * len(rows), title=title)


def vectors_chart(
    words: list[str],
    query: Tensor,
    key: Tensor,
    value: Tensor,
    features: Sequence[str] = WALK_FEATURES,
    contents: Sequence[str] = WALK_CONTENT,
    title: str = "The walk's sentence: a query, a key and a value for each word",
) -> alt.HConcatChart:
    """Each word's query, key and value, side by side, with their numbers.

    `features` names the query and key numbers shown, `contents` the value numbers (a vector
    longer than its names is shown in part: its first numbers).
    """
    q, k, v = query[:, : len(features)], key[:, : len(features)], value[:, : len(contents)]
    features, contents = list(features), list(contents)
    wide = max(150, 40 * len(features))  # room for each number
    return (
        alt.hconcat(
            number_heatmap(
                _cells(q, words, features), "queries Q: what a word looks for", "", "word", wide
            ),
            number_heatmap(_cells(k, words, features), "keys K: what a word offers", "", "", wide),
            number_heatmap(
                _cells(v, words, contents), "values V: what it hands over", "", "", wide
            ),
        )
        .resolve_scale(color="independent")
        .properties(title=title)
    )


def one_query_steps(
    words: list[str],
    query: Tensor,
    key: Tensor,
    value: Tensor,
    i: int,
    contents: Sequence[str] = WALK_CONTENT,
) -> pd.DataFrame:
    """Equation 1 for query `i` alone, one column per step: score, scaled score, weight, and the
    weighted values (those that `contents` names) that add up to the output."""
    d_k = query.size(-1)
    scores = key @ query[i]
    scaled = scores / math.sqrt(d_k)
    weights = scaled.softmax(-1)
    table = pd.DataFrame(
        {
            "key word": [f"{j + 1} {w}" for j, w in enumerate(words)],
            "q·k": scores.numpy(),
            f"÷ √{d_k}": scaled.numpy(),
            "softmax weight": weights.numpy(),
        }
    )
    for c, name in enumerate(list(contents)[: value.size(-1)]):
        table[f"weight × v[{name}]"] = (weights * value[:, c]).numpy()
    return table.round(2)


def one_query_chart(steps: pd.DataFrame, word: str) -> alt.HConcatChart:
    """The steps of `one_query_steps` as bars with their numbers: score, scaled, softmax."""
    panels = []
    for column, colour in (
        ("q·k", "#9e9e9e"),
        (steps.columns[2], "#6baed6"),
        ("softmax weight", "#08519c"),
    ):
        base = alt.Chart(steps).encode(
            y=alt.Y("key word:N", sort=list(steps["key word"]), title=None),
            x=alt.X(f"{column}:Q", title=column),
        )
        bars = base.mark_bar(color=colour)
        labels = base.mark_text(align="left", dx=3, fontSize=11).encode(
            text=alt.Text(f"{column}:Q", format=".2f")
        )
        panels.append((bars + labels).properties(width=130, height=22 * len(steps)))
    return alt.hconcat(*panels).properties(
        title=f"The query of '{word}' against every key: dot product, scaled, softmax"
    )


def all_queries_chart(
    words: list[str],
    query: Tensor,
    key: Tensor,
    value: Tensor,
    contents: Sequence[str] = WALK_CONTENT,
) -> alt.HConcatChart:
    """Equation 1 for all queries at once: scaled scores Q Kᵀ/√d_k, weights, output (the part
    of it that `contents` names)."""
    output, weights = attention(query, key, value)
    scaled = query @ key.T / math.sqrt(query.size(-1))
    labels = [f"{j + 1} {w}" for j, w in enumerate(words)]
    size = 28 * len(words) + 2
    shown = output[:, : len(contents)]
    return (
        alt.hconcat(
            number_heatmap(_cells(scaled, words, labels), "Q Kᵀ / √d_k", "key", "query", size),
            number_heatmap(_cells(weights, words, labels), "softmax, row by row", "key", "", size),
            number_heatmap(
                _cells(shown, words, list(contents)), "weights · V = output", "", "", 120
            ),
        )
        .resolve_scale(color="independent")
        .properties(title=f"All {len(words)} queries at once: three matrix operations")
    )


def saturation_chart(frame: pd.DataFrame) -> alt.VConcatChart:
    """Two panels against d_k: how peaked the softmax is, and how much gradient passes through it."""
    base = alt.Chart(rounded(frame)).encode(
        x=alt.X("d_k:Q", scale=alt.Scale(type="log", base=2), title="d_k (log scale)"),
        color=alt.Color("scores:N", title="scores"),
        tooltip=["d_k", "scores", "largest weight", "gradient norm"],
    )
    peak = base.mark_line(point=True).encode(
        y=alt.Y(
            "largest weight:Q",
            title="largest softmax weight (mean)",
            scale=alt.Scale(domain=[0, 1]),
        )
    )
    grad = base.mark_line(point=True).encode(
        y=alt.Y("gradient norm:Q", title="gradient norm at the scores (mean)")
    )
    return alt.vconcat(
        peak.properties(
            width=420, height=180, title="Without scaling the softmax saturates as d_k grows"
        ),
        grad.properties(width=420, height=180, title="...and the gradient through it vanishes"),
    ).properties(title="Softmax of 16 random scores, with and without the 1/sqrt(d_k) scaling")


def mask_frame(mask: Tensor, labels: list[str] | None = None) -> pd.DataFrame:
    """A (len_q, len_k) mask as a long table: one row per (query, key) cell."""
    mask = mask.squeeze(0) if mask.dim() == 3 else mask
    len_q, len_k = mask.shape
    labels = labels or [str(i) for i in range(max(len_q, len_k))]
    return pd.DataFrame(
        [
            {"query": f"{i}: {labels[i]}", "key": f"{j}: {labels[j]}", "allowed": bool(mask[i, j])}
            for i in range(len_q)
            for j in range(len_k)
        ]
    )


def mask_chart(mask: Tensor, title: str, labels: list[str] | None = None) -> alt.Chart:
    """Heatmap of a mask: rows are queries, columns are keys, dark cells are allowed."""
    frame = mask_frame(mask, labels)
    order = list(dict.fromkeys(frame["query"]))
    keys = list(dict.fromkeys(frame["key"]))
    return (
        alt.Chart(frame)
        .mark_rect(stroke="white")
        .encode(
            x=alt.X("key:N", sort=keys, title="key position (attended to)"),
            y=alt.Y("query:N", sort=order, title="query position (attending)"),
            color=alt.Color(
                "allowed:N", scale=alt.Scale(domain=[True, False], range=["#1f4e79", "#eeeeee"])
            ),
            tooltip=["query", "key", "allowed"],
        )
        .properties(width=220, height=220, title=title)
    )


def decoder_masks_chart(future: Tensor, pads: Tensor, words: list[str]) -> alt.HConcatChart:
    """The subsequent mask, the padding mask and the decoder's mask (both), side by side."""
    return alt.hconcat(
        mask_chart(future, "subsequent mask", words),
        mask_chart(pads.expand(-1, len(words), -1), "padding mask", words),
        mask_chart(future & pads, "decoder mask = both", words),
    ).properties(title="Masks for a target of four tokens and two pads (dark = may attend)")


def heads_chart(words: list[str], heads: list[tuple[str, Tensor]]) -> alt.HConcatChart:
    """The attention weights of several heads on one sentence, side by side, with their numbers."""
    labels = [f"{j + 1} {w}" for j, w in enumerate(words)]
    panels = [
        number_heatmap(_cells(weights, words, labels), name, "key", "query" if i == 0 else "", 170)
        for i, (name, weights) in enumerate(heads)
    ]
    return (
        alt.hconcat(*panels)
        .resolve_scale(color="independent")
        .properties(title="Two heads, two patterns: each head has its own queries and keys")
    )


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
    width = max(190, max(text_width(lines[1]) for lines in inputs) + 20)
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
    count = x + cards / 2 + 12 + 14 + text_width("× h = 00", TEXT, 0.66)
    return int(max(v_x + width / 2 + 20, v_x + 6 + text_width(label) + 10, count + 10))


def _heads(canvas: Canvas, x: float, y: float, width: float, lines: Sequence[str], h: int) -> None:
    """The h heads: cards stacked behind each other, the front one centred on (x, y)."""
    for offset in (12, 6):
        canvas.box(x + offset, y - offset, width, 56, [""], "attention")
    canvas.box(x, y, width, 56, lines, "attention")
    canvas.text(x + width / 2 + 26, y - 6, f"× h = {h}", TEXT, "start", bold=True)


def multi_head_flow(
    module: MultiHeadAttention, len_q: int = 10, len_k: int | None = None
) -> Drawing:
    """Multi-head attention (section 3.2.2) drawn from a module's own sizes and weights: `len_q`
    queries, keys and values of `len_k` positions (as many as the queries unless given)."""
    len_k = len_q if len_k is None else len_k
    h, d_model, d_k, d_v = module.h, module.d_model, module.d_k, module.d_v
    q_out, q_in = module.w_q.weight.shape
    o_out, o_in = module.w_o.weight.shape
    widths = {"Q": (d_k, len_q), "K": (d_k, len_k), "V": (d_v, len_k)}
    inputs = {
        name: (
            [f"{name} input", f"(B, {length}, {d_model})"],
            [f"Linear W^{name}", f"{q_in} → {h} × {w}"],
        )
        for name, (w, length) in widths.items()
    }
    labels = {name: f"(B, {h}, {length}, {w})" for name, (w, length) in widths.items()}
    # The three inputs side by side, each shape on the right of its arrow, clear of the next one.
    width = max(
        170, *(text_width(line) + 20 for pair in inputs.values() for b in pair for line in b)
    )
    spacing = max(width + 30, *(text_width(label) + 16 for label in labels.values()))
    heads = ["Scaled dot-product attention", f"{h} heads at once, each on its d_k = {d_k}"]
    cards = max(300, text_width(heads[1]) + 24)
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
    canvas.arrow([(x, bottom - 248), (x, bottom - 290)], label=f"(B, {h}, {len_q}, {d_v})")
    lines = ["Concat the heads", f"(B, {len_q}, {h} × {d_v} = {o_in})"]
    canvas.box(x, bottom - 313, cards, 46, lines, "operation")
    canvas.arrow([(x, bottom - 336), (x, bottom - 366)])
    canvas.box(x, bottom - 389, cards, 46, ["Linear W^O", f"{o_in} → {o_out}"], "operation")
    canvas.arrow([(x, bottom - 412), (x, bottom - 446)], label=f"(B, {len_q}, {o_out}): output")
    canvas.top = bottom - 458  # nothing above the output's arrow
    title = f"Multi-head attention with h = {h} heads of d_k = {d_k}"
    description = (
        f"Queries of shape (B, {len_q}, {d_model}), keys and values of shape (B, {len_k}, "
        f"{d_model}) each pass through their own "
        f"linear map ({q_in} to {q_out} = {h} heads × {d_k}), are split into {h} heads, attend "
        f"in parallel by scaled dot-product attention, are concatenated back to width {o_in}, "
        f"and mixed by the output map W^O into (B, {len_q}, {o_out})."
    )
    return Drawing(canvas.svg(title, description), title, description)
