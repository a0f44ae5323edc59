"""Chapter 9's charts: each variant's change against the base and the paper's, the curves of
validation BLEU during training, and what each line bought at what price per step.
"""

from __future__ import annotations

import altair as alt
import pandas as pd

from annotated.ch09_table3 import (
    BAND_SIGMAS,
    BASE,
    BLEU,
    comparison,
    lines_frame,
    noise_band,
    ppl_percent,
)
from annotated.figures import rounded

OURS, PAPERS = "this book (Multi30k, one seed)", "the paper (WMT, newstest2013)"


def change_points(lines: list[dict]) -> pd.DataFrame:
    """The points of the change chart: each variant's change (ours and the paper's) and each base seed's."""
    band = noise_band(lines)
    changes = comparison(lines)
    points = []
    for _, row in changes.iterrows():
        label = f"{row['row']}: {row['variant']}"
        for metric in ("BLEU", "PPL %"):
            points.append(
                {"line": label, "metric": metric, "who": OURS, "change": row[f"Δ {metric}"]}
            )
            points.append(
                {"line": label, "metric": metric, "who": PAPERS, "change": row[f"paper Δ {metric}"]}
            )
    for line in lines:
        if line["row"] == "base":
            label = f"base: seed {line['seed']}"
            bleu = line[BLEU] - band.loc[BLEU, "mean"]
            ppl = ppl_percent(line["val PPL"], band.loc["val PPL", "mean"])
            for metric, value in (("BLEU", bleu), ("PPL %", ppl)):
                points.append(
                    {"line": label, "metric": metric, "who": "base seeds", "change": value}
                )
    return rounded(pd.DataFrame(points))


def change_chart(lines: list[dict]) -> alt.HConcatChart:
    """Each variant's change against the base, ours and the paper's, over the base's noise band."""
    band = noise_band(lines)
    points = change_points(lines)
    order = list(dict.fromkeys(points["line"]))
    widths = {
        "BLEU": band.loc[BLEU, "band"],
        "PPL %": 100 * band.loc["val PPL", "band"] / band.loc["val PPL", "mean"],
    }
    titles = {
        "BLEU": f"Change in validation BLEU, beam {BASE.decoding.beam} (points; right is better)",
        "PPL %": "Change in validation perplexity (%; left is better)",
    }
    panels = []
    for metric, width in widths.items():
        data = points[points.metric == metric]
        shade = (
            alt.Chart(rounded(pd.DataFrame({"low": [-width], "high": [width]})))
            .mark_rect(color="#dddddd")
            .encode(x="low:Q", x2="high:Q")
        )
        zero = alt.Chart(pd.DataFrame({"zero": [0]})).mark_rule(color="#888888").encode(x="zero:Q")
        dots = (
            alt.Chart(data)
            .mark_point(size=70, filled=True)
            .encode(
                x=alt.X("change:Q", title=titles[metric]),
                y=alt.Y("line:N", sort=order, title=None),
                color=alt.Color(
                    "who:N",
                    title=None,
                    scale=alt.Scale(
                        domain=[OURS, PAPERS, "base seeds"], range=["#1f5fa8", "#e07b00", "#777777"]
                    ),
                    legend=alt.Legend(orient="bottom"),
                ),
                shape=alt.Shape(
                    "who:N",
                    scale=alt.Scale(
                        domain=[OURS, PAPERS, "base seeds"], range=["circle", "diamond", "stroke"]
                    ),
                    legend=None,
                ),
                tooltip=["line", "who", "change"],
            )
        )
        panels.append((shade + zero + dots).properties(width=300, height=16 * len(order)))
    return alt.hconcat(*panels).properties(
        title=f"Table 3 at Multi30k scale: each change against the base (grey: ±{BAND_SIGMAS:g} "
        f"standard deviations of the base over {int(band.loc[BLEU, 'seeds'])} seeds)"
    )


def curves_chart(lines: list[dict]) -> alt.FacetChart:
    """Validation BLEU (greedy) against steps, each variant beside the base's seeds, one panel per letter."""
    rows = []
    for line in lines:
        for step, bleu in line["val BLEU by step"]:
            rows.append(
                {
                    "line": line["variant"]
                    if line["row"] != "base"
                    else f"base, seed {line['seed']}",
                    "row": line["row"],
                    "step": int(step),
                    "val BLEU": bleu,
                }
            )
    frame = pd.DataFrame(rows)
    letters = [letter for letter in "ABCDE" if letter in set(frame.row)]
    base = frame[frame.row == "base"]
    panels = pd.concat(
        [
            pd.concat([base.assign(panel=letter), frame[frame.row == letter].assign(panel=letter)])
            for letter in letters
        ]
    )
    panels["kind"] = panels["row"].where(panels["row"] == "base", "variant")
    return (
        alt.Chart(rounded(panels))
        .mark_line(point=True)
        .encode(
            x=alt.X("step:Q", title="training step"),
            y=alt.Y("val BLEU:Q", title="validation BLEU (greedy)"),
            detail="line:N",
            color=alt.Color(
                "kind:N",
                title=None,
                scale=alt.Scale(domain=["base", "variant"], range=["#bbbbbb", "#1f5fa8"]),
            ),
            tooltip=["line", "step", "val BLEU"],
        )
        .properties(width=170, height=150)
        .facet(facet=alt.Facet("panel:N", title=None), columns=5)
        .properties(
            title="Validation BLEU during training: each row's variants (blue) and the base's seeds (grey)"
        )
    )


def price_chart(lines: list[dict], costs: dict) -> alt.LayerChart:
    """Validation BLEU against the cost of a training step (the base's = 1): what each line bought."""
    frame = lines_frame(lines)
    frame["line"] = [
        f"{row}: {name}" if row != "base" else f"base (seed {seed})"
        for row, name, seed in zip(frame["row"], frame["variant"], frame["seed"], strict=True)
    ]
    frame["cost of a step"] = frame["variant"].map(costs["relative to base"])
    frame = rounded(frame[["line", "row", "cost of a step", BLEU, "val PPL"]])
    points = (
        alt.Chart(frame)
        .mark_point(size=60, filled=True)
        .encode(
            x=alt.X(
                "cost of a step:Q",
                title="time a training step takes (the base's = 1; measured alone)",
                scale=alt.Scale(type="log"),
            ),
            y=alt.Y(
                f"{BLEU}:Q",
                title=f"validation BLEU (beam {BASE.decoding.beam})",
                scale=alt.Scale(zero=False),
            ),
            color=alt.Color("row:N", title="row"),
            tooltip=["line", "cost of a step", BLEU, "val PPL"],
        )
    )
    # The names in black: the row's colour identifies the point, and several of the row colours
    # (orange, yellow, teal) are too light to read as text on white.
    labels = points.mark_text(align="left", dx=6, fontSize=10).encode(
        text="line:N", color=alt.value("black")
    )
    return (points + labels).properties(
        width=520,
        height=320,
        title="What each line bought, and at what price: BLEU against step cost",
    )
