"""SentencePiece in JavaScript (site/try/subwords.js) against Python's sentencepiece.

The site's translation page cuts the reader's text into subword pieces in the browser, and must cut
it as chapter 5's `Subwords` (the sentencepiece library) cut the book's data; it must also turn
the model's ids back into the text sentencepiece writes for them. Here headless Chromium runs the
script over the table `annotated.export.sentencepiece_table.piece_table` exports, from a shared
vocabulary of 10,000 pieces learned from Multi30k as chapter 7's subword runs learn it. Its ids
must equal Python's on every Multi30k sentence (train, validation and test2016, German and English,
read from $ANNOTATED_DATA_DIR, else skipped), on hard strings (spaces of every kind, characters
never seen in training, emoji, the ▁ sign itself) and on random strings; and its text must equal
Python's for those ids and for random id sequences (bytes that make no character included).
Without Chromium the browser tests are skipped with a message saying so.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from needs import missing
from test_try_tokenizer import HARD

from annotated.base.datasets import DATA_DIR_ENV
from annotated.ch05_text import Subwords, load_multi30k
from annotated.export.sentencepiece_table import piece_table

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "site" / "try" / "subwords.js"
SIZE = 10_000  # the shared vocabulary of chapter 7's subword candidates

_ENCODE = (
    "([table, texts]) => { const s = AnnotatedSubwords.make(table); return texts.map(s.encode); }"
)
_DECODE = (
    "([table, rows]) => { const s = AnnotatedSubwords.make(table); return rows.map(s.decode); }"
)

MORE_HARD = [
    "\u2581",  # the sign that marks a word's start, typed by the reader
    "\u2581\u2581 a\u2581",
    "a\u2581b \u2581c",
    "▁Ein ▁Mann",
    "<s> </s> <pad> <unk> <0x41>",  # the special pieces' names, as text
    "\ufffd \ufb01nden \u00ad weich\u00adgetrennt",
    "a" * 300,
    "Donaudampfschifffahrtsgesellschaftskapitänsmützenabzeichen",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 \U0010fffd \U0001f9ea\U0001f9ea",
]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    if not os.environ.get(DATA_DIR_ENV):
        missing(f"no local Multi30k copy: set {DATA_DIR_ENV} (CI points it at ../shared/data)")
    return load_multi30k(SIZE, vocab_dir=tmp_path_factory.mktemp("subwords"))


@pytest.fixture(scope="module")
def subwords(corpus) -> Subwords:
    assert isinstance(corpus.src_vocab, Subwords) and len(corpus.src_vocab) == SIZE
    return corpus.src_vocab


@pytest.fixture(scope="module")
def table(subwords):
    return piece_table(subwords)


@pytest.fixture(scope="module")
def page(browser):  # noqa: F811 (tests/browsing.py's fixture: skips without Chromium)
    tab = browser.new_page()
    tab.set_content("<html><body></body></html>")
    tab.add_script_tag(path=str(SCRIPT))
    yield tab
    tab.close()


def assert_same_ids(page, table: dict, subwords: Subwords, texts: list[str]) -> None:
    """The script's ids for each text equal sentencepiece's; else the first that differ, shown."""
    expected = subwords.encode_texts(texts)
    got = page.evaluate(_ENCODE, [table, texts])
    differ = [(t, e, g) for t, e, g in zip(texts, expected, got, strict=True) if e != g]
    pieces = subwords.decode
    shown = "\n".join(
        f"{t!r}\n  Python:     {pieces(e)}\n  JavaScript: {pieces(g)}" for t, e, g in differ[:10]
    )
    assert not differ, f"{len(differ)} of {len(texts)} texts differ; the first:\n{shown}"


def assert_same_text(page, table: dict, subwords: Subwords, rows: list[list[int]]) -> None:
    expected = subwords.decode_texts(rows)
    got = page.evaluate(_DECODE, [table, rows])
    differ = [(r, e, g) for r, e, g in zip(rows, expected, got, strict=True) if e != g]
    shown = "\n".join(f"{r}\n  Python:     {e!r}\n  JavaScript: {g!r}" for r, e, g in differ[:10])
    assert not differ, f"{len(differ)} of {len(rows)} id rows decode otherwise; the first:\n{shown}"


def every_sentence(corpus) -> list[str]:
    texts = [text for split in ("train", "val", "test_2016_flickr") for pair in corpus.raw[split]
             for text in pair]  # fmt: skip
    assert len(texts) == 2 * (29000 + 1014 + 1000)
    return texts


@pytest.mark.slow
def test_every_multi30k_sentence_gets_sentencepieces_ids_and_its_text_back(page, table, corpus):
    texts = every_sentence(corpus)
    assert_same_ids(page, table, corpus.src_vocab, texts)
    rows = corpus.src_vocab.encode_texts(texts[::10])
    assert_same_text(page, table, corpus.src_vocab, rows)


@pytest.mark.slow
def test_hard_strings_encode_and_decode_as_in_python(page, table, subwords):
    texts = HARD + MORE_HARD
    assert_same_ids(page, table, subwords, texts)
    assert_same_text(page, table, subwords, subwords.encode_texts(texts))
    # Characters the vocabulary never saw are spelled in bytes, as sentencepiece spells them.
    assert any(kind == "byte" for row in subwords.encode_texts(["\U0001f9ea"])
               for kind in (table["kinds"][i] for i in row))  # fmt: skip


@pytest.mark.slow
def test_random_strings_encode_as_in_python(page, table, subwords):
    """Strings drawn from letters, digits, punctuation, spaces of several kinds and ▁."""
    alphabet = list("aenrstAEMäöüßéΩжй東0159.,;:!?-'’\"„“()[]<>/@#€%&_~|… \t\n\u00a0\u2581")
    alphabet += ["ein ", "Mann ", "der ", "▁", "  ", "\U0001f600", "sch", "ung"]
    draw = random.Random(20261202)
    texts = ["".join(draw.choices(alphabet, k=draw.randint(1, 16))) for _ in range(3000)]
    assert_same_ids(page, table, subwords, texts)


@pytest.mark.slow
def test_random_ids_decode_as_in_python(page, table, subwords):
    """Any ids the model might write: controls, <unk>, byte pieces that make no character, words."""
    draw = random.Random(20261203)
    kinds = table["kinds"]
    byte_ids = [i for i, kind in enumerate(kinds) if kind == "byte"]
    rows = []
    for _ in range(3000):
        row = [draw.randrange(len(kinds)) for _ in range(draw.randint(0, 12))]
        for _ in range(draw.randint(0, 4)):  # runs of bytes, valid UTF-8 or not
            at = draw.randint(0, len(row))
            row[at:at] = draw.choices(byte_ids, k=draw.randint(1, 4))
        rows.append(row)
    utf8 = [[byte_ids[b] for b in text.encode()] for text in ["é", "東京", "\U0001f600", "\ufffd"]]
    rows += utf8 + [row[:-1] for row in utf8]  # whole characters, and cut short
    assert_same_text(page, table, subwords, rows)


@pytest.mark.slow
def test_the_comparison_can_fail(page, table, corpus):
    """With the merges' order reversed, with a piece missing, or with ▁ left in front of the
    decoded text, the script and sentencepiece disagree, and the assertions say so."""
    subwords, texts = corpus.src_vocab, [text for pair in corpus.raw["val"] for text in pair]
    reversed_order = dict(table, scores=[-s for s in table["scores"]])  # the latest merges first
    with pytest.raises(AssertionError, match=f"of {len(texts)} texts differ"):
        assert_same_ids(page, reversed_order, subwords, texts)
    [ids] = subwords.encode_texts(["Ein Mann"])
    gone = dict(table, kinds=["unused" if i == ids[1] else k for i, k in enumerate(table["kinds"])])
    with pytest.raises(AssertionError, match="1 of 1 texts differ"):
        assert_same_ids(page, gone, subwords, ["Ein Mann"])
    leading = dict(table, pieces=[p.replace("\u2581", " \u2581") for p in table["pieces"]])
    with pytest.raises(AssertionError, match="1 of 1 id rows decode otherwise"):
        assert_same_text(page, leading, subwords, [ids])
