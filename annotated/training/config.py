"""A training run's configuration: `RunConfig`, its profiles, and what it makes.

Chapters 7 (Multi30k) and 8 (WMT) describe a run with one `RunConfig`: data, model, schedule,
budget and decoding, with the paper's base model and recipe as defaults. A chapter names its
profiles (`pick_profile` chooses one, by $ANNOTATED_PROFILE in CI and on a class's server;
`smoke_version` shrinks one for CI; $ANNOTATED_SENTENCES caps the sentences it scores). From a configuration come chapter 2's `ModelConfig` and the
run's freshly initialized model (`new_model`), and its `Schedule`: the steps, learning rate,
evaluations and averaging it trains with. `RunConfig.schedule` is the recipe's; a time budget plans
another (`annotated/training/plan.py`), and the configuration itself is never rewritten. Chapter
3's `TrainConfig` is made by the configuration for a schedule (`RunConfig.train_config`): the
schedule's steps and rates, the run's other settings. Each setting is handed on by name, written
out, so that a setting renamed on either side fails where it is handed on, not silently.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

import torch

from annotated.base.files import runs_dir
from annotated.ch02_model import EncoderDecoder, ModelConfig, make_model
from annotated.ch03_training import SpecialTokens, TrainConfig, use_fast_dropout
from annotated.ch05_text import Corpus
from annotated.ch06_decoding import DecodeConfig

RUNS_DIR = runs_dir()  # the checkout's runs/, else the user's (files.runs_dir)
PROFILE_ENV = "ANNOTATED_PROFILE"
SENTENCES_ENV = "ANNOTATED_SENTENCES"


def profile_name(default: str) -> str:
    """The profile $ANNOTATED_PROFILE names ("smoke" in CI), else the chapter's `default`."""
    return os.environ.get(PROFILE_ENV) or default


def pick_profile(profiles: dict, name: str | None, default: str) -> tuple[str, RunConfig]:
    """The profile named (or by $ANNOTATED_PROFILE, else `default`) and its configuration."""
    name = name or profile_name(default)
    if name not in profiles:
        raise ValueError(f"{PROFILE_ENV}={name!r}: choose one of {sorted(profiles)}")
    return name, sentence_cap(profiles[name])


def sentence_cap(config: RunConfig) -> RunConfig:
    """`config` scoring at most the first n sentences of each split where $ANNOTATED_SENTENCES is
    n (a quick look, or a test's run of a chapter: decoding a whole split takes minutes), else
    `config` itself."""
    value = os.environ.get(SENTENCES_ENV)
    if not value:
        return config
    if not value.isdigit() or int(value) < 1:
        raise ValueError(
            f"{SENTENCES_ENV}={value!r}: give a whole number of sentences to score, such as 100, "
            "or unset it to score every sentence"
        )
    n = int(value)
    return dataclasses.replace(
        config,
        val_sentences=min(n, config.val_sentences or n),
        test_sentences=min(n, config.test_sentences or n),
    )


@dataclass(frozen=True)
class Schedule:
    """What a run trains with, in steps: the recipe's schedule (`RunConfig.schedule`), or the one
    a time budget fitted it into (`TimeBudget.schedule`)."""

    steps: int  # optimizer steps in all
    warmup: int  # equation 3's warmup steps
    lr_factor: float  # multiplies equation 3
    cooldown: int  # the rate falls linearly to 1/cooldown over the last this many steps (ch. 3)
    average_last: int  # the final model averages the last this many snapshots
    steps_per_epoch: int
    eval_every: int  # validation BLEU, a checkpoint and a snapshot every this many steps
    limit_seconds: float | None = None  # training time after which the run stops (None: never)


@dataclass(frozen=True)
class RunConfig:
    """One translation run: data, model, schedule, budget and decoding (defaults: the paper's base)."""

    # Data and vocabulary (chapter 5)
    train_pairs: int | None = None  # train on the first n pairs only (None: all)
    vocab_size: int | None = 37000  # n shared BPE subwords; None: a word vocabulary per language
    min_freq: int = 2  # word vocabularies only: rarer training words become <unk>
    max_tokens: int = 3125  # padded target tokens per micro-batch (sources held to the same)
    accumulate: int = 1  # micro-batches per optimizer step and process (chapter 3)
    # Model: chapter 2's ModelConfig settings of the same names, which `model_config` hands on
    N: int = 6
    d_model: int = 512
    d_ff: int = 2048
    h: int = 8
    d_k: int | None = None  # query/key width per head (None: d_model // h)
    d_v: int | None = None  # value width per head (None: d_model // h)
    learned_positions: bool = False  # a trained position table instead of sinusoids (Table 3, E)
    p_drop: float = 0.1
    p_drop_final: float | None = None  # dropout rising linearly to this by the last step (ch. 3)
    norm_first: bool = False  # the paper's post-norm
    fast_dropout: bool = False  # chapter 3's FastDropout: a quarter of the random draws (CPUs)
    # Schedule: chapter 3's TrainConfig settings of the same names (`train_config`), the run's length
    warmup: int = 4000
    lr_factor: float = 1.0
    eps_ls: float = 0.1
    steps: int | None = 100_000  # optimizer steps; None: `epochs` passes over the data instead
    epochs: int | None = None
    cooldown_epochs: float = 0.0  # the rate falls linearly to 1/c of its value over these epochs
    max_minutes: float | None = None  # a time budget: the schedule is planned to fit (TimeBudget)
    precision: str = "auto"  # bf16 autocast where the hardware has it (chapter 3)
    # Evaluation, averaging and decoding (chapter 6)
    evals_per_epoch: int = 2  # validation BLEU this often; also a checkpoint and a snapshot
    average_last: int = 5  # the final model averages the last this many snapshots (section 6.1)
    val_sentences: int | None = None  # score only the first n validation sentences (None: all)
    test_sentences: int | None = None  # the same for the final test scores
    decoding: DecodeConfig = DecodeConfig(beam=4, alpha=0.6)  # section 6.1
    seed: int = 0

    def __post_init__(self) -> None:
        if (self.steps is None) == (self.epochs is None):
            raise ValueError(f"give either steps or epochs, not both or neither: {self}")
        if self.max_minutes is not None and not self.max_minutes > 0:
            raise ValueError(
                f"max_minutes must be positive, or None for no budget: {self.max_minutes}"
            )

    def model_config(
        self, src_vocab: int, tgt_vocab: int, shared: bool | None = None
    ) -> ModelConfig:
        """Chapter 2's configuration for this run's model.

        One shared vocabulary shares all three embedding matrices (section 3.4); two word
        vocabularies can share only the target embedding with the output layer.
        """
        shared = self.vocab_size is not None if shared is None else shared
        return ModelConfig(
            src_vocab,
            tgt_vocab,
            tie_target_embeddings=not shared,
            share_embeddings=shared,
            max_len=512,
            N=self.N,
            d_model=self.d_model,
            d_ff=self.d_ff,
            h=self.h,
            d_k=self.d_k,
            d_v=self.d_v,
            learned_positions=self.learned_positions,
            p_drop=self.p_drop,
            norm_first=self.norm_first,
        )

    def schedule(self, steps_per_epoch: int) -> Schedule:
        """The recipe's schedule, at this many optimizer steps an epoch."""
        return Schedule(
            steps=self.steps if self.steps is not None else self.epochs * steps_per_epoch,
            warmup=self.warmup,
            lr_factor=self.lr_factor,
            cooldown=round(self.cooldown_epochs * steps_per_epoch),
            average_last=self.average_last,
            steps_per_epoch=steps_per_epoch,
            eval_every=max(1, steps_per_epoch // self.evals_per_epoch),
        )

    def train_config(self, schedule: Schedule) -> TrainConfig:
        """Chapter 3's configuration for training `schedule` (the recipe's, or a time budget's):
        its steps and rates, a checkpoint at each evaluation, and this run's other settings."""
        return TrainConfig(
            max_steps=schedule.steps,
            warmup=schedule.warmup,
            lr_factor=schedule.lr_factor,
            cooldown=schedule.cooldown,
            checkpoint_every=schedule.eval_every,
            eps_ls=self.eps_ls,
            accumulate=self.accumulate,
            precision=self.precision,
            p_drop_final=self.p_drop_final,
            seed=self.seed,
        )


def smoke_version(config: RunConfig, **changes: object) -> RunConfig:
    """A profile made small enough for CI to train in a minute through the same code.

    The model shrinks to one layer a side of width 32 with two heads (with a learning rate to
    match), it is evaluated once an epoch and decoded with a beam of two; `changes` cut the data
    and the schedule.
    """
    tiny = dict(N=1, d_model=32, d_ff=64, h=2, lr_factor=2.0, evals_per_epoch=1)
    decoding = dataclasses.replace(config.decoding, beam=2)
    return dataclasses.replace(config, **{**tiny, "decoding": decoding, **changes})


def shared_specials(corpus: Corpus) -> SpecialTokens:
    """The pad, <s> and </s> ids, which the two vocabularies must agree on."""
    specials = corpus.tgt_vocab.specials
    if specials != corpus.src_vocab.specials:
        raise ValueError("source and target vocabularies must give the specials the same ids")
    return specials


def new_model(config: RunConfig, corpus: Corpus) -> EncoderDecoder:
    """The run's freshly initialized model (seeded), sized for the corpus's vocabularies."""
    shared = corpus.src_vocab is corpus.tgt_vocab
    torch.manual_seed(config.seed)
    model = make_model(config.model_config(len(corpus.src_vocab), len(corpus.tgt_vocab), shared))
    return use_fast_dropout(model) if config.fast_dropout else model
