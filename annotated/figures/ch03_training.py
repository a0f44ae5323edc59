"""Chapter 3's charts: the learning-rate schedule, the smoothed targets, and what smoothing does to
the loss of an over-confident model.
"""

from __future__ import annotations

from collections.abc import Sequence

import altair as alt
import pandas as pd
import torch
from torch import Tensor

from annotated.ch03_training import label_smoothing_loss, rate, smoothed_targets
from annotated.figures import rounded


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
