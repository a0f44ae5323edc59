"""Chapter 7's charts: a run's training curves (chapter 8 draws its run with them too), and the
attention maps of the trained model."""

from __future__ import annotations

import altair as alt
import pandas as pd
import torch

from annotated.ch01_attention import kept_weights, subsequent_mask
from annotated.ch03_training import inference
from annotated.ch04_copy_task import until_eos
from annotated.ch06_decoding import Translator, greedy_decode_cached
from annotated.figures import rounded
from annotated.training.profiling import PARTS


def training_chart(
    history: pd.DataFrame, evals: pd.DataFrame, title: str = "The Multi30k run"
) -> alt.VConcatChart:
    """Training loss and validation BLEU against training minutes."""
    minutes = history.seconds.cumsum() / 60
    loss = pd.DataFrame(
        {
            "train minutes": minutes,
            "loss": history.loss.rolling(50, min_periods=1).mean(),
            "step": history.step,
        }
    ).iloc[:: max(1, len(history) // 400)]  # about 400 points are plenty for the eye
    loss_chart = (
        alt.Chart(rounded(loss))
        .mark_line()
        .encode(
            x=alt.X("train minutes:Q", title="training time (minutes)"),
            y=alt.Y("loss:Q", title="training loss (KL, per token)", scale=alt.Scale(type="log")),
            tooltip=["step", "train minutes", "loss"],
        )
        .properties(width=460, height=180, title="Training loss")
    )
    bleu_chart = (
        alt.Chart(rounded(evals.astype(float), 4))
        .mark_line(point=True)
        .encode(
            x=alt.X("train minutes:Q", title="training time (minutes)"),
            y=alt.Y("val BLEU:Q", title="validation BLEU (greedy)"),
            tooltip=["step", "epoch", "train minutes", "val BLEU"],
        )
        .properties(width=460, height=180, title="Validation BLEU, measured at each evaluation")
    )
    return alt.vconcat(loss_chart, bleu_chart).properties(title=title)


def attention_maps(translator: Translator, sentence: str) -> pd.DataFrame:
    """Every attention weight of every layer and head for one sentence and its greedy translation."""
    model = translator.model
    device = next(model.parameters()).device  # a GPU's, when the model trained there
    src_ids = translator.source_ids([sentence])[0]
    specials = translator.tgt_vocab.specials
    src = torch.tensor([src_ids], device=device)
    src_mask = torch.ones(1, 1, len(src_ids), dtype=torch.bool, device=device)
    out = until_eos(
        greedy_decode_cached(model, src, src_mask, specials, len(src_ids) + 50), specials
    )[0]
    tgt = torch.tensor([[specials.bos, *out]], device=device)
    src_labels = [f"{i} {t}" for i, t in enumerate(translator.src_vocab.labels(src_ids))]
    reads = translator.tgt_vocab.labels(tgt[0].tolist())
    predicts = translator.tgt_vocab.labels([*out, specials.eos])
    tgt_labels = [f"{i} {r} → {p}" for i, (r, p) in enumerate(zip(reads, predicts, strict=True))]
    modules = {
        "encoder self-attention": [
            (layer.self_attn, src_labels, src_labels) for layer in model.encoder.layers
        ],
        "decoder self-attention": [
            (layer.self_attn, tgt_labels, tgt_labels) for layer in model.decoder.layers
        ],
        "decoder-source attention": [
            (layer.src_attn, tgt_labels, src_labels) for layer in model.decoder.layers
        ],
    }
    every = [module for entries in modules.values() for module, _, _ in entries]
    rows = []
    with kept_weights(every), inference(model):
        model(src, tgt, src_mask, subsequent_mask(tgt.size(1)).to(device))
        for kind, entries in modules.items():
            for layer, (module, queries, keys) in enumerate(entries, start=1):
                weights = module.weights[0]  # (h, len_q, len_k)
                rows += [
                    {
                        "kind": kind,
                        "layer": layer,
                        "head": head + 1,
                        "query": query,
                        "key": key,
                        "weight": weights[head, q, k].item(),
                    }
                    for head in range(weights.size(0))
                    for q, query in enumerate(queries)
                    for k, key in enumerate(keys)
                ]
    return pd.DataFrame(rows)


def attention_map_chart(frame: pd.DataFrame) -> alt.HConcatChart:
    """Heatmaps of the three kinds of attention, with a layer and a head menu."""
    layer = alt.param(
        name="layer",
        value=1,
        bind=alt.binding_select(options=sorted(frame.layer.unique()), name="layer "),
    )
    head = alt.param(
        name="head",
        value=1,
        bind=alt.binding_select(options=sorted(frame["head"].unique()), name="head "),
    )
    charts = []
    for kind in frame.kind.unique():
        part = frame[frame.kind == kind].drop(columns="kind")  # each chart carries only its rows
        charts.append(
            alt.Chart(rounded(part))
            .mark_rect()
            .encode(
                x=alt.X(
                    "key:N", sort=None, title="key (attended to)", axis=alt.Axis(labelAngle=-60)
                ),
                y=alt.Y("query:N", sort=None, title="query (attending)"),
                color=alt.Color(
                    "weight:Q", scale=alt.Scale(domain=[0, 1], scheme="blues"), title="weight"
                ),
                tooltip=["layer", "head", "query", "key", "weight"],
            )
            .transform_filter((alt.datum.layer == layer) & (alt.datum.head == head))
            .properties(width=240, height=240, title=kind)
        )
    return (
        alt.hconcat(*charts)
        .add_params(layer, head)
        .properties(title="Attention weights for one test sentence (pick a layer and a head)")
    )


def step_profile_chart(profiles: pd.DataFrame) -> alt.Chart:
    """Milliseconds per training step, by part, before and after the fast path (one bar each)."""
    parts = list(PARTS)
    frame = profiles.assign(
        order=profiles.part.map(parts.index),
        share=100
        * profiles["ms per step"]
        / profiles.groupby("step")["ms per step"].transform("sum"),
    )
    return (
        alt.Chart(rounded(frame))
        .mark_bar()
        .encode(
            x=alt.X("sum(ms per step):Q", title="milliseconds per training step (CPU time)"),
            y=alt.Y("step:N", sort=list(frame.step.unique()), title=None),
            color=alt.Color(
                "part:N",
                sort=parts,
                scale=alt.Scale(scheme="tableau10"),
                legend=alt.Legend(orient="bottom", columns=2, title=None),
            ),
            order=alt.Order("order:Q"),
            tooltip=["step", "part", "ms per step", alt.Tooltip("share:Q", format=".0f")],
        )
        .properties(width=560, height=90, title="Where a training step's time goes")
    )
