"""The preface's chart: the operations of a self-attention and a recurrent layer against length."""

from __future__ import annotations

import altair as alt
import pandas as pd

from annotated.figures import rounded


def operations_chart(frame: pd.DataFrame, d: int) -> alt.VConcatChart:
    """Two panels: arithmetic and sequential steps against sequence length, for both layer types."""
    base = alt.Chart(rounded(frame)).encode(
        x=alt.X("n:Q", scale=alt.Scale(type="log", base=2), title="sequence length n (log scale)"),
        color=alt.Color("layer:N", title="layer"),
        tooltip=["n", "layer", "FLOPs", "matrix products in sequence"],
    )
    flops = base.mark_line(point=True).encode(
        y=alt.Y("FLOPs:Q", scale=alt.Scale(type="log"), title="floating-point operations (log)")
    )
    crossover = (
        alt.Chart(pd.DataFrame({"n": [d]}))
        .mark_rule(strokeDash=[4, 4], color="gray")
        .encode(x="n:Q")
    )
    steps = base.mark_line(point=True).encode(
        y=alt.Y(
            "matrix products in sequence:Q",
            scale=alt.Scale(type="log"),
            title="sequential matrix products (log)",
        )
    )
    return alt.vconcat(
        (flops + crossover).properties(
            width=420, height=200, title=f"Arithmetic per layer (d = {d}; dashed: n = d)"
        ),
        steps.properties(width=420, height=200, title="Steps that must run one after another"),
    ).properties(title="A recurrent layer against self-attention, counted by PyTorch")
