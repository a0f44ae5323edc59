"""Chapter 6's chart: the length penalty lp(Y) against the candidate's length, for a few alphas."""

from __future__ import annotations

import altair as alt
import pandas as pd
import torch

from annotated.ch06_decoding import length_penalty
from annotated.figures import rounded


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
