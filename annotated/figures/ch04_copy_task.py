"""Chapter 4's charts: the copy model learning, and where its decoder looks in the source."""

from __future__ import annotations

import altair as alt
import pandas as pd

from annotated.ch01_attention import kept_weights
from annotated.ch02_model import EncoderDecoder
from annotated.ch03_training import inference
from annotated.ch04_copy_task import CopyTask
from annotated.figures import rounded


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
