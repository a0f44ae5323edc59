"""Offline, byte-stable Altair charts for the book.

This package is the renderer; each chapter's charts (and the tables and numbers computed only for
them) are in `annotated/figures/chNN_topic.py`, which the chapter's notebook imports where it
draws.

Altair's default renderer loads vega from a CDN and gives every chart a random element id, so a
notebook re-executed by nbval never matches its committed outputs, and a page read offline shows
nothing. The book's renderer instead emits:

- `application/vnd.vegalite.v*+json`: the chart's spec, which JupyterLab and VS Code draw natively
  with the vega they ship (no network);
- `text/html` (when the book is executed by `make execute`/`make book` or checked by nbval, which set
  ANNOTATED_CHART_HTML=1): a `<div>` whose id is a hash of the spec, and a script that draws it
  with vega, vega-lite and vega-embed from one local file, `_static/annotated-vega.js`
  (see `write_vega_bundle`), the same file for every chart on a page;
- `text/plain`: the chart's title, for terminals.

Only the exported site needs the HTML form; in a live Jupyter session the spec alone is shown,
because a notebook page has no `_static/` folder to load the bundle from.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import altair as alt
import numpy as np
import pandas as pd

from annotated.base.files import atomic_write

HTML_ENV = "ANNOTATED_CHART_HTML"
BUNDLE_NAME = "annotated-vega.js"
RENDERER_NAME = "annotated"
MAX_ROWS = 20_000  # the largest chart in the book (a positional-encoding heatmap) stays below this

# A tiny loader shared by every chart on a page: it loads the bundle once (a Sphinx page tells us
# where its root is), then draws each chart that asked for it.
_LOADER = """\
(function () {
  var id = "%(id)s", spec = %(spec)s;
  var root = document.documentElement.dataset.content_root || "";
  if (!window.annotatedVegaReady) {
    window.annotatedVegaReady = new Promise(function (resolve, reject) {
      if (window.annotatedVega) { resolve(window.annotatedVega); return; }
      var tag = document.createElement("script");
      tag.src = root + "_static/%(bundle)s";
      tag.onload = function () { resolve(window.annotatedVega); };
      tag.onerror = function () { reject(new Error("could not load " + tag.src)); };
      document.head.appendChild(tag);
    });
  }
  window.annotatedVegaReady
    .then(function (lib) { return lib.vegaEmbed("#" + id, spec, {actions: false, renderer: "svg"}); })
    .catch(function (error) {
      var box = document.getElementById(id);
      box.textContent = "This chart needs _static/%(bundle)s beside the page (run `make book`): " + error;
      console.error(error);
    });
})();"""


def _spec_text(spec: dict[str, Any]) -> str:
    return json.dumps(spec, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def chart_html(spec: dict[str, Any]) -> str:
    """HTML for one chart: a div with a content-derived id and the script that draws it."""
    text = _spec_text(spec)
    chart_id = "annotated-chart-" + hashlib.sha256(text.encode()).hexdigest()[:16]
    # "</" inside a script would end it early; JSON allows the escaped form.
    script = _LOADER % {"id": chart_id, "spec": text.replace("</", "<\\/"), "bundle": BUNDLE_NAME}
    return f'<div id="{chart_id}" class="annotated-chart"></div>\n<script type="text/javascript">\n{script}\n</script>'


def _title(spec: dict[str, Any]) -> str:
    """The chart's title, or its panels' titles joined, for the plain-text form."""
    title = spec.get("title")
    if isinstance(title, dict):
        title = title.get("text")
    if isinstance(title, list):
        title = " ".join(title)
    if title:
        return str(title)
    panels = [
        _title(panel)
        for key in ("vconcat", "hconcat", "concat", "layer")
        for panel in spec.get(key, [])
    ]
    return " | ".join(panel for panel in panels if panel != "untitled") or "untitled"


def render(spec: dict[str, Any], **_metadata: Any) -> dict[str, Any]:
    """The book's Altair renderer: see the module docstring for what each MIME type is for."""
    major = alt.SCHEMA_VERSION.lstrip("v").split(".")[0]
    bundle: dict[str, Any] = {
        f"application/vnd.vegalite.v{major}+json": spec,
        "text/plain": f"<chart: {_title(spec)}>",
    }
    if os.environ.get(HTML_ENV) == "1":
        bundle["text/html"] = chart_html(spec)
    return bundle


def use_book_charts() -> None:
    """Draw every Altair chart with the book's offline, byte-stable renderer."""
    alt.renderers.register(RENDERER_NAME, render)
    alt.renderers.enable(RENDERER_NAME)
    alt.data_transformers.enable("default", max_rows=MAX_ROWS)


# What the bundle exposes: vega-embed (which carries vega and vega-lite), wrapped so that a chart
# fits the box it is drawn in. A composition of side-by-side panels wider than its box is drawn
# again with its panels stacked (the outermost `hconcat` first, then the ones inside it), or a
# grid of panels (a facet or concat with `columns`) with one column fewer, until it fits (at most
# six times); what is still too wide (a single wide panel, or most charts on a phone) scrolls in
# its box. When a chart is drawn, its box gets an "annotated-chart-drawn" event (the site's
# book.js puts a "scroll sideways" cue above a box that scrolls).
_FITTING_EMBED = """\
function annotatedStacked(spec) {
  var copy = JSON.parse(JSON.stringify(spec)), queue = [copy];
  while (queue.length) {
    var node = queue.shift();
    if (node.hconcat) {
      node.vconcat = node.hconcat;
      delete node.hconcat;
      return copy;
    }
    if (node.columns > 1) {
      node.columns -= 1;
      return copy;
    }
    (node.vconcat || node.concat || node.layer || []).forEach(function (part) { queue.push(part); });
  }
  return null;
}
function annotatedEmbed(target, spec, options) {
  var box = typeof target === "string" ? document.querySelector(target) : target;
  function draw(current, tries) {
    return vegaEmbed(target, current, options).then(function (result) {
      var drawn = box.querySelector("svg, canvas"), room = box.clientWidth;
      var next = tries < 6 && room > 0 && drawn && drawn.getBoundingClientRect().width > room + 1
        ? annotatedStacked(current) : null;
      if (next) {
        result.finalize();
        return draw(next, tries + 1);
      }
      box.dispatchEvent(new CustomEvent("annotated-chart-drawn", {bubbles: true}));
      return result;
    });
  }
  return draw(spec, 0);
}
window.annotatedVega = {vegaEmbed: annotatedEmbed};"""


def vega_snippet() -> str:
    """The script the bundle is made from: vega-embed, wrapped to fit charts to their boxes."""
    return _FITTING_EMBED


def vega_bundle() -> str:
    """vega, vega-lite and vega-embed in one script whose only global is `annotatedVega.vegaEmbed`."""
    import vl_convert

    vl_version = ".".join(alt.SCHEMA_VERSION.lstrip("v").split(".")[:2])
    body = vl_convert.javascript_bundle(snippet=vega_snippet(), vl_version=vl_version)
    # The bundle declares hundreds of top-level names; a function scope keeps them off `window`.
    return f"/* vega + vega-lite {vl_version} + vega-embed, bundled by vl-convert */\n(function () {{\n{body}\n}})();\n"


def write_vega_bundle(directory: str | Path) -> Path:
    """Write the bundle to `directory/annotated-vega.js` atomically and return its path."""
    target = Path(directory) / BUNDLE_NAME
    with atomic_write(target, "w", encoding="utf-8") as handle:
        handle.write(vega_bundle())
    return target


def rounded(frame: pd.DataFrame, significant: int = 3) -> pd.DataFrame:
    """Round a DataFrame's float columns to `significant` digits, for charts and tables.

    Floats computed on another CPU or GPU, with other kernels or thread counts, differ in their
    last bits; a chart spec or a table that printed them would differ too. Three significant
    digits are all a reader can see in a chart, and a rounding that lands on another side of a
    boundary needs a value to sit within ~1e-7 (float32) of it. Values far below the column's
    largest (by 1e-6 or more, the size of float32 rounding noise) become 0, so a quantity whose
    exact value is 0 does not show its noise.
    """
    floats = frame.select_dtypes("float").columns
    return frame.assign(**{name: _significant(frame[name], significant) for name in floats})


def _significant(column: pd.Series, digits: int) -> pd.Series:
    values = column.to_numpy(dtype=np.float64)
    finite = np.isfinite(values)
    scale = np.abs(values[finite]).max() if finite.any() else 0.0
    shown = [
        0.0 if abs(v) <= scale * 1e-6 else float(f"{v:.{digits}g}") if np.isfinite(v) else v
        for v in values
    ]
    return pd.Series(shown, index=column.index, name=column.name, dtype=np.float64)
