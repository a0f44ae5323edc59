"""A toy translation task for the tests of the run layer and the commands that read its folders:
a few German-English pairs, their word vocabularies, a tiny model's checkpoint state, a run
folder as training leaves it (vocabularies beside an untrained averaged model), a corpus and a
run configuration that train in seconds, and a run in progress of them, as a stage takes it."""

import dataclasses
from pathlib import Path

import torch

from annotated.ch02_model import ModelConfig, make_model
from annotated.ch05_text import BatchPlan, Corpus, Vocab, tokenize, vocab_settings, word_corpus
from annotated.ch06_decoding import DecodeConfig
from annotated.training.config import RunConfig, new_model, shared_specials
from annotated.training.folder import RunFolder, RunInProgress

GERMAN = ["Ein Hund rennt.", "Zwei Männer sitzen auf einer Bank.", "Eine Frau liest ein Buch."]
ENGLISH = ["A dog runs.", "Two men sit on a bench.", "A woman reads a book."]
# More pairs for a corpus to train on: the three above, and a few made of their words.
TRAIN_PAIRS = [
    *zip(GERMAN, ENGLISH, strict=True),
    ("Ein Mann liest.", "A man reads."),
    ("Zwei Hunde rennen.", "Two dogs run."),
    ("Eine Frau sitzt auf einer Bank.", "A woman sits on a bench."),
    ("Ein Mann rennt.", "A man runs."),
    ("Zwei Frauen lesen ein Buch.", "Two women read a book."),
    ("Ein Hund sitzt.", "A dog sits."),
    ("Eine Frau rennt.", "A woman runs."),
]


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


def toy_corpus() -> Corpus:
    """TRAIN_PAIRS with word vocabularies (min_freq 1); the first three pairs are the validation
    and test sets too."""
    raw = {"train": TRAIN_PAIRS, "val": TRAIN_PAIRS[:3], "test_2016_flickr": TRAIN_PAIRS[:3]}
    return word_corpus(raw, 1, None)


def toy_config(**changes) -> RunConfig:
    """A run of a one-layer model of width 16 on `toy_corpus`: a few steps, greedy decoding."""
    settings = dict(
        vocab_size=None,
        min_freq=1,
        max_tokens=40,
        N=1,
        d_model=16,
        d_ff=32,
        h=2,
        warmup=2,
        steps=6,
        evals_per_epoch=1,
        average_last=2,
        precision="fp32",
        decoding=DecodeConfig(beam=2, alpha=0.6, extra_length=5),
    )
    return RunConfig(**{**settings, **changes})


def run_in_progress(
    config: RunConfig, folder: Path, corpus: Corpus, batches=None, writes: bool = True
) -> RunInProgress:
    """The run of `config` in `folder` as `train_run` hands it to each stage: its batches (or
    `batches`, a stand-in with their `step` and `steps_per_epoch`), a fresh model and the recipe's
    schedule, in a folder this process writes (or not, as a process other than the first)."""
    if batches is None:
        pairs = corpus.ids["train"][: config.train_pairs]
        batches = BatchPlan.build(pairs, config.max_tokens, config.accumulate, 1, config.seed)
    model = new_model(config, corpus)
    recipe = config.schedule(batches.steps_per_epoch)
    specials = shared_specials(corpus)
    files = RunFolder(folder, writes=writes)
    return RunInProgress(config, files, corpus, batches, model, recipe, specials, 0, 1, False)
