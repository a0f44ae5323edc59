"""The "Try the model" page: chapter 7's model exported (annotated/export/browser_model.py) and run in the
reader's browser (site/try/).

- The exported files: their size (10 MB at most) and digests. (The export's storage, its packing,
  rounding and bit allocation, is tests/test_browser_model.py's; a changed model.bin refused,
  tests/test_shipped.py's.)
- The export is the model chapter 7 reports: its scores are those chapter 7's notebook prints, and
  where the run folder is here, its weights' digest is the run's and its reference translations
  are what `python -m annotated.translate` prints.
- In headless Chromium, on the site as `make site` builds it: the first 200 test2016 sentences
  typed into the page, greedy and beam 4, against the reference (at least 99% and 97% the same,
  the differences listed); the attention the page shows against chapter 7's `attention_maps` on
  the same weights, one head of each kind, to 1e-3.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from browsing import try_page
from test_shipped import chapter_7_printed
from test_site import (
    DESKTOP,
)

from annotated.base.datasets import read_multi30k
from annotated.base.files import runs_dir
from annotated.export import browser_model
from annotated.training.shipped import (
    SHIPPED_DIR,
    load_shipped,
    read_tensors,
)

ROOT = Path(__file__).resolve().parent.parent
TRY = ROOT / "site" / "try"
EXPORTED = (SHIPPED_DIR / "model.bin", SHIPPED_DIR / "model.json", TRY / "reference.json")
MAX_BYTES = 10_000_000
RUN = runs_dir() / "multi30k-full"


@pytest.fixture(scope="module")
def manifest() -> dict:
    return json.loads((SHIPPED_DIR / "model.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def reference() -> dict:
    return json.loads((TRY / "reference.json").read_text(encoding="utf-8"))


# --- the exported files ----------------------------------------------------------------------


def test_the_exported_files_weigh_at_most_10_mb_and_are_the_files_the_manifest_describes(manifest):
    total = sum(path.stat().st_size for path in EXPORTED)
    assert total <= MAX_BYTES, f"the exported files weigh {total:,} bytes, more than 10 MB"
    _, tensors = read_tensors(SHIPPED_DIR)  # checks model.bin's digest
    assert set(tensors) == {entry["name"] for entry in manifest["tensors"]}
    matrices = [e for e in manifest["tensors"] if e["bits"] != 32]
    assert {e["bits"] for e in matrices} <= set(range(8, 13))
    parameters = sum(t.numel() for t in tensors.values())
    assert parameters == manifest["model"]["parameters"]  # the tied projection counted once


# --- the export is the model chapter 7 reports ---------------------------------------------------


def test_the_exported_model_scores_what_chapter_7s_notebook_prints(manifest):
    printed = chapter_7_printed("scores = final_scores(run)")
    scores = manifest["run"]["scores"]
    assert {(s["decoding"], s["<unk> copied"]) for s in scores if s["weights"] != "last"} >= {
        ("greedy", "yes"),
        ("beam 4", "yes"),
    }
    copied = {
        s["decoding"]: s["BLEU"]
        for s in scores
        if s["weights"] != "last" and s["<unk> copied"] == "yes"
    }
    runs = json.loads((ROOT / "benchmarks" / "results" / "ch07-notebook-runs.json").read_text())
    earlier = [
        r
        for r in runs["runs"]
        if (r["test2016_bleu_beam"], r["test2016_bleu_greedy"])
        == (copied["beam 4"], copied["greedy"])
    ]
    if earlier and not re.search(rf"beam 4\s+yes\s+{copied['beam 4']:.2f}\s", printed):
        # the page's model is an earlier making of chapter 7's run, kept in the record; chapter 7
        # says so, and tests/test_shipped.py checks that it does
        return
    for score in scores:
        line = rf"test_2016_flickr\s+{re.escape(score['weights'])}\s+{re.escape(score['decoding'])}"
        line += rf"\s+{score['<unk> copied']}\s+{score['BLEU']:.2f}\s"
        assert re.search(line, printed), (
            f"chapter 7's notebook does not print {score} for test2016: chapter 7 was retrained "
            "since the page's model was exported. Run `make try-model` and commit annotated/model/ and site/try/."
        )


@pytest.mark.skipif(not (RUN / "averaged.pt").exists(), reason=f"no trained run in {RUN}")
def test_the_export_comes_from_the_run_here(manifest):
    assert browser_model.sha256(RUN / "averaged.pt") == manifest["run"]["averaged_sha256"], (
        f"{RUN} is not the run the page's model was exported from: run `make try-model`"
    )


@pytest.mark.slow
@pytest.mark.skipif(not (RUN / "averaged.pt").exists(), reason=f"no trained run in {RUN}")
def test_the_reference_is_what_the_translate_filter_prints(reference):
    sentences = [de for de, _ in read_multi30k("test_2016_flickr")[:20]]
    for name, beam in (("greedy", 1), ("beam", 4)):
        printed = subprocess.run(
            [sys.executable, "-m", "annotated.translate", "--beam", str(beam)]
            + ["--checkpoint", str(RUN / "averaged.pt")],
            input="\n".join(sentences) + "\n",
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
        ).stdout.splitlines()
        assert printed == reference[name][:20]


# --- the page in Chromium ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def page(site, server, browser):  # noqa: F811
    yield from try_page(browser, server, DESKTOP)


def type_and_translate(page, sentence: str) -> str:
    """As a reader: the sentence into the box, Translate, and the English the page shows."""
    page.fill("#try-input", sentence)
    page.click("#try-translate")
    page.wait_for_function(
        "(s) => document.getElementById('try-output').dataset.source === s", arg=sentence
    )
    return page.inner_text("#try-output")


def typed(page, sentences: list[str], mode: str) -> list[str]:
    page.check(f"#try-mode-{mode}")
    return [type_and_translate(page, sentence) for sentence in sentences]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("mode", "key", "least"), [("greedy", "greedy", 0.99), ("beam", "beam", 0.97)]
)
def test_the_page_translates_200_test_sentences_as_the_translate_filter(
    page, reference, mode, key, least
):
    count = reference["sentences"]
    sentences = [de for de, _ in read_multi30k("test_2016_flickr")[:count]]
    got = typed(page, sentences, mode)
    wanted = reference[key]
    differ = [(i, g, w) for i, (g, w) in enumerate(zip(got, wanted, strict=True)) if g != w]
    listing = "\n".join(
        f"  {i}: page {g!r}\n  {' ' * len(str(i))}  book {w!r}" for i, g, w in differ
    )
    print(f"{mode}: {count - len(differ)} of {count} the same" + (f"\n{listing}" if differ else ""))
    assert count - len(differ) >= least * count, f"{mode}: {len(differ)} differ:\n{listing}"


@pytest.mark.slow
def test_the_attention_the_page_shows_is_chapter_7s_attention_maps(page):
    from annotated.figures.ch07_multi30k import attention_maps

    sentence = read_multi30k("test_2016_flickr")[8][0]  # chapter 7's sentence
    typed(page, [sentence], "greedy")
    translator = load_shipped(SHIPPED_DIR)
    maps = attention_maps(translator, sentence)
    for kind, value, layer, head in (
        ("encoder self-attention", "encoder", 1, 3),
        ("decoder self-attention", "decoderSelf", 2, 1),
        ("decoder-source attention", "decoderSource", 2, 4),
    ):
        page.select_option("#try-kind", value)
        page.select_option("#try-layer", str(layer))
        page.select_option("#try-head", str(head))
        shown = page.evaluate(
            """() => Array.from(document.querySelectorAll('#try-attention tbody tr'))
                 .map((row) => Array.from(row.querySelectorAll('td')).map((c) => +c.dataset.w))"""
        )
        book = maps[(maps["kind"] == kind) & (maps["layer"] == layer) & (maps["head"] == head)]
        queries = list(dict.fromkeys(book["query"]))
        keys = list(dict.fromkeys(book["key"]))
        wanted = book["weight"].to_numpy().reshape(len(queries), len(keys))
        assert (len(shown), len(shown[0])) == wanted.shape, kind
        worst = float(abs(torch.tensor(shown) - torch.tensor(wanted)).max())
        assert worst < 1e-3, f"{kind}, layer {layer}, head {head}: off by {worst:.2g}"


@pytest.mark.slow
def test_the_page_says_what_model_it_runs(page, manifest):
    about = page.inner_text("#try-about")
    for score in manifest["run"]["scores"]:
        if score["weights"] != "last" and score["<unk> copied"] == "yes":
            assert f"{score['BLEU']}" in about
    assert "nothing you type leaves your browser" in about
    assert f"{manifest['model']['parameters'] / 1e6:.1f} million" in about
