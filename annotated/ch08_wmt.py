# %% [markdown] slideshow={"slide_type": "slide"}
# # Chapter 8 — WMT 2014 English-German: the paper's recipe, end to end
#
# *Paper: sections 5.1 (data and batching), 5.2 (hardware and schedule), 5.3 (optimizer), 5.4
# (regularization), 6.1 (averaging, beam search, results), Tables 2 and 3; section 3.4 (shared
# embeddings).*
#
# The paper's headline numbers are 27.3 BLEU for the base model and 28.4 for the big one, on
# newstest2014 English→German (Table 2). They come out of a recipe with more parts than the model.
# Both languages share one subword vocabulary, and one weight matrix serves both embeddings and the
# output layer. A batch holds about 25,000 source and 25,000 target tokens. The learning rate follows
# the warmup schedule, the last checkpoints are averaged, and a beam search with a length penalty
# decodes.
#
# Harvard NLP's Annotated Transformer, in its 2022 revision, trained its model on a small corpus
# (Multi30k) with the warmup schedule and label smoothing. Its code has data-parallel training over
# several GPUs and gradient accumulation. It also has a function that averages models, which it never
# calls. The subword vocabulary and beam search it only described, pointing to other libraries. The
# shared embeddings it showed in a snippet it does not run. This chapter runs all of it.
#
# The paper's scale is out of reach here: the base model took 12 hours on eight P100 GPUs. What the
# chapter can do is run *the same code* at two very different sizes:
#
# * **On a laptop CPU**, on a 10,000-pair sample of the WMT data, in minutes (`make train-wmt`). The
#   result is a poor translator, honestly scored, that went through every step of the recipe.
# * **On a machine with GPUs**, on the full 4.5 million pairs, through PyTorch's
#   `DistributedDataParallel` launched by `torchrun`. Section 9 gives the command.
#
# The pieces come from the chapters before. Chapter 5 gave the subword vocabulary and the token
# batches. Chapter 6 gave the decoders, the translator and the scores, the paper's tokenized BLEU
# among them. The run machinery of `annotated/training/` is the one chapter 7 trained Multi30k with.
# What is new here is the data and the accumulation of micro-batches into one large step. So are the
# comparison with the paper's Table 2 and the scale-out to several processes.
#
# **Profiles.** One `RunConfig` decides the sizes. This notebook was executed with `sample`, the CPU
# run. CI runs `smoke`, a tiny one (`ANNOTATED_PROFILE=smoke`). `class` is the same smoke run, under
# the name a course sets for every chapter. `base` and `big` are the paper's Table 3 models on the
# full data, for GPUs.

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

import dataclasses
import datetime
import importlib
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch
from sacremoses import MosesDetokenizer

from annotated.base.checkpoints import read_checkpoint
from annotated.base.datasets import read_wmt14
from annotated.base.devices import DEVICE_ENV
from annotated.base.distributed import cuda_gpus, process_group_backend, rank_and_world
from annotated.base.machine import cpu_kind
from annotated.ch05_text import (
    BatchPlan,
    Corpus,
    padding_fraction,
    subword_corpus,
)
from annotated.ch06_decoding import tokenized_bleu
from annotated.training.config import RunConfig, pick_profile, smoke_version
from annotated.training.finish import Run, final_scores, save_vocabularies
from annotated.training.runs import train_run

# %% tags=["active-ipynb"]
# import tempfile
#
# from annotated.ch02_model import count_parameters, make_model, table3_parameter_counts
# from annotated.figures import use_book_charts
# from annotated.figures.ch07_multi30k import training_chart  # chapter 7's curves
# from annotated.training.config import RUNS_DIR
# from annotated.base.threads import use_fair_threads
#
# use_fair_threads()  # torch's threads: the CPUs this process may use (annotated/base/threads.py)
# use_book_charts()

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 1. The data (section 5.1)
#
# The paper trains English→German on the WMT 2014 training data. That is about 4.5 million sentence
# pairs from three corpora: European Parliament proceedings, sentences crawled from the web, and news
# commentary. It tunes on newstest2013 and reports newstest2014. Both are sets of news articles that
# professionals translated for WMT's yearly shared task.
#
# `annotated/base/datasets.py` reads two variants of the data. Each comes as aligned `train`, `val`
# (newstest2013) and `test` (newstest2014) files:
#
# * **`toy`** is a 10,000-pair sample of the training data, with both dev and test sets. No public
#   home serves it, so it ships with the book (`data/wmt14-toy-ende/` in a clone, package data in
#   the installed book, 1.7 MB). It is checked against its sha256 before use. Its files were
#   Moses-tokenized: punctuation was split off by spaces. They also carry XML escapes (`&apos;` for
#   `'`, `&quot;` for `"`), as many preprocessed copies of WMT do.
# * **`full`** comes from statmt.org: `prepare_wmt14` downloads the WMT 2014 archives, several
#   gigabytes, and extracts the same three splits from them. A broken download resumes where it
#   stopped. A file is renamed into place only once it is complete and checked.
#
# The two test sets differ. The full variant's test set is the full newstest2014 (3,003 sentences), the
# one `sacrebleu -t wmt14/full -l en-de` scores against. The sample's is the filtered version of 2,737
# sentences that WMT 2014 published beside it. That one is what sacreBLEU's plain `-t wmt14 -l en-de`
# means. Scores on the two are not comparable.
#
# The model should see text as a person writes it, and its output must be scored against text as a
# person writes it (chapter 6, section 5). So the sample is turned back into plain text first.
# The Moses detokenizer of sacremoses undoes both the escapes and the spacing, as the table below
# shows.


# %%
def plain_text(sentences: Sequence[str], language: str) -> list[str]:
    """Moses-tokenized, XML-escaped lines -> ordinary text (escapes undone, spacing restored)."""
    detokenizer = MosesDetokenizer(lang=language)
    return [detokenizer.detokenize(line.split()) for line in sentences]


def wmt_text(split: str, variant: str) -> list[tuple[str, str]]:
    """(English, German) plain-text pairs of one split of the "toy" or "full" data."""
    pairs = read_wmt14(split, variant)
    if variant == "full":  # the statmt files are plain text already
        return pairs
    english = plain_text([en for en, _ in pairs], "en")
    german = plain_text([de for _, de in pairs], "de")
    return list(zip(english, german, strict=True))


# %% tags=["active-ipynb"] slideshow={"slide_type": "-"}
# stored = read_wmt14("train", "toy")
# restored = wmt_text("train", "toy")
# examples = [i for i, (en, _) in enumerate(stored) if "&apos;" in en or "&quot;" in en][:3]
# pd.set_option("display.max_colwidth", None)
# pd.DataFrame(
#     {
#         "stored (Moses, escaped)": [stored[i][0] for i in examples],
#         "plain text": [restored[i][0] for i in examples],
#     }
# )

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 2. Subwords: one vocabulary for both languages (section 5.1)
#
# Chapter 5 introduced byte-pair encoding and its `Subwords` class, next to what a word vocabulary
# costs on Multi30k. On WMT a word vocabulary is not even an option. News and web text holds millions
# of distinct German word forms: compounds, inflections, names. Any list of words short enough to
# train with would leave many of them unknown. So this chapter uses `Subwords` throughout. The
# vocabulary is learned from the English and German sides of the training data together. Both
# languages share it, and so do the three embedding matrices (section 5 below).
#
# The paper's vocabulary has about 37,000 symbols. The sample run learns 8,000, because its 10,000
# sentences cannot fill more with useful pieces (section 3's table). Rare names come apart into
# frequent pieces (section 4 prints "Tymoshenko" split into five), and no piece is ever `<unk>`.


# %% [markdown] slideshow={"slide_type": "slide"}
# ## 3. The configuration: the paper's models and ours (sections 5.2–5.4, Table 3)
#
# `WMTConfig` is the run configuration of `annotated/training/config.py`, with three fields more:
# which data, the tokens of one optimizer step, and a length limit for training pairs. Its defaults
# are the paper's **base** model and recipe. The profiles change what must change.
#
# | | base (paper) | big (paper) | `sample` (this CPU) | why the sample differs |
# |---|---|---|---|---|
# | data | 4.5M pairs | 4.5M pairs | 10,000 pairs | what a CPU can do in minutes |
# | shared BPE vocabulary | ≈ 37,000 | ≈ 37,000 | 8,000 | 10,000 sentences cannot fill 37,000 useful symbols |
# | $N$, $d_\text{model}$, $d_{ff}$, $h$ | 6, 512, 2048, 8 | 6, 1024, 4096, 16 | 3, 256, 1024, 4 | chapter 7's widths; three layers a side, as chapter 7 had when this profile was set up (it has two now) |
# | $P_{drop}$, $\epsilon_{ls}$ | 0.1, 0.1 | 0.3, 0.1 | 0.1, 0.1 | as the paper |
# | tokens per step | ≈ 25,000 + 25,000 | ≈ 25,000 + 25,000 | at most 6,000 padded target tokens (about 4,500 real ones, section 6) | 25,000-token steps would not get through the warmup: the saved run's target tokens (section 10) make about 80 of them, against a warmup of 300 |
# | warmup, steps | 4,000, 100,000 | 4,000, 300,000 | 300, as many as 20 minutes hold | |
# | residual blocks | post-norm | post-norm | pre-norm | a quicker start: on Multi30k, pre-norm led post-norm until the two drew level after about 25 minutes of an hour-long run (the lab notebook's section 4), and this run is short, 436 steps |
# | checkpoints averaged | last 5 | last 20 | last 5 (fewer where a budget holds fewer evaluations: the plan says how many) | |
#
# The sample shortens the warmup because twenty minutes on a CPU hold only hundreds of steps: this
# notebook's run took 436 (section 7). With the paper's 4,000 warmup steps it would never leave the
# warmup.
#
# The run's length is a time budget, `max_minutes=20` (chapter 7 explains how a budget plans a run).
# First the run times a few steps on your machine, a *probe*. Then it plans as many of the paper's
# 100,000 steps as fit into 90% of the time the probe leaves. The other tenth is a margin for steps
# slower than the probe measured. The run prints its plan before it trains. The schedule has no
# cooldown, only equation 3's slow decay. So the planned run is the paper's recipe stopped at a step
# chosen in advance, not wherever a clock ran out.


# %%
@dataclass(frozen=True)
class WMTConfig(RunConfig):
    """One WMT run: the paper's base model and recipe by default, and three WMT fields."""

    data: str = "full"  # "full" (WMT14 from statmt.org) or "toy" (the 10,000-pair sample)
    tokens_per_step: int = 25000  # target tokens per optimizer step, over all processes
    max_length: int = 250  # training pairs with a longer side (in subwords) are left out
    evals_per_epoch: int = 10
    val_sentences: int | None = 500

    def accumulation(self, processes: int = 1) -> int:
        """Micro-batches per process and step so that a step holds about tokens_per_step tokens."""
        return max(1, round(self.tokens_per_step / (self.max_tokens * processes)))


SAMPLE = WMTConfig(
    data="toy",
    vocab_size=8000,
    tokens_per_step=6000,
    max_tokens=3000,
    N=3,
    d_model=256,
    d_ff=1024,
    h=4,
    norm_first=True,
    fast_dropout=True,
    warmup=300,
    lr_factor=0.7,
    steps=100_000,  # the budget plans how many of them 20 minutes hold
    max_minutes=20.0,
    evals_per_epoch=1,
    average_last=5,
)
WMT_PROFILES = {
    "base": WMTConfig(),
    "big": WMTConfig(d_model=1024, d_ff=4096, h=16, p_drop=0.3, steps=300_000, average_last=20),
    "sample": SAMPLE,
    # A few steps in CI: the sample's recipe on a tiny model and 400 pairs, through the same code.
    "smoke": smoke_version(
        SAMPLE,
        train_pairs=400,
        tokens_per_step=600,
        max_tokens=300,
        warmup=10,
        steps=6,
        max_minutes=None,
        average_last=2,
        val_sentences=20,
        test_sentences=20,
    ),
}
# A class sets ANNOTATED_PROFILE=class once for every chapter. Here that is the smoke run: the
# sample's 20 minutes buy a BLEU below 1 on a CPU, so in class this chapter shows its machinery
# and leaves the long runs for a GPU.
WMT_PROFILES["class"] = WMT_PROFILES["smoke"]


def wmt_profile(name: str | None = None) -> tuple[str, WMTConfig]:
    """The WMT profile named (or by $ANNOTATED_PROFILE, default "sample") and its configuration."""
    return pick_profile(WMT_PROFILES, name, "sample")


# %% tags=["active-ipynb"] slideshow={"slide_type": "-"}
# # NBVAL_IGNORE_OUTPUT
# profile, config = wmt_profile()  # executed with "sample"; CI runs "smoke"
# print(f"profile: {profile}")
# config

# %% [markdown] slideshow={"slide_type": "slide"}
# **The sizes of Table 3.** Chapter 2 counted the parameters of every Table 3 row from our own
# modules. The two this chapter is about, with a shared vocabulary of 37,000:

# %% tags=["active-ipynb"] slideshow={"slide_type": "-"}
# table3_parameter_counts().set_index("Table 3 row").loc[["base", "big"]]

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 4. The corpus, encoded
#
# Both sides of the training data go into one vocabulary, and every split is then encoded with it.
# Sources end with `</s>`, as in chapter 5. Training pairs with a side longer than `max_length`
# subwords are dropped. The web-crawled part of WMT has a few very long "sentences" (whole
# paragraphs, or lists) that would not fit a batch and teach little. In every profile the vocabulary
# is learned from the full training split of the chosen data. So the tables below are the same in
# CI's smoke run as in the real one.


# %%
def subword_settings(config: WMTConfig) -> dict:
    return {"data": f"wmt14 {config.data} train, English and German", "model": "bpe"}


def load_wmt_corpus(config: WMTConfig, folder: str | Path | None = None) -> Corpus:
    """Plain-text splits, the shared vocabulary (loaded from `folder` when saved there), ids."""
    raw = {split: wmt_text(split, config.data) for split in ("train", "val", "test")}
    path = None if folder is None else Path(folder) / "subwords.json"
    corpus = subword_corpus(raw, config.vocab_size, subword_settings(config), path)
    kept = [
        i
        for i, (s, t) in enumerate(corpus.ids["train"])
        if max(len(s), len(t)) <= config.max_length
    ]
    corpus.raw["train"] = [corpus.raw["train"][i] for i in kept]
    corpus.ids["train"] = [corpus.ids["train"][i] for i in kept]
    return corpus


def subword_table(corpus: Corpus) -> pd.DataFrame:
    """Sentences, words and subwords per split and language."""
    rows = []
    for split, pairs in corpus.raw.items():
        for index, language in enumerate(("English", "German")):
            words = sum(len(pair[index].split()) for pair in pairs)
            pieces = sum(len(pair[index]) for pair in corpus.ids[split]) - (
                len(pairs) if index == 0 else 0  # not the </s> ending each source
            )
            unknown = sum(
                i == corpus.src_vocab.unk for pair in corpus.ids[split] for i in pair[index]
            )
            rows.append(
                {
                    "split": split,
                    "language": language,
                    "sentences": len(pairs),
                    "words": words,
                    "subwords": pieces,
                    "subwords per word": round(pieces / words, 2),
                    "<unk>": unknown,
                }
            )
    return pd.DataFrame(rows)


# %% tags=["active-ipynb"] slideshow={"slide_type": "-"}
# corpus = load_wmt_corpus(config, RUNS_DIR / f"wmt-{profile}")  # the run's vocabulary, if saved
# print(f"shared vocabulary: {len(corpus.src_vocab)} symbols")
# subword_table(corpus)

# %% [markdown] slideshow={"slide_type": "slide"}
# How the vocabulary cuts sentences (`▁` marks the start of a word). The most frequent words ("and",
# "still", "sich", "das") stay whole. Names, compounds and rare forms come apart into frequent
# pieces. With only 8,000 symbols learned from 10,000 sentences, so do some common words ("love",
# "lieben").

# %% tags=["active-ipynb"] slideshow={"slide_type": "-"}
# subwords = corpus.src_vocab
# for sentence in [corpus.raw["test"][0][0], corpus.raw["test"][0][1], corpus.raw["val"][0][1]]:
#     print(" ".join(subwords.split([sentence])[0]))
# print("exact round trip on the test set:", all(
#     subwords.decode_texts(subwords.encode_texts([text]))[0] == text
#     for pair in corpus.raw["test"] for text in pair
# ))

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 5. Shared weights (section 3.4)
#
# With one vocabulary, chapter 2's `share_embeddings=True` makes one matrix of three: the source
# embedding, the target embedding and the output projection. For the base model that is 37,000 × 512 =
# 18.9M parameters stored once instead of three times. That is about 29% of the 65M the paper reports.
# The test suite checks that the three are one tensor, and that a gradient step moves them together.
# The cell below builds the sample's model both ways: sharing saves two of its three 8,000 × 256
# matrices.

# %% tags=["active-ipynb"] slideshow={"slide_type": "-"}
# # the sample run's model twice: its three matrices shared as one, and kept apart
# vocab, sample = len(corpus.src_vocab), WMT_PROFILES["sample"]
# shared = make_model(sample.model_config(vocab, vocab))
# apart = make_model(dataclasses.replace(sample.model_config(vocab, vocab), share_embeddings=False))
# embedding = shared.src_embed[0].lut.weight
# print("one matrix:", embedding is shared.tgt_embed[0].lut.weight is shared.generator.weight)
# print(
#     f"parameters: {count_parameters(shared):,} shared, "
#     f"{count_parameters(apart):,} with three matrices"
# )

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 6. Steps of 25,000 tokens: gradient accumulation (section 5.1)
#
# The paper's step holds about 25,000 target tokens (section 5.1), and it trained on eight GPUs
# (section 5.2). How the tokens of a step were shared among the GPUs it does not say. A process that
# cannot hold that many tokens at once can still take the same step. It runs several micro-batches,
# adds up their gradients, and updates once. Chapter 3's loop does exactly this (`accumulate`). It
# divides by the tokens of the whole step, so the update is the same as with one big batch, and
# chapter 3's tests check it. With $P$ processes, each runs `accumulate` micro-batches, and the step
# is their sum:
#
# $$\text{tokens per step} \approx \text{max\_tokens} \times \text{accumulate} \times P$$
#
# `WMTConfig.accumulation(P)` picks `accumulate` from the wanted step size. For the paper's base
# model that is 3,125 × 8 × 1 on one GPU, and 3,125 × 1 × 8 on eight. A step has the same size either
# way, so the schedule (which counts steps) means the same thing. Our batches count padded *target*
# tokens. Sources are held to the same budget, so a step holds about as many source tokens. The table
# below plans the sample with one process and with two: the steps come out the same, and only which
# process runs which micro-batch changes.


# %%
def step_plan(config: WMTConfig, corpus: Corpus, processes: int = 1) -> dict:
    """How the training data is cut into micro-batches and optimizer steps."""
    pairs = corpus.ids["train"][: config.train_pairs]
    accumulate = config.accumulation(processes)
    plan = BatchPlan.build(pairs, config.max_tokens, accumulate, processes, config.seed)
    target = sum(len(t) + 1 for _, t in pairs)
    source = sum(len(s) for s, _ in pairs)
    steps = plan.steps_per_epoch
    return {
        "processes": processes,
        "micro-batches": len(plan.batches),
        "accumulate (per process)": accumulate,
        "steps per epoch": steps,
        "target tokens per step": round(target / steps),
        "source tokens per step": round(source / steps),
        "padding": round(padding_fraction(pairs, plan.batches), 4),
    }


# %% tags=["active-ipynb"] slideshow={"slide_type": "-"}
# pd.DataFrame([step_plan(WMT_PROFILES["sample"], corpus, processes) for processes in (1, 2)])

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 7. Training, averaging and decoding (sections 5.2–5.4, 6.1)
#
# `train_wmt` builds the corpus and saves the vocabulary in the run folder. Then it hands everything
# to `train_run` (`annotated/training/runs.py`), as chapter 7 does for Multi30k. That brings the
# paper's Adam settings and equation 3, label smoothing of 0.1, and dropout. Each evaluation writes a
# checkpoint, scores a validation BLEU (greedy, on part of newstest2013) and keeps a snapshot of the
# weights. At the end the last `average_last` snapshots are averaged (section 6.1: 5 for base, 20 for
# big). A stopped run resumes where it was.
#
# The translator is chapter 6's, over one shared `Subwords`. Its pieces join back into the text
# exactly, so there is nothing to detokenize and no `<unk>` to copy. Decoding is the paper's: beam
# size 4 and length penalty $\alpha = 0.6$ (section 6.1). An output may be at most 50 symbols longer
# than the longest source in its batch; the paper says 50 longer than the input.


# %%
def train_wmt(
    config: WMTConfig, folder: str | Path, progress: bool = True, corpus: Corpus | None = None
) -> Run:
    """Train (or resume, or just load) a WMT model in `folder`, on one process or under torchrun."""
    folder = Path(folder)
    rank, world = rank_and_world()
    if rank == 0:
        folder.mkdir(parents=True, exist_ok=True)
        corpus = corpus or load_wmt_corpus(config, folder)
        save_vocabularies(corpus, folder)  # or refuse a folder holding another vocabulary
    if world > 1:  # the others read the vocabulary the first process saved
        torch.distributed.barrier()
        corpus = corpus or load_wmt_corpus(config, folder)
    config = dataclasses.replace(config, accumulate=config.accumulation(world))
    return train_run(config, folder, corpus, progress)


# %% tags=["active-ipynb"]
# # NBVAL_IGNORE_OUTPUT
# run = train_wmt(config, RUNS_DIR / f"wmt-{profile}", corpus=corpus)
# steps, minutes = int(run.history.step.max()), run.history.seconds.sum() / 60
# print(
#     f"{count_parameters(run.translator.model) / 1e6:.1f}M parameters, {steps} steps, "
#     f"{minutes:.1f} training minutes, {run.history.tokens.mean():.0f} target tokens per step, "
#     f"{run.history.tokens.sum() / run.history.seconds.sum():.0f} target tokens/s"
# )

# %% tags=["active-ipynb"] slideshow={"slide_type": "slide"}
# # NBVAL_IGNORE_OUTPUT
# training_chart(run.history, run.evals, title="The WMT14 sample run (validation: newstest2013)")

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 8. Scores, and the paper's Table 2 (section 6.1)
#
# The scores are chapter 6's. sacreBLEU scores the plain output against the plain references, and
# prints its signature. Beside it stands the **tokenized BLEU** of the paper's own scripts
# (tensor2tensor's `get_ende_bleu.sh`: Moses tokens, hyphenated compounds split). The paper's Table 2
# numbers are tokenized BLEU on newstest2014; it does not say which of the two versions. Both metrics
# score the same decoded sentences. They differ mainly in how the text is cut into tokens before
# n-grams are counted. So compare each metric only with itself, never one with the other. The set
# scored is printed under the signature: the sample's is the filtered newstest2014 (2,737
# sentences), not the full one (3,003). The translations after it show what such a score looks like,
# and section 10 reads them.


# %%
def wmt_scores(run: Run) -> pd.DataFrame:
    """The run's final scores on newstest2013 and newstest2014, with the tokenized BLEU."""
    return final_scores(run, "test", extra=tokenized_bleu)


# %% tags=["active-ipynb"] slideshow={"slide_type": "-"}
# # NBVAL_IGNORE_OUTPUT
# scores = wmt_scores(run)
# scores[["split", "weights", "decoding", "BLEU", "tokenized BLEU", "chrF", "sentences/s"]]

# %% tags=["active-ipynb"] slideshow={"slide_type": "slide"}
# # NBVAL_IGNORE_OUTPUT
# print(scores["BLEU signature"][0])
# from annotated.base.datasets import WMT14_TEST_SETS
#
# print("test set:", WMT14_TEST_SETS[run.config.data])

# %% tags=["active-ipynb"]
# # NBVAL_IGNORE_OUTPUT
# picks = [0, 1, 2, 5, 8]
# pd.DataFrame(
#     {
#         "English": [run.corpus.raw["test"][i][0] for i in picks],
#         "reference": [run.corpus.raw["test"][i][1] for i in picks],
#         f"beam {run.config.decoding.beam}": (run.averaged or run.translator).translate(
#             [run.corpus.raw["test"][i][0] for i in picks],
#             run.config.decoding.beam,
#             run.config.decoding.alpha,
#         ),
#     }
# )

# %% [markdown] slideshow={"slide_type": "slide"}
# **Table 2, and where this run stands.** The paper compares the Transformer with the best systems of
# 2017 on newstest2014, in BLEU and in the floating-point operations their training took. Our run's
# row is added below, in its own terms. Its BLEU is measured on the sample's filtered newstest2014,
# and its training cost is an estimate by a different method from the paper's.
#
# Table 2's footnote multiplies each model's training time by its number of GPUs and their sustained
# floating-point speed. Ours counts the arithmetic instead. A training step costs about six
# operations per parameter per token: a multiply and an add in the forward pass, and twice that in
# the backward. So the cost is about $6 \times \text{parameters} \times \text{target tokens}$. It is
# a rule of thumb, not a measurement: it leaves out attention's own products and the encoder's
# source tokens. Applied to the paper's base model, the rule lands on the same order as Table 2:
#
# | the paper's base model | |
# |---|---|
# | parameters | 65M |
# | target tokens | 100K steps × 25,000 |
# | 6 × parameters × tokens | about 10¹⁸ |
# | Table 2's training cost | 3.3 × 10¹⁸ |
#
# The other half of the table is English→French, with WMT 2014's 36 million sentence pairs and a
# 32,000 word-piece vocabulary. There the big model reached 41.8, again above every single model and
# ensemble before it. The paper gives each Transformer one training cost for the two tasks. This book
# does not train English→French; the command of section 9 would, given the data and GPUs.


# %%
def table_2() -> pd.DataFrame:
    """The paper's Table 2 as printed, plus each En-De training cost over the base model's.

    Each Transformer has one training cost, printed across both cost columns: it stands in both.
    """
    rows = [
        # model, BLEU EN-DE, BLEU EN-FR, training FLOPs EN-DE, training FLOPs EN-FR ("": no entry)
        ("ByteNet", "23.75", "", "", ""),
        ("Deep-Att + PosUnk", "", "39.2", "", "1.0e20"),
        ("GNMT + RL", "24.6", "39.92", "2.3e19", "1.4e20"),
        ("ConvS2S", "25.16", "40.46", "9.6e18", "1.5e20"),
        ("MoE", "26.03", "40.56", "2.0e19", "1.2e20"),
        ("Deep-Att + PosUnk Ensemble", "", "40.4", "", "8.0e20"),
        ("GNMT + RL Ensemble", "26.30", "41.16", "1.8e20", "1.1e21"),
        ("ConvS2S Ensemble", "26.36", "41.29", "7.7e19", "1.2e21"),
        ("Transformer (base)", "27.3", "38.1", "3.3e18", "3.3e18"),  # one cost for both tasks
        ("Transformer (big)", "28.4", "41.8", "2.3e19", "2.3e19"),
    ]
    # Strings keep the digits exactly as the paper prints them (27.3, not 27.30).
    frame = pd.DataFrame(
        rows, columns=["model", "BLEU EN-DE", "BLEU EN-FR", "FLOPs EN-DE", "FLOPs EN-FR"]
    )
    base = float(frame.loc[frame["model"] == "Transformer (base)", "FLOPs EN-DE"].item())
    frame["EN-DE cost ÷ base"] = [
        f"{float(c) / base:.1f}" if c else "" for c in frame["FLOPs EN-DE"]
    ]
    return frame


def machine_label() -> str:
    """The machine running this, in a few words for a table's row: its GPU, or its CPU cores."""
    if torch.cuda.is_available():
        return torch.cuda.get_device_name()
    return f"{cpu_kind()['cores']} CPU cores"


# %% tags=["active-ipynb"] slideshow={"slide_type": "-"}
# # NBVAL_IGNORE_OUTPUT
# table2 = table_2()
# ours = scores[(scores.split == "test") & scores.decoding.str.startswith("beam")].iloc[0]
# flops = 6 * count_parameters(run.translator.model) * int(run.history.tokens.sum())
# base_flops = float(table2.set_index("model").loc["Transformer (base)", "FLOPs EN-DE"])
# table2.loc[len(table2)] = [
#     f"this book: the {profile} run, {machine_label()}", str(ours["tokenized BLEU"]), "",
#     f"{flops:.1e}".replace("e+", "e"), "", f"{flops / base_flops:.0e}",
# ]
# table2.set_index("model")

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 9. Many processes: `DistributedDataParallel` and `torchrun`
#
# Eight GPUs train one model by **data parallelism**. Every process holds a full copy of the model,
# takes its own share of each step's micro-batches, and computes gradients for them. Before the
# update, the processes add up their gradients (an *all-reduce*). So every copy takes the same step,
# and the copies never drift apart. PyTorch's `DistributedDataParallel` (DDP) does the adding while
# the backward pass is still running, bucket by bucket, so the communication hides behind
# computation.
#
# What our code needs for it is small, and each part lives where it belongs:
#
# * `torchrun` starts one process per GPU (or CPU slot). It tells each process its rank and the
#   number of processes through environment variables. `setup_distributed` below reads them and
#   joins the process group. Where the machine has a GPU for each process, the group is **nccl**
#   between GPUs, one GPU a process. Everywhere else it is **gloo** between CPU processes. That
#   includes a machine with fewer GPUs than processes, whose processes then train on the CPU.
#   `process_group_backend` in `annotated/base/distributed.py` makes the choice.
# * Chapter 5's `BatchPlan` gives every process the same shuffled order of batches. Process $r$ takes
#   every $P$-th batch of each step, starting at the $r$-th.
# * Chapter 3's `train_step` needs the step's gradient per target token. That is the sum over every
#   process's micro-batches, divided by the tokens of the *whole* step. One small all-reduce of the
#   token counts gives that total (`sum_over_processes` in `annotated/base/distributed.py`). DDP,
#   though, *averages* the $P$ processes' gradients: it divides their sum by $P$. So each process
#   divides its loss by the step's tokens over $P$ (`tokens / world` in its code). DDP's division by
#   $P$ then leaves exactly the per-token gradient of the one large batch. Around it, `train` writes
#   checkpoints from process 0 only, and stops all processes together. A second sum adds up the
#   processes' losses, so the history's loss is the whole step's. A third agrees on stopping: if
#   any process's `on_step` asks to stop, all stop, since the others would otherwise wait forever
#   for the missing one.
# * `train_run` (`annotated/training/runs.py`) evaluates and keeps snapshots on process 0 only.
#
# Is it right? `ddp_check` trains a small model for a few steps twice, on identical global batches.
# Once it runs one process that accumulates 2 micro-batches per step. Once it runs two processes with
# one micro-batch each, started by `torchrun`. Those are two gloo processes on the CPU, or two nccl
# processes on two GPUs where the machine has them. Both runs use the same kind of device, so that
# they compare like with like, and the cell says which ran.
#
# The check computes in float64, for a reason worth knowing. Adding the same gradients in another
# order changes their last bits. Take a parameter whose true gradient is zero, such as the bias of
# the key projection: shifting every key by the same vector leaves the softmax unchanged. Its
# gradient is then pure rounding noise. Adam divides that noise by the square root of its own square,
# so the parameter moves by up to a learning rate either way. In float32 that noise is far above
# Adam's $\epsilon = 10^{-9}$; in float64 it is far below. The weights must agree to within
# $10^{-8}$ (the learning rate here is about 0.1).
#
# The check also switches **dropout off**, and that matters. With dropout on, the two ways of training
# no longer take the same steps. Dropout's masks are random draws, and each process draws from its
# own generator, seeded alike (chapter 3's `resume`). One process accumulating two micro-batches
# draws the masks of the first micro-batch, then fresh ones for the second. Two processes each draw
# the *first* masks, for different micro-batches. Both are valid dropout, but not the same numbers,
# so only the dropout-free arithmetic can be compared exactly. That every process repeats the same
# mask stream is a simplification of ours. A checkpoint holds process 0's generators, and giving each
# process a stream of its own would mean saving each one's.


# %%
def setup_distributed() -> tuple[int, int]:
    """Join the process group that torchrun describes (nccl where every process has a GPU of its
    own, else gloo on the CPU; `process_group_backend`): rank, world."""
    if "RANK" not in os.environ or torch.distributed.is_initialized():
        return rank_and_world()
    processes = int(os.environ.get("LOCAL_WORLD_SIZE") or os.environ.get("WORLD_SIZE") or 1)
    gpus = cuda_gpus()
    backend = process_group_backend(processes, gpus, os.environ.get(DEVICE_ENV, ""))
    if backend == "gloo" and 0 < gpus < processes and os.environ.get("LOCAL_RANK") == "0":
        print(
            f"{processes} processes and {gpus} GPU(s) here: nccl needs a GPU a process, so the "
            "processes train on the CPU with gloo",
            file=sys.stderr,
        )
    # DistributedDataParallel imports torch._dynamo the first time it is built, and that import
    # takes a reference to whatever default process group exists then. Done after the group is
    # made, it keeps the group alive past destroy_process_group: its gloo threads then run on
    # until the process exits, and tearing them down at exit aborted a process now and then
    # ("terminate called without an active exception"). Imported first, it holds nothing.
    importlib.import_module("torch._dynamo")

    if backend == "nccl":
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    # Rank 0 may first download and prepare WMT14 (an hour or more) while the others wait at a
    # barrier: a timeout far past PyTorch's default of ten minutes.
    torch.distributed.init_process_group(backend, timeout=datetime.timedelta(hours=6))
    return rank_and_world()


def teardown_distributed() -> None:
    """Leave the process group together: wait for every process, then destroy it (if any).

    The barrier keeps a process that finished first (any but the first, which still writes the
    checkpoint) from closing its connections while the others may still be talking. Destroying
    the group stops its communication threads, provided nothing else holds it (see
    `setup_distributed`); a test checks that no gloo thread outlives this call.
    """
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


def ddp_check(folder: str | Path, steps: int = 4, processes: int = 2) -> dict:
    """Train a small model with `processes` processes and with one; compare the results.

    The processes join by nccl, one GPU each, where the machine has as many GPUs as processes,
    else by gloo on the CPU; the one process then trains on the same kind of device.
    """
    folder = Path(folder)
    gpus = cuda_gpus()
    env = dict(os.environ)
    if process_group_backend(processes, gpus, env.get(DEVICE_ENV, "")) == "gloo":
        env[DEVICE_ENV] = "cpu"  # the one process too: CPU against CPU
    results, seconds = {}, {}
    for count in (1, processes):
        out = folder / f"ddp-{count}.pt"
        command = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc_per_node={count}",
            "-m",
            "annotated.ddp_check",
            "--out",
            str(out),
            "--steps",
            str(steps),
            "--accumulate",
            str(processes // count),
        ]
        started = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
        seconds[count] = time.perf_counter() - started
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed:\n{done.stdout}\n{done.stderr}")
        results[count] = read_checkpoint(out)
    ran = json.loads(out.with_suffix(".json").read_text(encoding="utf-8"))  # the many processes'
    one, many = results[1], results[processes]
    difference = max(
        (one["model"][name] - many["model"][name]).abs().max().item() for name in one["model"]
    )
    losses = [(a["loss"], b["loss"]) for a, b in zip(one["history"], many["history"], strict=True)]
    return {
        "processes": processes,
        "backend": ran["backend"],
        "device": ran["device"],
        "steps": steps,
        "max parameter difference": difference,
        "max loss difference": max(abs(a - b) for a, b in losses),
        "matches": difference < 1e-8 and all(math.isclose(a, b, rel_tol=1e-9) for a, b in losses),
        "seconds (1 process)": round(seconds[1], 1),
        f"seconds ({processes} processes)": round(seconds[processes], 1),
    }


# %% tags=["active-ipynb"] slideshow={"slide_type": "slide"}
# # NBVAL_IGNORE_OUTPUT
# with tempfile.TemporaryDirectory() as scratch:
#     check = ddp_check(scratch)
# print(f"{check['processes']} processes joined by {check['backend']}, on the {check['device']}")
# check

# %% tags=["active-ipynb"] slideshow={"slide_type": "-"}
# print("two processes take the same steps as one:", check["matches"])

# %% [markdown]
# The two runs' weights differ by less than $10^{-9}$ in the output above, well inside the check's
# $10^{-8}$. One process accumulating and two processes sharing the work take the same steps.
#
# On a machine with eight GPUs, the paper's base model on the full data is one command. It downloads
# and prepares WMT14 on first use; give `ANNOTATED_DATA_DIR` to read the archives from a folder
# instead:
#
# ```
# torchrun --standalone --nproc_per_node=8 -m annotated.train wmt --profile base
# ```
#
# Each of the 8 processes runs micro-batches of 3,125 tokens, one per step, for steps of 25,000
# tokens. `--profile big` trains the big model. The same command with `--nproc_per_node=1` runs on
# one GPU, accumulating 8 micro-batches per step. Its steps hold the same batches and take about
# eight times as long. With dropout on, they are not the identical steps, as the dropout paragraph
# above explains.

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 10. What this run costs, and what stands between it and 27.3
#
# | | paper base | paper big | the `sample` run here |
# |---|---|---|---|
# | hardware | 8 P100 GPUs | 8 P100 GPUs | 2 CPU cores |
# | time | 12 hours (100K steps × 0.4 s) | 3.5 days (300K steps × 1.0 s) | a budget of 20 training minutes |
# | training cost (Table 2) | 3.3 × 10¹⁸ FLOPs | 2.3 × 10¹⁹ FLOPs | ≈ 8.9 × 10¹³ FLOPs (6 × parameters × tokens, section 8) |
# | data seen | ≈ 2.5 × 10⁹ target tokens | ≈ 7.5 × 10⁹ | ≈ 2.0 × 10⁶ (436 steps of about 4479) |
# | newstest2014 BLEU | 27.3 (tokenized) | 28.4 (tokenized) | 0.17 tokenized, 0.17 sacreBLEU (section 8) |
#
# The gap is not in the code: the sample run went through the paper's recipe step by step. It is in
# the data and the compute. Ten thousand sentence pairs are about 0.2% of WMT, too few to learn a
# language pair. News sentences are long and varied, and most words of newstest2014 occur in the
# sample a handful of times or never. The model is also eight times smaller than the base model. It
# sees 0.08% of the target tokens the base model saw (the table's "data seen" row). And it takes 436
# steps where the paper takes 100,000.
#
# **The plan, and how the run kept it.** Section 7's first printed line is the plan, made from a
# short probe of the machine's speed:
#
# | | the plan | the run |
# |---|---|---|
# | seconds a step | 2.3 (26 steps a minute) | 2.44 on average |
# | steps | 436 of the recipe's 100,000 | 436 |
# | training minutes | 90% of what the 20 minutes left after the probe | 17.7 |
#
# The steps cost 6% more than the probe had measured, and the run still ended inside its budget. The
# plan also warns that the run trains less than its recipe: 436 of its 100,000 steps. The warmup's
# 300 steps were more than two thirds of them. By the end the learning rate had come down only to
# about 83% of its peak (equation 3). The training loss was still falling when the run stopped, as
# section 7's chart shows.
#
# **What it translates.** On newstest2014 the run scored 0.17 BLEU (beam search on the averaged
# weights; 0.12 greedy). Section 8's table shows what that means. The model writes German made of the
# most frequent words and phrases (*Das Hotel ist die*, *Es ist die*, *die der*). Between them it puts
# made-up words (*Verhut*, *Verkü*), and it often writes the same sentence for different sources. A
# model this early in training has learned which German words are common, and little yet about how
# they depend on the English. Read the numbers as a check that the pipeline runs end to end and
# scores honestly, not as a result. The way to 27.3 is the command in section 9, on the full data,
# with GPUs. Runs of this profile on other machines are in the records (`benchmarks/README.md`).

# %% [markdown] slideshow={"slide_type": "slide"}
# ## Exercises
#
# **8.1 Predict.** The same base model is trained once on one GPU and once on eight, with
# `tokens_per_step=25000` both times. Do the two runs take the same number of optimizer steps
# per epoch? The same steps?
#
# <details><summary>Answer</summary>
#
# The same number. One GPU accumulates 8 micro-batches of 3,125 tokens per step, and eight GPUs take
# one each. So a step holds the same batches either way, and the schedule means the same thing. The
# steps are the same up to rounding only without dropout. Then the gradients are sums of the same
# numbers added in another order, so the weights drift apart in their last bits. Section 9's check,
# in float64 with dropout off, shows how small that is. With the base model's dropout on, the runs
# differ by more than rounding. Each draws its masks in its own order: one GPU a fresh mask per
# micro-batch, eight GPUs the same first masks on each. So the two runs are equally good samples of
# training, but not the same steps.
#
# </details>
#
# **8.2 Implement** `my_accumulation(tokens_per_step, max_tokens, processes)`: how many
# micro-batches each process runs per optimizer step so that a step holds about `tokens_per_step`
# tokens, rounded to the nearest whole number and never fewer than one.
#
# **8.3 Modify.** Run `step_plan` for the `sample` profile with 1, 2 and 4 processes. What happens
# to the steps per epoch when `accumulate` cannot stay a whole number, and why is that a problem
# for comparing runs?
#
# <details><summary>Answer</summary>
#
# With 4 processes, 6,000 tokens a step would need 0.5 micro-batches of 3,000 each. It is raised to
# at least 1, so a step holds 12,000 tokens and an epoch has half as many steps. The learning-rate
# schedule counts steps, so the two runs then follow different schedules over the same data.
#
# </details>
#
# The check's cases and the mistakes it recognises are in `annotated/exercises/ch08_wmt.py`.

# %% tags=["active-ipynb"]
# from annotated.exercises import check  # runs your function against the book's
# from annotated.exercises.ch08_wmt import exercise_8_2

# %% tags=["active-ipynb", "hide-input"]
# def my_accumulation(tokens_per_step, max_tokens, processes):
#     ### BEGIN SOLUTION
#     return max(1, round(tokens_per_step / (max_tokens * processes)))
#     ### END SOLUTION
#
#
# check(exercise_8_2, my_accumulation)
