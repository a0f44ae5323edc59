"""The "Try the model" page running a model of shared subwords, as chapter 7's subword recipes
train it: one sentencepiece vocabulary for both languages and one embedding matrix for the
source, the target and the output layer (section 3.4).

The page is the built site's try.html, in headless Chromium, with its model file swapped for a
small one exported here by annotated/export/browser_model.py (`describe` and `pack_model`, every
tensor in float32). Its vocabulary is learned from the book's own WMT sample (no download); its
weights are random but peaked, so that no two words tie. Typed sentences must come out of the page
exactly as `Translator.translate` writes them in Python, greedy and with beam search: the pieces
come from site/try/subwords.js, the ids go through the page's model and back to text. The shared
matrix is stored once.
"""

from __future__ import annotations

import base64
import dataclasses
import json

import pytest
import torch
from browsing import try_page
from test_site import DESKTOP

from annotated.base.datasets import read_wmt14
from annotated.ch02_model import ModelConfig, make_model
from annotated.ch05_text import SPECIALS, Subwords
from annotated.ch06_decoding import DecodeConfig, Translator
from annotated.export import browser_model
from annotated.export.sentencepiece_table import SPACE

SIZE = 600  # pieces: the 256 byte pieces, the specials, characters and a few hundred merges
HARD = [
    "Ein Mann mit einem 🧪 fährt Fahrrad.",  # an emoji: bytes in, so bytes the model may write
    "Zwei   Hunde \u00ad spielen\tim Schnee.",
    "Żółć ist kein deutsches Wort.",
]
SCORES = [  # what the page's line about the model quotes: the averaged model's rows
    {"split": "test_2016_flickr", "weights": "last", "decoding": "greedy", "<unk> copied": "no",
     "BLEU": 1.5},
    {"split": "test_2016_flickr", "weights": "average of last 5", "decoding": "greedy",
     "<unk> copied": "no", "BLEU": 2.25},
    {"split": "test_2016_flickr", "weights": "average of last 5", "decoding": "beam 4",
     "<unk> copied": "no", "BLEU": 3.75},
]  # fmt: skip


@pytest.fixture(scope="module")
def sentences() -> list[str]:
    pairs = read_wmt14("test")
    return [de for _, de in pairs[:30]] + HARD


@pytest.fixture(scope="module")
def translator() -> Translator:
    pairs = read_wmt14("train")[:3000]
    subwords = Subwords.build([text for pair in pairs for text in pair], SIZE)
    config = ModelConfig(len(subwords), len(subwords), N=1, d_model=32, d_ff=64, h=2)
    torch.manual_seed(0)
    model = make_model(dataclasses.replace(config, share_embeddings=True))
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() == 1:  # biases and norms away from their starting values
                parameter.copy_(torch.randn_like(parameter) * 0.5 + (parameter == 1).float())
            else:  # peaked distributions: no near ties between pieces
                parameter.mul_(3.0)
    decoding = DecodeConfig(beam=4, alpha=2.5, extra_length=12)
    return Translator(model.eval(), subwords, subwords, decoding)


@pytest.fixture(scope="module")
def data(translator, sentences) -> dict:
    """model-data.js's content for the model: the manifest and the weights in base64."""
    tensors, blob = browser_model.pack_model(translator.model, {}, {})  # float32
    manifest = {
        "format": browser_model.FORMAT,
        "run": {"folder": "a small subword model", "scores": SCORES},
        **browser_model.describe(translator),
        "examples": sentences[:2],
        "tensors": tensors,
        "bin_bytes": len(blob),
    }
    return {"manifest": manifest, "weights": base64.b64encode(bytes(blob)).decode("ascii")}


@pytest.fixture(scope="module")
def page(site, server, browser, data):  # noqa: F811
    script = f"window.AnnotatedTryData = {json.dumps(data, ensure_ascii=False)};\n"
    yield from try_page(browser, server, DESKTOP, script)


def test_the_manifest_holds_the_piece_table_and_the_shared_matrix_once(data, translator):
    manifest = data["manifest"]
    assert "vocab" not in manifest and "tokenizer" not in manifest  # words' only
    assert manifest["subwords"]["pieces"][: len(SPECIALS)] == list(SPECIALS)
    assert len(manifest["subwords"]["pieces"]) == SIZE
    names = [entry["name"] for entry in manifest["tensors"]]
    assert "tgt_embed.0.lut.weight" in names
    assert "src_embed.0.lut.weight" not in names and "generator.weight" not in names
    assert browser_model.SHARED in browser_model.matrices(translator.model)
    stored = sum(entry["bytes"] for entry in manifest["tensors"])
    assert stored == 4 * sum(p.numel() for p in translator.model.parameters())  # each once


@pytest.mark.slow
@pytest.mark.parametrize("beam", [1, 4])
def test_the_page_translates_as_the_python_translator(page, translator, sentences, beam):
    # One sentence at a time, as the page decodes: a batch lets each output run to the batch's
    # longest source plus extra_length, and the random model rarely stops before its limit.
    wanted = [translator.translate([s], beam=beam, alpha=2.5)[0] for s in sentences]
    got = page.evaluate(
        "([texts, beam]) => texts.map((t) => AnnotatedTry.translate(t, { beam, alpha: 2.5 }).text)",
        [sentences, beam],
    )
    differ = [(s, w, g) for s, w, g in zip(sentences, wanted, got, strict=True) if w != g]
    shown = "\n".join(f"{s!r}\n  Python: {w!r}\n  page:   {g!r}" for s, w, g in differ[:5])
    assert not differ, f"beam {beam}: {len(differ)} of {len(sentences)} differ:\n{shown}"
    assert len(set(got)) > len(got) // 2  # not one line for every sentence


@pytest.mark.slow
def test_the_page_shows_the_pieces_it_read_and_wrote(page, translator, sentences):
    sentence = sentences[0]
    page.check("#try-mode-greedy")
    page.fill("#try-input", sentence)
    page.click("#try-translate")
    page.wait_for_function(
        "(s) => document.getElementById('try-output').dataset.source === s", arg=sentence
    )
    assert page.inner_text("#try-output") == translator.translate([sentence])[0]
    result = page.evaluate("(s) => AnnotatedTry.translate(s)", sentence)
    assert result["words"] == translator.src_vocab.split([sentence])[0]
    assert result["words"][0].startswith(SPACE) and not any(result["copied"])
    header = page.inner_text("#try-attention thead")
    assert result["words"][0] in header  # the attention's columns are the source's pieces
    about = page.inner_text("#try-about")
    assert "BLEU 3.75 with beam search, 2.25 greedy" in about  # the averaged rows, not "last"
