"""The book's chart renderer: offline, byte-stable, and its vega bundle leaks no names."""

import json
import shutil
import subprocess

import altair as alt
import pandas as pd
import pytest

from annotated import figures


def a_chart(values=(1, 2, 3)) -> alt.Chart:
    frame = pd.DataFrame({"x": list(range(len(values))), "y": list(values)})
    return alt.Chart(frame).mark_line().encode(x="x:Q", y="y:Q").properties(title="a test chart")


def test_renderer_is_byte_stable_and_offline(monkeypatch):
    monkeypatch.setenv(figures.HTML_ENV, "1")
    first, second = figures.render(a_chart().to_dict()), figures.render(a_chart().to_dict())
    assert first == second
    html = first["text/html"]
    assert "http://" not in html and "https://" not in html.replace(
        "https://vega.github.io/schema", ""
    )
    assert "_static/annotated-vega.js" in html
    assert first["text/plain"] == "<chart: a test chart>"
    different = figures.render(a_chart((1, 2, 4)).to_dict())["text/html"]
    element_id = lambda text: text.split('id="')[1].split('"')[0]  # noqa: E731
    assert element_id(html) != element_id(different), "the element id must derive from the content"


def test_html_only_when_the_book_is_executed(monkeypatch):
    monkeypatch.delenv(figures.HTML_ENV, raising=False)
    bundle = figures.render(a_chart().to_dict())
    assert "text/html" not in bundle
    spec_type = next(key for key in bundle if key.startswith("application/vnd.vegalite"))
    assert bundle[spec_type]["title"] == "a test chart"


def test_spec_inside_the_script_cannot_close_it(monkeypatch):
    frame = pd.DataFrame({"label": ["</script><b>x</b>"], "y": [1]})
    spec = alt.Chart(frame).mark_bar().encode(x="label:N", y="y:Q").to_dict()
    html = figures.chart_html(spec)
    assert html.count("</script>") == 1
    embedded = html.split("spec = ", 1)[1].split(";\n", 1)[0]
    assert json.loads(embedded.replace("<\\/", "</"))["datasets"] == spec["datasets"]


def test_titles_of_concatenated_charts():
    spec = alt.vconcat(a_chart(), a_chart().properties(title="second")).to_dict()
    assert figures.render(spec)["text/plain"] == "<chart: a test chart | second>"


@pytest.fixture(scope="module")
def bundle_path(tmp_path_factory):
    return figures.write_vega_bundle(tmp_path_factory.mktemp("static"))


def test_bundle_is_wrapped_in_one_function_scope(bundle_path):
    text = bundle_path.read_text()
    assert bundle_path.name == figures.BUNDLE_NAME
    body = text.split("\n", 1)[1]
    assert body.startswith("(function () {\n") and body.rstrip().endswith("})();")
    assert "window.annotatedVega" in text


@pytest.mark.skipif(
    shutil.which("node") is None, reason="node is not installed: cannot run the bundle"
)
def test_bundle_defines_only_annotated_vega(bundle_path):
    # Run the bundle as a classic script in node's global scope, as a browser would, twice:
    # a leaked top-level `const` would make the second run fail with "already been declared",
    # and a leaked `var` or `function` would show up as a new global property.
    script = f"""(function () {{
    const vm = require("vm"), fs = require("fs");
    const code = fs.readFileSync({json.dumps(str(bundle_path))}, "utf8");
    globalThis.window = globalThis; globalThis.self = globalThis;
    const before = new Set(Object.getOwnPropertyNames(globalThis));
    vm.runInThisContext(code); vm.runInThisContext(code);
    const added = Object.getOwnPropertyNames(globalThis).filter(k => !before.has(k));
    const lib = globalThis.annotatedVega;
    console.log(JSON.stringify({{added, embed: typeof lib.vegaEmbed}}));
    }})();"""
    result = subprocess.run(["node", "-e", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report == {"added": ["annotatedVega"], "embed": "function"}
