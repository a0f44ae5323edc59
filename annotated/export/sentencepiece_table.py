"""A chapter 5 `Subwords` vocabulary, exported for the browser.

The site's translation page must cut the reader's text into the same subword pieces as Python's
sentencepiece cut the book's data, and turn the model's pieces back into the same text.
`piece_table(subwords)` exports what that takes as JSON-ready data: every piece with its score and
its kind. site/try/subwords.js runs sentencepiece's BPE encoder and its decoder over the table, and
tests/test_try_subwords.py checks, in Chromium, that the two agree.

The port handles the settings `Subwords.build` trains with, and no others: BPE, the identity
normalization (no Unicode rewriting), a space put in front of the text, runs of spaces made one,
and byte fallback. `piece_table` probes the model for each of these and refuses one that differs.
"""

from __future__ import annotations

from annotated.ch05_text import Subwords

SPACE = "\u2581"  # ▁, which marks where a word starts
# A character that Unicode normalization (NFKC) would rewrite: the identity rule keeps it.
LIGATURE = "\ufb01"  # "ﬁ", NFKC's "fi"


class UnsupportedSubwordsError(ValueError):
    """A sentencepiece model whose settings the page's port does not reproduce."""


def kind(subwords: Subwords, piece_id: int) -> str:
    """One piece's kind, as site/try/subwords.js reads it."""
    processor = subwords.processor
    if processor.is_control(piece_id):
        return "control"
    if processor.is_unknown(piece_id):
        return "unknown"
    if processor.is_byte(piece_id):
        return "byte"
    if processor.is_unused(piece_id):
        return "unused"
    return "normal"


def check_supported(subwords: Subwords) -> None:
    """Refuse, with the reason, a model whose settings differ from the ones the port reproduces."""
    processor = subwords.processor

    def refuse(what: str) -> None:
        raise UnsupportedSubwordsError(
            f"site/try/subwords.js reproduces sentencepiece for Subwords.build's settings only; "
            f"this model {what}. Build the vocabulary with annotated.ch05_text.Subwords.build."
        )

    if subwords.settings.get("model", "bpe") != "bpe":
        refuse(f"is a {subwords.settings['model']} model, not BPE")
    if not processor.encode("a", out_type=str)[0].startswith(SPACE):
        refuse("puts no space in front of the text (add_dummy_prefix is off)")
    if processor.encode("  a   b  ") != processor.encode("a b"):
        refuse("keeps extra spaces (remove_extra_whitespaces is off)")
    if processor.encode(LIGATURE) == processor.encode("fi"):
        refuse("normalizes Unicode (its normalization rule is not the identity)")
    kinds = [kind(subwords, i) for i in range(len(subwords))]
    if kinds.count("byte") != 256:
        refuse("has no byte fallback (it does not hold the 256 byte pieces)")
    if "unused" in kinds:
        refuse("has unused pieces, which the port's BPE does not resegment")


def piece_table(subwords: Subwords) -> dict:
    """{"pieces", "scores", "kinds"}: every piece, by id, with its score and its kind."""
    check_supported(subwords)
    processor = subwords.processor
    ids = range(len(subwords))
    return {
        "pieces": [processor.id_to_piece(i) for i in ids],
        "scores": [processor.get_score(i) for i in ids],
        "kinds": [kind(subwords, i) for i in ids],
    }
