"""annotated/export/sentencepiece_table.py: the piece table the Try page's sentencepiece port reads,
and the models it refuses.

Each model here is learned from the book's own WMT sample (no download) in a second or so: the
book's settings (`Subwords.build`), and models with one setting changed, trained with
sentencepiece itself. tests/test_try_subwords.py runs the port over the table in Chromium."""

from __future__ import annotations

import io

import pytest
import sentencepiece as spm

from annotated.base.datasets import read_wmt14
from annotated.ch05_text import SPECIALS, Subwords
from annotated.export.sentencepiece_table import UnsupportedSubwordsError, kind, piece_table

SIZE = 500


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return [text for pair in read_wmt14("train")[:1500] for text in pair]


@pytest.fixture(scope="module")
def subwords(texts) -> Subwords:
    return Subwords.build(texts, SIZE)


def trained(texts, **changed) -> Subwords:
    """A model of the book's settings (Subwords.build's) with `changed` in place of some."""
    settings = dict(
        model_type="bpe", vocab_size=SIZE, character_coverage=0.9999, byte_fallback=True,
        normalization_rule_name="identity", unk_id=SPECIALS.index("<unk>"),
        pad_id=SPECIALS.index("<pad>"), bos_id=SPECIALS.index("<s>"),
        eos_id=SPECIALS.index("</s>"), num_threads=1, minloglevel=2,
    )  # fmt: skip
    settings |= changed
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(texts), model_writer=model, **settings)
    return Subwords(model.getvalue(), {"vocab_size": SIZE})


def test_the_table_names_every_piece_by_id_with_its_score_and_kind(subwords):
    table = piece_table(subwords)
    assert len(table["pieces"]) == len(table["scores"]) == len(table["kinds"]) == SIZE
    assert [table["pieces"][i] for i in subwords.encode_texts(["Ein Hund"])[0]] == (
        subwords.split(["Ein Hund"])[0]
    )
    assert table["kinds"].count("byte") == 256 and table["kinds"].count("unknown") == 1
    assert table["pieces"][: len(SPECIALS)] == list(SPECIALS)
    normal = [s for s, k in zip(table["scores"], table["kinds"], strict=True) if k == "normal"]
    assert normal == sorted(normal, reverse=True)  # BPE: the earlier a merge, the higher its score


def test_each_piece_has_the_kind_sentencepiece_gives_it(subwords):
    pieces = [subwords.processor.id_to_piece(i) for i in range(SIZE)]
    assert kind(subwords, pieces.index("<s>")) == kind(subwords, pieces.index("<pad>")) == "control"
    assert kind(subwords, pieces.index("<unk>")) == "unknown"
    assert kind(subwords, pieces.index("<0x41>")) == "byte"
    assert kind(subwords, pieces.index("\u2581der")) == "normal"


@pytest.mark.parametrize(
    ("changed", "reason"),
    [
        ({"model_type": "unigram", "vocab_size": 400}, "not BPE"),
        ({"add_dummy_prefix": False}, "puts no space in front"),
        ({"remove_extra_whitespaces": False}, "keeps extra spaces"),
        ({"normalization_rule_name": "nmt_nfkc"}, "normalizes Unicode"),
        ({"byte_fallback": False}, "no byte fallback"),
    ],
)
def test_a_model_with_settings_the_port_does_not_reproduce_is_refused(texts, changed, reason):
    other = trained(texts, **changed)
    if changed.get("model_type") == "unigram":
        other.settings["model"] = "unigram"  # as a vocabulary's saved settings would say
    with pytest.raises(UnsupportedSubwordsError, match=reason) as refused:
        piece_table(other)
    assert "Subwords.build" in str(refused.value)  # what to do instead


def test_the_books_settings_trained_by_hand_are_accepted(texts):
    assert piece_table(trained(texts))["kinds"].count("byte") == 256
