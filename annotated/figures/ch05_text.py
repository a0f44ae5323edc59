"""Chapter 5's tables: how often each vocabulary meets an unknown word, how much padding three
ways of batching waste, and the sizes of the token batches.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import pandas as pd

from annotated.ch05_text import Corpus, padding_fraction, token_batches

Pairs = Sequence[tuple[list[int], list[int]]]  # (source ids, target ids) of each sentence pair


def vocab_table(corpus: Corpus) -> pd.DataFrame:
    """Vocabulary sizes and how often each split's tokens are unknown."""
    rows = []
    for index, (language, vocab) in enumerate(
        (("German", corpus.src_vocab), ("English", corpus.tgt_vocab))
    ):
        row = {"language": language, "vocabulary": len(vocab)}
        for split, pairs in corpus.ids.items():
            ids = [i for pair in pairs for i in pair[index] if i != vocab.specials.eos]
            row[f"<unk> in {split}"] = f"{100 * sum(i == vocab.unk for i in ids) / len(ids):.2f}%"
        rows.append(row)
    return pd.DataFrame(rows).set_index("language")


def batching_table(pairs: Pairs, max_tokens: int) -> pd.DataFrame:
    """Padding wasted by three ways of batching the same pairs."""
    ours = token_batches(pairs, max_tokens)
    size = round(len(pairs) / len(ours))  # the same number of sentences per batch, on average
    shuffled = list(range(len(pairs)))
    random.Random(0).shuffle(shuffled)
    random_batches = [shuffled[i : i + size] for i in range(0, len(shuffled), size)]
    real = sum(len(s) + len(t) + 1 for s, t in pairs)
    rows = [
        ("sorted by length, token budget (ours)", padding_fraction(pairs, ours)),
        (f"random order, {size} sentences a batch", padding_fraction(pairs, random_batches)),
        ("every sentence padded to 72 tokens", 1 - real / (len(pairs) * 2 * 72)),
    ]
    return pd.DataFrame(
        [
            {"batching": name, "padding (% of slots)": round(100 * fraction, 1)}
            for name, fraction in rows
        ]
    ).set_index("batching")


def batch_sizes_table(pairs: Pairs, batches: Sequence[Sequence[int]]) -> pd.DataFrame:
    """How many sentences the batches hold, and their padded target tokens: count, mean, range."""
    padded = [len(b) * max(len(pairs[i][1]) + 1 for i in b) for b in batches]
    sizes = pd.DataFrame({"sentences": [len(b) for b in batches], "padded target tokens": padded})
    return sizes.describe().loc[["count", "mean", "min", "max"]].round(1)
