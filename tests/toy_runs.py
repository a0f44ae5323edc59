"""A toy translation task for the tests of the run layer and the commands that read its folders:
three German-English pairs, their word vocabularies, a tiny model's checkpoint state, and a run
folder as training leaves it (vocabularies beside an untrained averaged model)."""

import dataclasses
from pathlib import Path

import torch

from annotated.ch02_model import ModelConfig, make_model
from annotated.ch05_text import Vocab, tokenize, vocab_settings

GERMAN = ["Ein Hund rennt.", "Zwei Männer sitzen auf einer Bank.", "Eine Frau liest ein Buch."]
ENGLISH = ["A dog runs.", "Two men sit on a bench.", "A woman reads a book."]


def word_vocab(sentences: list[str], language: str) -> Vocab:
    """A word vocabulary of every token in `sentences` (min_freq 1), with chapter 5's settings."""
    settings = {k: v for k, v in vocab_settings(language, 1).items() if k != "min_freq"}
    return Vocab.build(tokenize(sentences, language), 1, **settings)


def model_state(src: int, tgt: int, seed: int = 0) -> dict:
    """What a checkpoint holds at least: a tiny model's weights (seeded) and its ModelConfig."""
    torch.manual_seed(seed)
    config = ModelConfig(src, tgt, N=1, d_model=16, d_ff=32, h=2, p_drop=0.0)
    return {"model": make_model(config).state_dict(), "model_config": dataclasses.asdict(config)}


def write_run_folder(folder: Path, decoding: dict | None = None) -> Path:
    """`folder` as training leaves it: the word vocabularies and an (untrained) averaged model,
    with the run's decoding settings when given."""
    src, tgt = word_vocab(GERMAN, "de"), word_vocab(ENGLISH, "en")
    src.save(folder / "vocab.de.json")
    tgt.save(folder / "vocab.en.json")
    state = model_state(len(src), len(tgt))
    torch.save(
        state if decoding is None else {**state, "decoding": decoding}, folder / "averaged.pt"
    )
    return folder
