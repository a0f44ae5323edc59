"""Chapter 2's charts: the sinusoidal positional encoding, how two positions' encodings compare,
and the gradient that post-norm and pre-norm stacks send to each layer.

The chapter computes what the paper claims (`sinusoidal_table`, `position_similarity`); this
module draws it. The post-norm/pre-norm comparison is the book's own experiment, not a claim of
the paper, so its measurement (`gradient_norms_by_layer`) lives here beside its chart.
"""

from __future__ import annotations

import altair as alt
import pandas as pd
import torch

from annotated.ch01_attention import padding_mask
from annotated.ch02_model import ModelConfig, make_model, sinusoidal_table
from annotated.figures import rounded


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
