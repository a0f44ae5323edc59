"""Chapter 1's charts: the walk through equation 1, the softmax's saturation, masks and heads.

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

from annotated.ch01_attention import WALK_CONTENT, WALK_FEATURES, attention
from annotated.figures import rounded


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
