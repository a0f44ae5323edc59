# %% [markdown] slideshow={"slide_type": "slide"}
# # Chapter 5 — From text to batches
#
# *Paper: section 5.1 (training data and batching).*
#
# Chapters 1–4 built the Transformer and trained it on sequences of made-up symbols. To translate,
# it needs real sentences turned into what it reads: lists of integer ids, packed into batches.
# This chapter builds that path once. Both translation chapters take it, chapter 7 for Multi30k
# and chapter 8 for WMT:
#
# 1. read a parallel corpus, checked against the checksums the book keeps (`annotated/base/datasets.py`);
# 2. cut each sentence into **tokens**, either words or subwords, and glue tokens back into text;
# 3. learn a **vocabulary** from the training split only, and save it with the settings that
#    built it (a model is useless without the exact vocabulary it was trained with);
# 4. group sentences of similar length into **batches of a fixed token budget**, and measure the
#    padding that saves.
#
# The corpus in the examples is **Multi30k** (Elliott et al., 2016): about 31,000 short English
# descriptions of Flickr photos, each translated into German by a professional translator. The
# book translates German into English with it, in an hour on a laptop CPU (chapter 7).
#
# This used to be the job of the torchtext library: datasets, vocabularies, padding, bucketing.
# That library has been retired and no longer imports with current PyTorch, so the book writes its
# own small version. The tables shown here are built by `annotated/figures/ch05_text.py`, and the
# exercises' checks live in `annotated/exercises/ch05_text.py`.

# %% tags=["active-ipynb", "hide-input"]
# # Run this cell first: it finds the book's code, or installs the release this notebook ran with.
# def find_or_install_the_book(name="annotated-transformer-book", version="0.1.0"):
#     import subprocess, sys, tempfile
#     from importlib import invalidate_caches, metadata
#
#     try:
#         found = metadata.version(name)
#     except metadata.PackageNotFoundError:
#         # Pins what this kernel has imported already (numpy...): pip must not replace any of it.
#         imported = metadata.packages_distributions()
#         kept = {d for module, ds in imported.items() if module in sys.modules for d in ds}
#         with tempfile.TemporaryDirectory() as folder:
#             pins = f"{folder}/imported.txt"
#             with open(pins, "w") as file:
#                 file.writelines(f"{d}=={metadata.version(d)}\n" for d in sorted(kept))
#             pip = [sys.executable, "-m", "pip", "install", f"{name}=={version}", "-c", pins]
#             result = subprocess.run(pip, capture_output=True, text=True)
#         if result.returncode != 0:
#             print(result.stdout + result.stderr)
#             print(f"Could not install the book's code, {name}=={version} (pip's words above):"
#                   " that release may not be on the package index yet, or this machine is offline.")
#             print("Work in a clone of the book instead (`make lab` there opens the chapters), or"
#                   " install a clone here (`pip install -e path/to/clone`) and restart the kernel.")
#             raise RuntimeError(f"{name} is not installed") from None
#         invalidate_caches()
#         found = metadata.version(name)
#     note = "" if found == version else f" (this notebook was executed with {version})"
#     print(f"The book's code: {name} {found}{note}.")
#
#
# find_or_install_the_book()

# %%
from __future__ import annotations

import functools
import io
import json
import random
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import sentencepiece as spm
import spacy

from annotated.base.datasets import read_multi30k
from annotated.base.files import atomic_write, read_vocabulary_file
from annotated.ch03_training import Batch, SpecialTokens, pad_sequences

# %% tags=["active-ipynb"]
# import pandas as pd
#
# from annotated.figures.ch05_text import batch_sizes_table, batching_table, vocab_table

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 1. The data
#
# `read_multi30k(split)` returns the (German, English) pairs of one split. It looks for the gzip
# files in three places, in this order:
#
# 1. a local folder you name (the `ANNOTATED_DATA_DIR` variable, or the `mirror` argument);
# 2. the cache in `data/multi30k/`;
# 3. the official `multi30k/dataset` repository, from which it downloads them.
#
# Wherever they come from, it checks their SHA-256 before use. We train on `train`, watch `val`
# during training, and report the final score on `test_2016_flickr`, which nothing in training
# ever touches. Chapter 8's WMT data comes through the same module.

# %% tags=["active-ipynb"]
# splits = {name: read_multi30k(name) for name in ("train", "val", "test_2016_flickr")}
# pd.DataFrame(
#     [{"split": name, "sentence pairs": len(pairs)} for name, pairs in splits.items()]
# ).set_index("split")

# %% tags=["active-ipynb"] slideshow={"slide_type": "-"}
# pd.DataFrame(splits["train"][:4], columns=["German (source)", "English (target)"])

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 2. Words
#
# The model reads and writes integer ids, so each sentence becomes a list of **tokens**, and each
# token an id. We split words with spaCy's rule-based tokenizers for German and English
# (`spacy.blank`, which needs no downloaded model). They split off punctuation and clitics
# ("man's" → "man", "'s") and keep everything else as written, capital letters included.
#
# The paper used subword units instead (byte-pair encoding, its section 5.1), which section 4 of
# this chapter builds. We start with words because they are the simplest thing that works, and
# their one weakness, words never seen in training, is instructive. Chapter 7 trains on words; the
# lab notebook (the appendix) tells how words and subwords compared over an hour of training.


# %%
@functools.cache
def _spacy(language: str) -> spacy.language.Language:
    return spacy.blank(language)


def tokenize(sentences: Sequence[str], language: str) -> list[list[str]]:
    """Split each sentence into spaCy tokens (dropping runs of whitespace)."""
    tokenizer = _spacy(language).tokenizer
    return [[t.text for t in doc if not t.is_space] for doc in tokenizer.pipe(sentences)]


# %% tags=["active-ipynb"] slideshow={"slide_type": "-"}
# tokenize(["Ein Mann in einem blauen T-Shirt schläft."], "de") + tokenize(
#     ["A man's dog isn't \"small\"."], "en"
# )

# %% [markdown] slideshow={"slide_type": "slide"}
# The other direction, **detokenization**, matters for scoring. The scorer, sacreBLEU (chapter
# 6), compares *text*: it applies its own standard tokenization to both the output and the
# reference. If we scored our token lists joined by spaces, "t - shirt" would not match the
# reference's "t-shirt", and the score would be lower than the translation deserves. So the output
# is first glued back into ordinary text. Punctuation and clitics get no space before them, hyphens
# are joined to their words, and quotes attach to what they enclose. The check below measures how
# often `detokenize(tokenize(s)) == s` on the validation references.


# %%
_NO_SPACE_BEFORE = re.compile(r" ([.,!?;:%)\]}]|'s|'re|'ve|'m|'ll|'d|n't|')(?=\s|$)", re.IGNORECASE)
_NO_SPACE_AFTER = re.compile(r"([(\[{$]) ")
_HYPHEN = re.compile(r"(?<=\S) - (?=\S)")


def detokenize(tokens: Sequence[str]) -> str:
    """English tokens -> text as a person would write it (the inverse of `tokenize`, mostly)."""
    text = " ".join(tokens)
    text = _HYPHEN.sub("-", text)
    text = _NO_SPACE_AFTER.sub(r"\1", text)
    text = _NO_SPACE_BEFORE.sub(r"\1", text)
    # Straight double quotes alternate between opening (attach right) and closing (attach left).
    pieces = text.split(' " ')
    if len(pieces) > 1:
        rebuilt, opening = pieces[0], True
        for piece in pieces[1:]:
            rebuilt += (' "' if opening else '" ') + piece
            opening = not opening
        text = rebuilt
    return text


# %% tags=["active-ipynb"] slideshow={"slide_type": "-"}
# references = [english for _, english in splits["val"]]
# tokenized = tokenize(references, "en")
# round_trip = [detokenize(tokens) == text for tokens, text in zip(tokenized, references)]
# print(
#     f"detokenize(tokenize(s)) == s for {sum(round_trip)} of {len(round_trip)} validation references"
# )

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 3. Word vocabularies and their unknown words
#
# A **vocabulary** maps tokens to ids. It is built from the training split only. A vocabulary
# that peeked at the test set, as the Annotated Transformer's 2022 revision did, quietly gives
# the model a list of the test's words.
#
# Words seen fewer than `min_freq` times in training become `<unk>`, the unknown word. With
# `min_freq = 2`, a word seen once is treated as unknown. That also teaches the model what to do
# with `<unk>`, since it meets it in training. The special tokens come first, and their ids come
# from the vocabulary object, never from constants scattered in the code.
#
# A vocabulary is part of a trained model as much as its weights: the same id must mean the same
# word in training and in translation. So it is saved next to the checkpoint with the settings
# that built it (language, `min_freq`, the training data), and loading refuses a file built
# differently. The function `read_vocabulary_file` in `annotated/base/files.py` reads and checks
# such a file. Its partner `save_vocabularies` in `annotated/training/finish.py` puts a corpus's
# vocabularies in a run folder.
#
# Both kinds of vocabulary in this chapter, words here and subwords below, offer the same small
# interface, `Vocabulary`:
#
# | method | what it does |
# |---|---|
# | `split` | cuts texts into tokens |
# | `encode`, `decode` | map tokens to ids, and ids to tokens |
# | `join` | glues tokens into text |
# | `encode_texts`, `decode_texts` | do the whole trip, from texts to ids and back |
#
# Chapter 6's translator is written against that interface only, so one translator serves both.
# One more attribute, `can_copy_unknowns`, says whether the vocabulary has an `<unk>` worth
# replacing (chapter 6).


# %%
SPECIALS = ("<unk>", "<pad>", "<s>", "</s>")


class Vocabulary:
    """What every vocabulary offers: text <-> tokens <-> ids, its specials, how it was built."""

    settings: dict
    can_copy_unknowns: bool  # can it write <unk>, so that copying a source word may help?

    def split(self, texts: Sequence[str]) -> list[list[str]]:
        """The tokens of each text."""
        raise NotImplementedError

    def join(self, tokens: Sequence[str]) -> str:
        """Tokens -> text (the inverse of split, as far as the vocabulary allows)."""
        raise NotImplementedError

    def encode(self, tokens: Sequence[str]) -> list[int]:
        raise NotImplementedError

    def decode(self, ids: Sequence[int]) -> list[str]:
        raise NotImplementedError

    def encode_texts(self, texts: Sequence[str]) -> list[list[int]]:
        """The ids of each text."""
        return [self.encode(tokens) for tokens in self.split(texts)]

    def decode_texts(self, ids: Sequence[Sequence[int]]) -> list[str]:
        """The text of each id list."""
        return [self.join(self.decode(row)) for row in ids]

    def labels(self, ids: Sequence[int]) -> list[str]:
        """The token of each id, for display."""
        return self.decode(ids)


@dataclass(frozen=True, eq=True)
class Vocab(Vocabulary):
    """Words <-> ids for one language (spaCy tokens); `settings` records how it was built."""

    tokens: tuple[str, ...]
    settings: dict
    can_copy_unknowns = True

    def __post_init__(self) -> None:
        if self.tokens[: len(SPECIALS)] != SPECIALS:
            raise ValueError(f"a vocabulary must start with the specials {SPECIALS}")
        object.__setattr__(self, "_ids", {token: i for i, token in enumerate(self.tokens)})

    @classmethod
    def build(cls, sentences: Sequence[Sequence[str]], min_freq: int, **settings) -> Vocab:
        """The specials, then every token seen at least min_freq times (most frequent first)."""
        if min_freq < 1:
            raise ValueError(f"min_freq must be at least 1, got {min_freq}")
        counts = Counter(token for sentence in sentences for token in sentence)
        # Most frequent first, ties alphabetical: the same data always gives the same ids.
        kept = sorted(
            (t for t, n in counts.items() if n >= min_freq), key=lambda t: (-counts[t], t)
        )
        return cls(
            SPECIALS + tuple(t for t in kept if t not in SPECIALS),
            {"min_freq": min_freq, **settings},
        )

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def unk(self) -> int:
        return self._ids["<unk>"]

    @property
    def specials(self) -> SpecialTokens:
        return SpecialTokens(pad=self._ids["<pad>"], bos=self._ids["<s>"], eos=self._ids["</s>"])

    def split(self, texts: Sequence[str]) -> list[list[str]]:
        """spaCy's tokens of each text, in the vocabulary's language."""
        if "language" not in self.settings:
            raise ValueError(
                "this vocabulary was built without a language, so it cannot split text: "
                "build it with language='de' or 'en' (Vocab.build(..., language=...))"
            )
        return tokenize(texts, self.settings["language"])

    def join(self, tokens: Sequence[str]) -> str:
        """Detokenized text (English rules; a German output would keep a few extra spaces)."""
        return detokenize(tokens)

    def encode(self, tokens: Sequence[str]) -> list[int]:
        """Tokens -> ids, unknown tokens -> <unk>."""
        return [self._ids.get(token, self.unk) for token in tokens]

    def decode(self, ids: Sequence[int]) -> list[str]:
        """Ids -> tokens."""
        return [self.tokens[i] for i in ids]

    def save(self, path: str | Path) -> None:
        """Write the tokens and settings as JSON, atomically."""
        with atomic_write(path, "w", encoding="utf-8") as handle:
            json.dump(
                {"settings": self.settings, "tokens": list(self.tokens)}, handle, ensure_ascii=False
            )

    @classmethod
    def load(cls, path: str | Path, expected_settings: dict | None = None) -> Vocab:
        """Read a saved vocabulary, refusing one built with other settings than expected."""
        data = read_vocabulary_file(path, "tokens", expected_settings)
        return cls(tuple(data["tokens"]), data["settings"])


# %% [markdown] slideshow={"slide_type": "slide"}
# ## 4. Subwords: a vocabulary with no unknown words
#
# A word vocabulary has a blind spot, and Multi30k's test set finds it. Names, numbers, rare
# nouns and above all German compounds are words the training split has seen once or never: the
# compound "Dschungellandschaft" (jungle landscape), say, or the verb form "anstarrt" (stares at).
# With `min_freq = 2`, about a third of the German test sentences contain a word the encoder can
# only read as `<unk>`. About one English reference in five contains a word the decoder cannot
# write at all. Section 5 counts them.
#
# The paper's remedy (its section 5.1) is **byte-pair encoding**, or BPE (Sennrich et al., 2016).
# It builds the vocabulary from the training text in three steps:
#
# 1. start from single characters;
# 2. find the pair of neighbouring symbols that occurs most often, and make it a new symbol;
# 3. repeat step 2 until the vocabulary has the size you asked for.
#
# A frequent word ends up as one symbol, while a rare one is spelled with a few frequent pieces. So
# no word is ever unknown. Where the pieces follow a word's parts, they carry meaning the model has
# already learned. They need not, though: BPE merges what is frequent, not what means something.
# Section 5 prints how a vocabulary of 8,000 pieces spells "anstarrt", and shows both cases.
#
# The vocabulary is **shared** by the two languages: it is learned from the German and the English
# training sentences together. The two languages use one alphabet, and names, numbers and many
# loanwords are written alike in both. So one vocabulary lets the model copy such words symbol by
# symbol. It also lets the source embedding, the target embedding and the output layer be one
# matrix (the paper's section 3.4, chapter 2's `share_embeddings=True`).
#
# The class `Subwords` learns such a vocabulary with the `sentencepiece` library (Kudo and
# Richardson, 2018) in BPE mode. It reads raw text, not spaCy's tokens, and marks where each word
# starts with `▁`. So decoding needs no detokenizer: join the pieces, turn `▁` back into spaces,
# and the text is back. The round trip is nearly always exact. The exception: sentencepiece reads a
# run of spaces as one, so the few dozen training texts with a doubled space come back with a
# single one.
#
# Two settings keep the text as written. Unicode normalization is switched off, since it would
# rewrite "…" as "...", and the model should learn to write what the references contain. With
# `byte_fallback`, a character that never made it into the vocabulary is spelled as its UTF-8
# bytes rather than `<unk>`. The specials get `Vocab`'s ids. Like a `Vocab`, a `Subwords` is saved
# with the settings that built it and refused when they differ.
#
# Chapter 7 trains on words: its configurations set `vocab_size=None`. The subword vocabulary of
# this chapter has 8,000 pieces (`vocab_size=8000`), the size chapter 7's recipe search tried
# against words. Chapter 8 uses the same class on WMT, where a word vocabulary is not an option.


# %%
class Subwords(Vocabulary):
    """A shared sentencepiece BPE vocabulary, with the settings that built it."""

    can_copy_unknowns = False  # with byte fallback it never writes <unk>

    def __init__(self, model: bytes, settings: dict) -> None:
        self.model, self.settings = model, settings
        self.processor = spm.SentencePieceProcessor(model_proto=model)
        self.specials = SpecialTokens(
            pad=self.processor.pad_id(), bos=self.processor.bos_id(), eos=self.processor.eos_id()
        )

    @classmethod
    def build(cls, texts: Sequence[str], vocab_size: int, **settings) -> Subwords:
        """Learn a BPE vocabulary of `vocab_size` symbols from `texts` (both languages)."""
        model = io.BytesIO()
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(texts),
            model_writer=model,
            model_type="bpe",
            vocab_size=vocab_size,
            character_coverage=0.9999,
            byte_fallback=True,
            normalization_rule_name="identity",  # keep the characters as written ("…" stays)
            unk_id=SPECIALS.index("<unk>"),
            pad_id=SPECIALS.index("<pad>"),
            bos_id=SPECIALS.index("<s>"),
            eos_id=SPECIALS.index("</s>"),
            input_sentence_size=2_000_000,  # a random sample of the full data is plenty
            shuffle_input_sentence=True,
            num_threads=1,  # one thread: the same vocabulary on every machine
            minloglevel=2,
        )
        return cls(model.getvalue(), {"vocab_size": vocab_size, **settings})

    def __len__(self) -> int:
        return self.processor.get_piece_size()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Subwords) and (self.model, self.settings) == (
            other.model,
            other.settings,
        )

    @property
    def unk(self) -> int:
        return self.processor.unk_id()

    def split(self, texts: Sequence[str]) -> list[list[str]]:
        """The pieces of each text (`▁` marks where a word starts)."""
        return self.processor.encode(list(texts), out_type=str)

    def join(self, tokens: Sequence[str]) -> str:
        """Pieces -> text: byte pieces put back together into their characters (a run of spaces
        in the original came back as one)."""
        return self.processor.decode_pieces(list(tokens))

    def encode(self, tokens: Sequence[str]) -> list[int]:
        return [self.processor.piece_to_id(piece) for piece in tokens]

    def decode(self, ids: Sequence[int]) -> list[str]:
        return [self.processor.id_to_piece(i) for i in ids]

    def encode_texts(self, texts: Sequence[str]) -> list[list[int]]:
        return self.processor.encode(list(texts))  # the same ids, in one call

    def decode_texts(self, ids: Sequence[Sequence[int]]) -> list[str]:
        return self.processor.decode([list(row) for row in ids])

    def save(self, path: str | Path) -> None:
        """Write the model and its settings, atomically, as one JSON file."""
        data = {"settings": self.settings, "model": self.model.hex()}
        with atomic_write(path, "w", encoding="utf-8") as handle:
            json.dump(data, handle)

    @classmethod
    def load(cls, path: str | Path, expected_settings: dict | None = None) -> Subwords:
        """Read a saved vocabulary, refusing one built with other settings than expected."""
        data = read_vocabulary_file(path, "model", expected_settings)
        return cls(bytes.fromhex(data["model"]), data["settings"])


# %% [markdown] slideshow={"slide_type": "slide"}
# ## 5. The corpus, encoded
#
# `load_multi30k` reads the splits and encodes them with one of the two kinds of vocabulary. The
# default (`vocab_size=None`) is a word `Vocab` per language; otherwise it is one shared `Subwords`
# of `vocab_size` symbols. Either way the vocabulary is learned from the full training split. It is
# loaded instead of rebuilt when a run folder already holds one. (Chapter 7's smoke profile trains
# on a subset, but its vocabulary is the real one.) Sources end with `</s>`, so the encoder sees
# where the sentence stops.
#
# A `Corpus` holds the result: the raw text of each split, its ids, and the vocabularies. Chapter 8
# builds one for WMT with `subword_corpus`.


# %%
@dataclass
class Corpus:
    """Encoded splits of a parallel corpus and their vocabularies (chapter 8 uses it for WMT)."""

    src_vocab: Vocabulary
    tgt_vocab: Vocabulary  # the same object as src_vocab when it is a shared Subwords
    raw: dict[str, list[tuple[str, str]]]  # split -> (source, target) text pairs
    ids: dict[str, list[tuple[list[int], list[int]]]]  # split -> (source ids, target ids)


MULTI30K_SUBWORDS = {"data": "multi30k train, German and English", "model": "bpe"}


def vocab_settings(language: str, min_freq: int) -> dict:
    return {
        "language": language,
        "min_freq": min_freq,
        "built from": "multi30k train (29000 pairs)",
    }


def load_multi30k(
    vocab_size: int | None = None,
    min_freq: int = 2,
    vocab_dir: str | Path | None = None,
    splits: Sequence[str] = ("train", "val", "test_2016_flickr"),
) -> Corpus:
    """Read and encode Multi30k's splits with word vocabularies (or `vocab_size` shared subwords).

    The vocabulary is built from the train split, or loaded from `vocab_dir` when saved there.
    """
    raw = {split: read_multi30k(split) for split in splits}
    if vocab_size is None:
        return word_corpus(raw, min_freq, vocab_dir)
    path = None if vocab_dir is None else Path(vocab_dir) / "subwords.json"
    return subword_corpus(raw, vocab_size, MULTI30K_SUBWORDS, path)


def subword_corpus(
    raw: dict[str, list[tuple[str, str]]], vocab_size: int, settings: dict, path: Path | None
) -> Corpus:
    """One Subwords for both sides, learned from raw["train"] (or loaded from path), and the ids."""
    if path is not None and path.exists():
        subwords = Subwords.load(path, {"vocab_size": vocab_size, **settings})
    elif "train" not in raw:
        raise ValueError("building a vocabulary needs the train split")
    else:
        subwords = Subwords.build(
            [text for pair in raw["train"] for text in pair], vocab_size, **settings
        )
    eos = subwords.specials.eos
    ids = {
        split: [
            (source + [eos], target)
            for source, target in zip(
                subwords.encode_texts([s for s, _ in pairs]),
                subwords.encode_texts([t for _, t in pairs]),
                strict=True,
            )
        ]
        for split, pairs in raw.items()
    }
    return Corpus(subwords, subwords, raw, ids)


def word_corpus(
    raw: dict[str, list[tuple[str, str]]], min_freq: int, vocab_dir: str | Path | None
) -> Corpus:
    """spaCy tokens and a Vocab per language (built from raw["train"] or loaded), and the ids."""
    tokens = {
        split: (tokenize([de for de, _ in pairs], "de"), tokenize([en for _, en in pairs], "en"))
        for split, pairs in raw.items()
    }
    vocabs = []
    for index, language in enumerate(("de", "en")):
        settings = vocab_settings(language, min_freq)
        path = None if vocab_dir is None else Path(vocab_dir) / f"vocab.{language}.json"
        if path is not None and path.exists():
            vocabs.append(Vocab.load(path, settings))
            continue
        if "train" not in tokens:
            raise ValueError("building a vocabulary needs the train split")
        vocabs.append(Vocab.build(tokens["train"][index], **settings))
    src_vocab, tgt_vocab = vocabs
    ids = {
        split: [
            (src_vocab.encode(s) + [src_vocab.specials.eos], tgt_vocab.encode(t))
            for s, t in zip(*pair_tokens, strict=True)
        ]
        for split, pair_tokens in tokens.items()
    }
    return Corpus(src_vocab, tgt_vocab, raw, ids)


# %% tags=["active-ipynb"] slideshow={"slide_type": "-"}
# corpus = load_multi30k()  # words, min_freq 2
# subwords = load_multi30k(vocab_size=8000)  # 8,000 shared subwords, to compare
# pd.concat({"words": vocab_table(corpus), "subwords": vocab_table(subwords)})

# %% [markdown]
# The word vocabularies read a few percent of the tokens as `<unk>`, more on the German side, and
# the subwords none. A few percent sounds small, but the losses are not spread evenly. They fall on
# the rare words that carry a sentence's specific meaning, and many sentences have one. Counted by
# sentence on the test set:

# %% tags=["active-ipynb"] slideshow={"slide_type": "slide"}
# for index, side in enumerate(("German sources", "English references")):
#     vocab, pairs = (corpus.src_vocab, corpus.tgt_vocab)[index], corpus.ids["test_2016_flickr"]
#     hit = sum(vocab.unk in pair[index] for pair in pairs)
#     print(
#         f"{side} with a word outside the vocabulary: "
#         f"{hit} of {len(pairs)} ({100 * hit / len(pairs):.0f}%)"
#     )

# %% [markdown]
# The first such test sentence, as each vocabulary encodes it:

# %% tags=["active-ipynb"] slideshow={"slide_type": "-"}
# first = next(
#     i for i, (s, _) in enumerate(corpus.ids["test_2016_flickr"]) if corpus.src_vocab.unk in s
# )
# print("words:   ", " ".join(corpus.src_vocab.labels(corpus.ids["test_2016_flickr"][first][0])))
# print("subwords:", " ".join(subwords.src_vocab.labels(subwords.ids["test_2016_flickr"][first][0])))

# %% [markdown]
# The word vocabulary lacks the verb form "anstarrt" (stares at), so it reads `<unk>` there.
# The subwords spell it from four pieces, `▁an`, `st`, `ar` and `rt`, and show both sides of BPE.
# The first piece is a real part of the verb: *an* is the prefix of *anstarren*, "to stare at". The
# other three cut the stem *starrt* into pieces that mean nothing by themselves. The model has to
# learn from context what they spell.
#
# Targets get `<s>` and `</s>` when batched. One training pair as the model sees it:

# %% tags=["active-ipynb"] slideshow={"slide_type": "slide"}
# source_ids, target_ids = corpus.ids["train"][0]
# pd.DataFrame(
#     {
#         "German tokens": [" ".join(corpus.src_vocab.labels(source_ids))],
#         "source ids": [source_ids],
#         "English tokens": [" ".join(corpus.tgt_vocab.labels(target_ids))],
#         "target ids": [target_ids],
#     }
# ).T


# %% [markdown] slideshow={"slide_type": "slide"}
# ## 6. Batches by token count (section 5.1)
#
# The paper groups sentence pairs "by approximate sequence length" so that each batch holds about
# 25,000 source and 25,000 target tokens. Two ideas are packed in there. A batch is measured in
# **tokens**, not sentences, because the cost of a step and the amount of signal in it both grow
# with tokens. And sentences of **similar length** go together, because a batch is a rectangle:
# every sentence is padded to the longest one, and the padding is computed and thrown away.
#
# `token_batches` sorts all pairs by length: target, then source, with ties broken at random. It
# then cuts the sorted list into consecutive batches whose padded size stays within `max_tokens`
# on both sides.


# %%
def token_batches(
    pairs: Sequence[tuple[list[int], list[int]]], max_tokens: int, seed: int = 0
) -> list[list[int]]:
    """Indices of `pairs`, grouped by length into batches of at most max_tokens padded tokens
    a side."""
    rng = random.Random(seed)
    jitter = [rng.random() for _ in pairs]
    order = sorted(range(len(pairs)), key=lambda i: (len(pairs[i][1]), len(pairs[i][0]), jitter[i]))
    batches, current, longest_src, longest_tgt = [], [], 0, 0
    for i in order:
        src_len, tgt_len = len(pairs[i][0]), len(pairs[i][1]) + 1  # +1: <s> or </s> around it
        if max(src_len, tgt_len) > max_tokens:
            raise ValueError(f"pair {i} is longer than max_tokens={max_tokens}: raise the budget")
        grow_src, grow_tgt = max(longest_src, src_len), max(longest_tgt, tgt_len)
        if current and (len(current) + 1) * max(grow_src, grow_tgt) > max_tokens:
            batches.append(current)
            current, grow_src, grow_tgt = [], src_len, tgt_len
        current.append(i)
        longest_src, longest_tgt = grow_src, grow_tgt
    if current:
        batches.append(current)
    return batches


def make_batch(pairs: Sequence[tuple[list[int], list[int]]], specials: SpecialTokens) -> Batch:
    """Chapter 3's Batch from (source ids, target ids) pairs: pad, and wrap targets in
    <s> ... </s>."""
    src = pad_sequences([s for s, _ in pairs], specials.pad)
    tgt = pad_sequences([[specials.bos, *t, specials.eos] for _, t in pairs], specials.pad)
    return Batch.build(src, tgt, specials.pad)


def padding_fraction(
    pairs: Sequence[tuple[list[int], list[int]]], batches: Sequence[Sequence[int]]
) -> float:
    """Share of the source and target slots in the batches that are padding."""
    slots = real = 0
    for batch in batches:
        src = [len(pairs[i][0]) for i in batch]
        tgt = [len(pairs[i][1]) + 1 for i in batch]
        slots += len(batch) * (max(src) + max(tgt))
        real += sum(src) + sum(tgt)
    return 1 - real / slots


# %% tags=["active-ipynb"] slideshow={"slide_type": "-"}
# batching_table(corpus.ids["train"], max_tokens=3000)  # chapter 7's budget

# %% [markdown]
# Sorting by length wastes almost nothing. Random batches of the same average size waste more
# than half of every step. Padding every sentence to a fixed 72 tokens, as the Annotated
# Transformer's 2022 revision does, spends four fifths of the computer's work on padding.
#
# The batches themselves hold very different numbers of sentences: many short ones, or a few long
# ones. Their padded sizes all stay within the budget:

# %% tags=["active-ipynb"] slideshow={"slide_type": "slide"}
# batch_sizes_table(corpus.ids["train"], token_batches(corpus.ids["train"], max_tokens=3000))


# %% [markdown] slideshow={"slide_type": "slide"}
# ## 7. Which batches each step trains on
#
# The batches are cut once and fixed for the whole run. Each epoch visits them in a new random
# order, drawn from the seed and the epoch number alone. A step takes the next `per_step` of them
# (several when gradients are accumulated, chapter 3). So the batches of step $s$ are a pure
# function of $s$: a run stopped and resumed at step $s$ sees exactly what it would have seen.
#
# Chapter 8 trains one model with several processes at once (data parallelism, explained there).
# Each process holds a copy of the model and takes its share of every step's batches. For that the
# rule has two more inputs: `world`, the number of processes, and `rank`, this process's number,
# from 0 to `world` - 1. Every process computes the same group of batches for step $s$. It keeps
# every `world`-th batch of the group, starting at its own `rank`. With one process (the defaults,
# `world` = 1 and `rank` = 0) it keeps the whole group.
#
# `BatchPlan` is that rule. Every translation trainer in the book asks it for its batches: chapter
# 7's Multi30k run, and chapter 8's WMT run, its table of steps and its check that several
# processes train exactly like one.


# %%
def step_shard(
    n_batches: int, step: int, per_step: int, seed: int, rank: int = 0, world: int = 1
) -> list[int]:
    """The batches (indices into the plan) that process `rank` of `world` trains on at `step`.

    Each epoch visits the plan's batches in an order fixed by the seed and the epoch; a step takes
    the next `per_step` of them (a last incomplete group is skipped), and every process computes
    the same group and keeps every world-th one.
    """
    steps_per_epoch = n_batches // per_step
    epoch, index = divmod(step, steps_per_epoch)
    order = list(range(n_batches))
    random.Random(seed * 1_000_003 + epoch).shuffle(order)
    return order[index * per_step : (index + 1) * per_step][rank::world]


@dataclass(frozen=True)
class BatchPlan:
    """A training set cut into token batches, and the batches each process trains on at each
    step."""

    pairs: Sequence[tuple[list[int], list[int]]]
    batches: list[list[int]]  # indices into pairs
    per_step: int  # batches in one optimizer step, over all processes
    seed: int

    @classmethod
    def build(
        cls,
        pairs: Sequence[tuple[list[int], list[int]]],
        max_tokens: int,
        accumulate: int = 1,
        world: int = 1,
        seed: int = 0,
    ) -> BatchPlan:
        """Batches of at most max_tokens; a step takes accumulate batches on each of world
        processes."""
        plan = cls(pairs, token_batches(pairs, max_tokens, seed), accumulate * world, seed)
        if plan.steps_per_epoch == 0:
            raise ValueError(
                f"one step needs {plan.per_step} batches but the training data make only "
                f"{len(plan.batches)}: lower accumulate or max_tokens"
            )
        return plan

    @property
    def steps_per_epoch(self) -> int:
        return len(self.batches) // self.per_step

    def step(
        self, step: int, specials: SpecialTokens, rank: int = 0, world: int = 1
    ) -> list[Batch]:
        """The batches process `rank` of `world` trains on at optimizer step `step` (0-based)."""
        chosen = step_shard(len(self.batches), step, self.per_step, self.seed, rank, world)
        return [make_batch([self.pairs[i] for i in self.batches[b]], specials) for b in chosen]


# %% tags=["active-ipynb"] slideshow={"slide_type": "-"}
# plan = BatchPlan.build(corpus.ids["train"], max_tokens=3000, accumulate=1)
# first = plan.step(0, corpus.tgt_vocab.specials)[0]
# print(f"{len(plan.batches)} batches, {plan.steps_per_epoch} steps an epoch")
# print(
#     f"step 0 trains on a batch of {first.src.size(0)} sentences, "
#     f"padded to {tuple(first.tgt_in.shape)} target positions"
# )
# again = plan.step(0, corpus.tgt_vocab.specials)[0]
# print("the same batch when asked again:", again.src.equal(first.src))

# %% [markdown] slideshow={"slide_type": "slide"}
# ## Exercises
#
# **5.1 Predict.** If the word vocabularies were built with `min_freq=1` instead of 2, would the
# `<unk>` rate of the *training* split change? Of the test split? Which way, and why is the
# training split's answer a trap?
#
# <details><summary>Answer</summary>
#
# The training split would have no `<unk>` at all: every word it contains is in a vocabulary built
# from it. The test split's rate falls a little (words seen once in training now count). The trap:
# the model would then never see `<unk>` during training, yet meet it at test time, without having
# learned what to do with it. With `min_freq=2`, the words seen once teach it.
#
# </details>
#
# **5.2 Implement** `my_vocabulary(sentences, min_freq)`: the tuple of tokens of a word vocabulary
# built from tokenized sentences, as `Vocab.build` orders them (the four specials, then the tokens
# seen at least `min_freq` times, most frequent first, ties in alphabetical order).
#
# **5.3 Implement** `my_padding_fraction(pairs, batches)`: the share of the source and target
# slots in the batches that are padding. Each batch is a list of indices into `pairs`. A target is
# one token longer than its ids, since it gets `<s>` or `</s>` around it.
#
# **5.4 Modify.** Rebuild the shared subword vocabulary with 2,000 and with 16,000 symbols. How do
# the subwords per word of the test set change (the subword ids of the test sentences against their
# words), and what does that do to the number of sentences a batch holds?
#
# <details><summary>Answer</summary>
#
# Fewer symbols cut words into more pieces, so sentences get longer in tokens: a token budget then
# holds fewer sentences, and the model has to assemble more words from pieces. More symbols keep
# more words whole, at the price of rarer symbols, each seen fewer times in training.
#
# </details>
#
# The checks' cases and the mistakes they recognise are in `annotated/exercises/ch05_text.py`.

# %% tags=["active-ipynb"]
# from annotated.exercises import check  # runs your function against the book's
# from annotated.exercises.ch05_text import exercise_5_2, exercise_5_3  # cases and mistakes

# %% tags=["active-ipynb", "hide-input"]
# def my_vocabulary(sentences, min_freq):
#     ### BEGIN SOLUTION
#     counts = Counter(token for sentence in sentences for token in sentence)
#     kept = sorted((t for t in counts if counts[t] >= min_freq), key=lambda t: (-counts[t], t))
#     return SPECIALS + tuple(kept)
#     ### END SOLUTION
#
#
# check(exercise_5_2, my_vocabulary)

# %% tags=["active-ipynb", "hide-input"]
# def my_padding_fraction(pairs, batches):
#     ### BEGIN SOLUTION
#     slots = real = 0
#     for batch in batches:
#         for lengths in ([len(pairs[i][0]) for i in batch], [len(pairs[i][1]) + 1 for i in batch]):
#             slots, real = slots + len(batch) * max(lengths), real + sum(lengths)
#     return 1 - real / slots
#     ### END SOLUTION
#
#
# check(exercise_5_3, my_padding_fraction)
